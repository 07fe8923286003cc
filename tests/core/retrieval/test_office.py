"""Word, PowerPoint and Excel files are read with their headings as chunk headings, tables as tables."""

from __future__ import annotations

from pathlib import Path

import docx
import openpyxl
import pptx
from pptx.util import Inches

from core.retrieval.chunking import chunk_document
from core.retrieval.ingest import IngestRequest, ingest
from core.retrieval.loaders import LoadedDocument, Skipped, iter_path, load_file
from core.store.db import Database


def write_docx(path: Path) -> None:
    document = docx.Document()
    document.core_properties.title = "Incident handbook"
    document.add_heading("Incident handbook", level=0)  # the Title style
    document.add_paragraph("What to do when the relay stops answering.")
    document.add_heading("Paging", level=1)
    document.add_paragraph("Page the on-call engineer through the pager rota.")
    document.add_paragraph("Open an incident channel", style="List Bullet")
    document.add_paragraph("Post the first status update", style="List Bullet")
    document.add_heading("Escalation contacts", level=2)
    table = document.add_table(rows=3, cols=2)
    for row, values in zip(table.rows, [("Team", "Contact"), ("Database", "dba@example.com"), ("Network", "noc | desk")]):
        for cell, value in zip(row.cells, values):
            cell.text = value
    document.add_heading("Closing", level=1)
    document.add_paragraph("Write the review within five working days.")
    document.save(path)


def write_pptx(path: Path) -> None:
    deck = pptx.Presentation()
    title_slide = deck.slides.add_slide(deck.slide_layouts[0])
    title_slide.shapes.title.text = "Quarterly platform review"
    title_slide.placeholders[1].text = "Platform team, Q1"
    bullets = deck.slides.add_slide(deck.slide_layouts[1])
    bullets.shapes.title.text = "Roadmap"
    frame = bullets.placeholders[1].text_frame
    frame.text = "Move to managed Postgres"
    sub = frame.add_paragraph()
    sub.text = "pilot in April"
    sub.level = 1
    bullets.notes_slide.notes_text_frame.text = "Mention the budget approval."
    table_slide = deck.slides.add_slide(deck.slide_layouts[5])  # title only
    table_slide.shapes.title.text = "Uptime"
    shape = table_slide.shapes.add_table(2, 2, Inches(1), Inches(2), Inches(4), Inches(1))
    for cell, value in zip([c for row in shape.table.rows for c in row.cells], ["Service", "Uptime", "relay", "99.95%"]):
        cell.text = value
    deck.save(path)


def write_xlsx(path: Path) -> None:
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.title = "Budget"
    sheet.append(["Item", "Cost"])
    sheet.append(["Servers", 1200])
    sheet.append(["Licences", 300.0])
    sheet["D10"] = None  # formatting far away is not a column
    other = workbook.create_sheet("Owners")
    other.append(["Service", "Owner"])
    other.append(["relay", "Ada"])
    workbook.create_sheet("Empty")
    workbook.save(path)


def _chunks(document: LoadedDocument) -> list:
    return chunk_document(document.text, title=document.title, max_tokens=128, overlap_tokens=16)


def test_a_docx_keeps_its_headings_as_chunk_headings_and_its_table(tmp_path: Path) -> None:
    path = tmp_path / "handbook.docx"
    write_docx(path)
    document = load_file(path)
    assert isinstance(document, LoadedDocument), document
    assert document.title == "Incident handbook"
    assert "# Paging" in document.text and "## Escalation contacts" in document.text
    assert "- Open an incident channel\n- Post the first status update" in document.text
    assert "| Team | Contact |\n|---|---|\n| Database | dba@example.com |\n| Network | noc \\| desk |" in document.text
    by_path = {chunk.heading_path: chunk.text for chunk in _chunks(document)}
    assert "pager rota" in by_path[("Paging",)]
    assert "dba@example.com" in by_path[("Paging", "Escalation contacts")]
    assert "five working days" in by_path[("Closing",)]


def test_a_pptx_has_a_heading_per_slide_with_its_text_table_and_notes(tmp_path: Path) -> None:
    path = tmp_path / "review.pptx"
    write_pptx(path)
    document = load_file(path)
    assert isinstance(document, LoadedDocument), document
    assert document.title == "Quarterly platform review"
    by_path = {chunk.heading_path: chunk.text for chunk in _chunks(document)}
    assert "Platform team, Q1" in by_path[("Slide 1: Quarterly platform review",)]
    roadmap = by_path[("Slide 2: Roadmap",)]
    assert "- Move to managed Postgres\n  - pilot in April" in roadmap
    assert "Speaker notes: Mention the budget approval." in roadmap
    assert "| relay | 99.95% |" in by_path[("Slide 3: Uptime",)]


def test_an_xlsx_has_a_heading_per_sheet_and_its_rows_as_a_table(tmp_path: Path) -> None:
    path = tmp_path / "budget.xlsx"
    write_xlsx(path)
    document = load_file(path)
    assert isinstance(document, LoadedDocument), document
    assert document.title == "budget"  # no title property: the file name
    assert "# Budget\n\n| Item | Cost |\n|---|---|\n| Servers | 1200 |\n| Licences | 300 |" in document.text
    assert "# Owners" in document.text and "| relay | Ada |" in document.text
    assert "# Empty" not in document.text


def test_a_damaged_office_file_is_skipped_with_a_reason(tmp_path: Path) -> None:
    path = tmp_path / "broken.docx"
    path.write_bytes(b"PK\x03\x04 this is not really a zip")
    result = load_file(path)
    assert isinstance(result, Skipped)
    assert result.reason.startswith("the Word document could not be read")


def test_office_files_are_found_in_folders(tmp_path: Path) -> None:
    write_docx(tmp_path / "a.docx")
    write_pptx(tmp_path / "b.pptx")
    write_xlsx(tmp_path / "c.xlsx")
    loaded = list(iter_path(tmp_path))
    assert [Path(d.uri).name for d in loaded if isinstance(d, LoadedDocument)] == ["a.docx", "b.pptx", "c.xlsx"]


async def test_a_docx_and_a_pptx_are_ingested_with_their_headings_as_chunk_headings(db: Database, tmp_path: Path) -> None:
    write_docx(tmp_path / "handbook.docx")
    write_pptx(tmp_path / "review.pptx")
    summary = await ingest(
        db, IngestRequest(source="office", exposure="prefetch", targets=[str(tmp_path)]),
        embedder=None,
    )
    assert (summary.added, summary.skipped) == (2, ())
    async with db.connection() as conn:
        cursor = await conn.execute(
            "SELECT d.title, c.heading_path, c.text FROM chunks c JOIN documents d ON d.id = c.document_id"
            " JOIN sources s ON s.id = d.source_id WHERE s.name = 'office' ORDER BY d.title, c.ord"
        )
        rows = await cursor.fetchall()
    headings = {(title, tuple(path)) for title, path, _ in rows}
    assert {
        ("Incident handbook", ("Paging",)),
        ("Incident handbook", ("Paging", "Escalation contacts")),
        ("Incident handbook", ("Closing",)),
        ("Quarterly platform review", ("Slide 2: Roadmap",)),
        ("Quarterly platform review", ("Slide 3: Uptime",)),
    } <= headings
    table = next(text for title, path, text in rows if tuple(path) == ("Paging", "Escalation contacts"))
    assert "| Database | dba@example.com |" in table
