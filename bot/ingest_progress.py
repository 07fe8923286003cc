"""Ingest progress on stderr: the documents counted up front from names alone, a live bar on a terminal, else one final line."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from tqdm import tqdm

from core.retrieval.ingest import IngestProgress, is_url
from core.retrieval.loaders import _dir_excluded, _matches

PROGRESS_INTERVAL_S = 0.1
CURRENT_URI_CHARS = 60


def count_documents(targets: Sequence[str], *, include: Sequence[str] = (), exclude: Sequence[str] = ()) -> int:
    """How many documents an ingest of these targets goes through, counted from names alone (no file is read).

    One per URL, per missing path and per file, and for a folder one per file that core.retrieval.loaders.iter_path
    would load or skip: the same walk (hidden entries out, excluded folders pruned) and the same glob rules.
    """
    total = 0
    for target in targets:
        path = Path(target).expanduser()
        if is_url(target) or not path.is_dir():
            total += 1
            continue
        root = path.resolve()
        for dirpath, dirnames, filenames in os.walk(root):
            relative_dir = Path(dirpath).relative_to(root).as_posix()
            prefix = "" if relative_dir == "." else f"{relative_dir}/"
            dirnames[:] = [d for d in dirnames if not d.startswith(".") and not _dir_excluded(prefix + d, exclude)]
            for name in filenames:
                relative = prefix + name
                if name.startswith(".") or (include and not _matches(relative, include)):
                    continue
                if not (exclude and _matches(relative, exclude)):
                    total += 1
    return total


class ProgressLine:
    """Ingest progress on stderr: a live bar with the total and an ETA on a terminal (tqdm), else one final line."""

    BAR_FORMAT = (
        "documents {n_fmt}/{total_fmt} |{bar:20}| {percentage:3.0f}% · {elapsed} elapsed · ETA {remaining}{postfix}"
    )

    def __init__(self, stream: TextIO, *, min_interval_s: float = PROGRESS_INTERVAL_S) -> None:
        self.stream = stream
        self.live = stream.isatty()
        self.min_interval_s = min_interval_s
        self.last: IngestProgress | None = None
        self.total: int | None = None
        self._bar: tqdm | None = None

    def start(self, *, total: int) -> None:
        """The number of documents the run goes through; a terminal shows the bar from here on."""
        self.total = total
        self._live_bar()

    def _live_bar(self) -> tqdm | None:
        if self.live and self._bar is None:
            self._bar = tqdm(
                total=self.total, file=self.stream, bar_format=self.BAR_FORMAT, dynamic_ncols=True,
                mininterval=self.min_interval_s, miniters=0, leave=False,
            )
        return self._bar

    @staticmethod
    def details(progress: IngestProgress) -> str:
        current = progress.current
        if len(current) > CURRENT_URI_CHARS:
            current = "…" + current[-(CURRENT_URI_CHARS - 1) :]
        return f"chunks {progress.chunks} · embeddings {progress.embeddings}" + (f"  {current}" if current else "")

    @classmethod
    def render(cls, progress: IngestProgress) -> str:
        return f"documents {progress.documents} · {cls.details(progress)}"

    def __call__(self, progress: IngestProgress) -> None:
        self.last = progress
        bar = self._live_bar()
        if bar is None:
            return
        if bar.total is not None and progress.documents > bar.total:
            bar.total = progress.documents  # files appeared after the count; never show more than 100 %
        # tqdm redraws at most every min_interval_s, and its rate over the documents done gives the ETA.
        bar.set_postfix_str(self.details(progress), refresh=False)
        bar.update(progress.documents - bar.n)

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.close()  # clears the bar's line
            self._bar = None
        if self.last is None:
            return
        final = IngestProgress(documents=self.last.documents, chunks=self.last.chunks, embeddings=self.last.embeddings)
        self.stream.write(self.render(final) + "\n")
        self.stream.flush()
