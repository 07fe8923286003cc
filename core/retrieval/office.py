"""Turn Word, PowerPoint and Excel files into Markdown whose headings are `#` lines, for chunking."""

from __future__ import annotations

import datetime as dt
import io
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

# A spreadsheet can hold a million rows; past this many per sheet the rest is counted, not indexed.
MAX_SHEET_ROWS = 5000
_HEADING_STYLE_RE = re.compile(r"^heading\s*([1-9])$", re.IGNORECASE)
_SPACE_RE = re.compile(r"\s+")


@dataclass(frozen=True, kw_only=True)
class OfficeText:
    """A document's Markdown text and the title it declares (empty when none)."""

    title: str
    text: str


def _cell(value: Any) -> str:
    """One table cell on one line, its pipes escaped so the row stays a row."""
    if value is None:
        return ""
    if isinstance(value, dt.datetime):
        text = value.isoformat(sep=" ", timespec="minutes" if value.second == 0 else "seconds")
    elif isinstance(value, float) and value.is_integer():
        text = str(int(value))
    else:
        text = str(value)
    return _SPACE_RE.sub(" ", text).strip().replace("|", "\\|")


def markdown_table(rows: Sequence[Sequence[Any]]) -> str:
    """Rows as a Markdown table, the first row as its header; short rows are padded."""
    cells = [[_cell(value) for value in row] for row in rows]
    cells = [row for row in cells if any(row)]
    if not cells:
        return ""
    width = max(len(row) for row in cells)
    lines = []
    for index, row in enumerate(cells):
        padded = row + [""] * (width - len(row))
        lines.append("| " + " | ".join(padded) + " |")
        if index == 0:
            lines.append("|" + "---|" * width)
    return "\n".join(lines)


# ----- Word ---------------------------------------------------------------------------------------


def _heading_level(style: Any) -> int | None:
    """1–6 for a Title or Heading N style (or a style based on one), else None."""
    for _ in range(4):  # custom heading styles are usually based on a built-in one
        if style is None:
            return None
        name = (style.name or "").strip()
        if name.lower() == "title":
            return 1
        match = _HEADING_STYLE_RE.match(name)
        if match:
            return min(int(match.group(1)), 6)
        style = getattr(style, "base_style", None)
    return None


def _docx_table(table: Any) -> str:
    rows = []
    for row in table.rows:
        values: list[str] = []
        previous = None
        for cell in row.cells:
            # A merged cell is returned once per grid column it spans: keep it once.
            if previous is not None and cell._tc is previous:
                continue
            previous = cell._tc
            values.append(cell.text)
        rows.append(values)
    return markdown_table(rows)


def docx_to_markdown(data: bytes) -> OfficeText:
    """Paragraphs and tables in document order; Title and Heading N styles become `#` lines."""
    import docx
    from docx.table import Table

    document = docx.Document(io.BytesIO(data))
    blocks: list[str] = []
    first_heading = ""
    for item in document.iter_inner_content():
        if isinstance(item, Table):
            table = _docx_table(item)
            if table:
                blocks.append(table)
            continue
        text = item.text.strip()
        if not text:
            continue
        level = _heading_level(item.style)
        if level is not None:
            first_heading = first_heading or text
            blocks.append("#" * level + " " + _SPACE_RE.sub(" ", text))
            continue
        style_name = ((item.style.name if item.style is not None else "") or "").lower()
        if style_name.startswith("list number"):
            text = "1. " + text
        elif style_name.startswith("list"):
            text = "- " + text
        # Consecutive list items are lines of one block, not paragraphs of their own.
        if text.startswith(("- ", "1. ")) and blocks and blocks[-1].split("\n")[-1].startswith(("- ", "1. ")):
            blocks[-1] += "\n" + text
        else:
            blocks.append(text)
    title = (document.core_properties.title or "").strip() or first_heading
    return OfficeText(title=title, text="\n\n".join(blocks))


# ----- PowerPoint ---------------------------------------------------------------------------------


