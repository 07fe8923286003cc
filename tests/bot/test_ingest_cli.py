"""`relaybot ingest` and `relaybot sources` as a user runs them, in a subprocess against the test database."""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import re
import sys
from pathlib import Path

import pytest

from bot.ingest_cli import add_ingest_commands
from bot.ingest_progress import ProgressLine, count_documents
from bot.retrieval import describe_embeddings
from core.config import Settings
from core.retrieval.ingest import IngestProgress
from core.retrieval.loaders import iter_path

REPO = Path(__file__).resolve().parents[2]


async def relaybot(*args: str, cwd: Path, **env: str) -> tuple[int, str, str]:
    keep = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "TMPDIR")}
    keep.update(PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", **env)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args, env=keep, cwd=cwd,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=120)
    return process.returncode or 0, stdout.decode(), stderr.decode()


async def test_ingest_then_list_then_remove(database_url: str, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("# Guide\n\nThe deploy key lives in the vault.\n")
    (docs / "notes.txt").write_text("Standup is at ten.\n")
    (docs / "blob.bin").write_bytes(b"\x00\x01")
    env = {"DATABASE_URL": database_url, "EMBEDDING_PROVIDER": "none"}

    code, out, err = await relaybot("ingest", str(docs), "--source", "docs", cwd=tmp_path, **env)
    assert code == 0, err
    assert 'Source "docs" (exposure prefetch): added 2, updated 0, unchanged 0, removed 0, skipped 1.' in out
    assert "blob.bin: .bin is not a supported type" in out
    assert "documents 3 · chunks 2 · embeddings 0" in err

    code, out, err = await relaybot(
        "ingest", str(docs), "--source", "docs", "--exposure", "agentic_tool", cwd=tmp_path, **env
    )
    assert code == 0, err
    assert "added 0, updated 0, unchanged 2" in out

    code, out, err = await relaybot("sources", "list", cwd=tmp_path, **env)
    assert code == 0, err
    header, row = out.strip().splitlines()
    assert header.split()[:5] == ["NAME", "EXPOSURE", "KIND", "DOCUMENTS", "CHUNKS"]
    assert row.split()[:5] == ["docs", "agentic_tool", "files", "2", "2"]

    code, out, err = await relaybot("sources", "remove", "docs", cwd=tmp_path, **env)
    assert code == 0 and 'Removed source "docs"' in out
    code, out, err = await relaybot("sources", "remove", "docs", cwd=tmp_path, **env)
    assert code == 1 and 'no source named "docs"' in err
    code, out, err = await relaybot("sources", "list", cwd=tmp_path, **env)
    assert out.startswith("No sources yet")


async def test_a_misconfigured_provider_exits_2_with_a_sentence(database_url: str, tmp_path: Path) -> None:
    code, out, err = await relaybot(
        "ingest", str(tmp_path), cwd=tmp_path, DATABASE_URL=database_url, EMBEDDING_PROVIDER="openai"
    )
    assert code == 2
    assert "EMBEDDING_PROVIDER=openai needs EMBEDDING_MODEL" in err


def test_arguments_parse() -> None:
    parser = argparse.ArgumentParser()
    add_ingest_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["ingest", "a", "https://x.test/", "--include", "*.md", "--include", "*.txt", "--prune", "--allow-private"]
    )
    assert args.targets == ["a", "https://x.test/"] and args.include == ["*.md", "*.txt"]
    assert args.prune and args.allow_private and args.exposure is None and args.source == "docs"
    assert parser.parse_args(["sources", "remove", "old"]).name == "old"


def test_describe_embeddings_names_provider_and_model() -> None:
    assert describe_embeddings(Settings(_env_file=None, embedding_provider="none")).startswith("none")
    local = describe_embeddings(Settings(_env_file=None, embedding_provider="local"))
    # Either local runtime installed (the tests have both; a lean install has onnxruntime only): nothing is missing.
    assert local.startswith("local all-MiniLM-L6-v2") and "UNAVAILABLE" not in local
    line = describe_embeddings(
        Settings(_env_file=None, embedding_provider="openai", embedding_model="text-embedding-3-small",
                 llm_base_url="http://127.0.0.1:9/v1")
    )
    assert line == "openai text-embedding-3-small at http://127.0.0.1:9/v1"


def test_progress_on_a_pipe_is_one_final_line() -> None:
    stream = io.StringIO()
    progress = ProgressLine(stream)
    progress.start(total=3)
    for count in range(1, 4):
        progress(IngestProgress(documents=count, chunks=count * 2, embeddings=count * 2, current=f"file:///d/{count}"))
    assert stream.getvalue() == ""
    progress.finish()
    assert stream.getvalue() == "documents 3 · chunks 6 · embeddings 6\n"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_shows_the_total_and_an_eta_then_the_final_line() -> None:
    stream = _Terminal()
    progress = ProgressLine(stream, min_interval_s=0)
    progress.start(total=4)
    for count in range(1, 5):
        progress(IngestProgress(documents=count, chunks=count * 2, embeddings=count * 2, current=f"file:///d/{count}.md"))
    progress.finish()
    frames = [frame for frame in stream.getvalue().split("\r") if frame.strip()]
    assert frames[0].startswith("documents 0/4 ")
    assert any(frame.startswith("documents 2/4 ") and " 50% " in frame for frame in frames)
    # The ETA is tqdm's: "?" until it has a rate, then mm:ss.
    assert all(re.search(r"ETA (\?|\d\d:\d\d)", frame) for frame in frames[:-1])
    assert "chunks 4 · embeddings 4  file:///d/2.md" in stream.getvalue()
    assert stream.getvalue().endswith("\rdocuments 4 · chunks 8 · embeddings 8\n")  # the bar cleared, one line left


def test_a_terminal_bar_grows_when_more_documents_turn_up_than_counted() -> None:
    stream = _Terminal()
    progress = ProgressLine(stream, min_interval_s=0)
    progress.start(total=1)
    progress(IngestProgress(documents=2, chunks=0, embeddings=0))
    assert "documents 2/2 " in stream.getvalue() and "documents 2/1" not in stream.getvalue()
    progress.finish()


@pytest.mark.parametrize(
    ("include", "exclude"),
    [((), ()), (("*.md",), ()), ((), ("build",)), (("**/*.txt",), ("sub/deep/**",)), ((), ("*.bin", "sub/*"))],
)
def test_the_count_is_what_the_loader_walks(tmp_path: Path, include: tuple[str, ...], exclude: tuple[str, ...]) -> None:
    for relative in (
        "a.md", "b.txt", "blob.bin", ".hidden.md", ".git/config.md", "build/out.md", "sub/c.md", "sub/d.txt",
        "sub/deep/e.md", "sub/deep/f.txt", "sub/.cache/g.md",
    ):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("# Title\n\ntext\n")
    walked = len(list(iter_path(tmp_path, include=include, exclude=exclude)))
    assert count_documents([str(tmp_path)], include=include, exclude=exclude) == walked
    # A URL, a file and a missing path are one document each, as ingest counts them.
    targets = [str(tmp_path), "https://example.test/page", str(tmp_path / "a.md"), str(tmp_path / "gone")]
    assert count_documents(targets, include=include, exclude=exclude) == walked + 3