def _shapes(shapes: Iterable[Any]) -> Iterator[Any]:
    """Every shape, with groups opened, top to bottom then left to right as a reader scans a slide."""
    for shape in sorted(shapes, key=lambda s: ((s.top or 0), (s.left or 0))):
        if hasattr(shape, "shapes"):  # a group
            yield from _shapes(shape.shapes)
        else:
            yield shape


def _is_body_placeholder(shape: Any) -> bool:
    """Body and content placeholders hold a slide's bullet list; text boxes and subtitles do not."""
    from pptx.enum.shapes import PP_PLACEHOLDER

    if not shape.is_placeholder:
        return False
    return shape.placeholder_format.type in (PP_PLACEHOLDER.BODY, PP_PLACEHOLDER.OBJECT)


def _slide_blocks(slide: Any, title_shape: Any) -> list[str]:
    blocks: list[str] = []
    for shape in _shapes(slide.shapes):
        if title_shape is not None and shape.shape_id == title_shape.shape_id:
            continue
        if getattr(shape, "has_table", False) and shape.has_table:
            table = markdown_table([[cell.text for cell in row.cells] for row in shape.table.rows])
            if table:
                blocks.append(table)
        elif getattr(shape, "has_text_frame", False) and shape.has_text_frame:
            bulleted = _is_body_placeholder(shape)
            lines = []
            for paragraph in shape.text_frame.paragraphs:
                text = _SPACE_RE.sub(" ", paragraph.text).strip()
                if text:
                    lines.append(("  " * paragraph.level + "- " + text) if bulleted else text)
            if lines:
                blocks.append("\n".join(lines))
    return blocks


def pptx_to_markdown(data: bytes) -> OfficeText:
    """One `# Slide N: title` section per slide: its text, tables and speaker notes."""
    import pptx

    presentation = pptx.Presentation(io.BytesIO(data))
    sections: list[str] = []
    first_title = ""
    for number, slide in enumerate(presentation.slides, start=1):
        title_shape = slide.shapes.title
        title = _SPACE_RE.sub(" ", title_shape.text).strip() if title_shape is not None else ""
        first_title = first_title or title
        blocks = [f"# Slide {number}: {title}" if title else f"# Slide {number}"]
        blocks.extend(_slide_blocks(slide, title_shape))
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            notes = slide.notes_slide.notes_text_frame.text.strip()
            if notes:
                blocks.append("Speaker notes: " + notes)
        if len(blocks) > 1 or title:
            sections.append("\n\n".join(blocks))
    title = (presentation.core_properties.title or "").strip() or first_title
    return OfficeText(title=title, text="\n\n".join(sections))


# ----- Excel --------------------------------------------------------------------------------------


def xlsx_to_markdown(data: bytes) -> OfficeText:
    """One `# sheet name` section per worksheet, its rows as a table (values, not formulas)."""
    import openpyxl

    # read_only streams rows instead of building every cell; data_only gives cached values of formulas.
    workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        sections: list[str] = []
        for sheet in workbook.worksheets:
            rows: list[tuple[Any, ...]] = []
            more = 0
            for row in sheet.iter_rows(values_only=True):
                if not any(value is not None and str(value).strip() for value in row):
                    continue
                if len(rows) >= MAX_SHEET_ROWS:
                    more += 1
                    continue
                # Trailing empty cells are formatting, not columns.
                values = list(row)
                while values and (values[-1] is None or not str(values[-1]).strip()):
                    values.pop()
                rows.append(tuple(values))
            table = markdown_table(rows)
            if not table:
                continue
            section = f"# {sheet.title}\n\n{table}"
            if more:
                section += f"\n\n({more} more rows are not included.)"
            sections.append(section)
        title = (workbook.properties.title or "").strip()
    finally:
        workbook.close()
    return OfficeText(title=title, text="\n\n".join(sections))


CONVERTERS = {"docx": docx_to_markdown, "pptx": pptx_to_markdown, "xlsx": xlsx_to_markdown}
