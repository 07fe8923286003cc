"""Learning from channels (issue 24), measured: each part loads its own data and prints figures with ok / MISSES TARGET.

Run by hand: `.venv/bin/python bench/conversations.py [--parts retrieval] [--scale 0.1]` (the full retrieval part
takes minutes on 2 cores). Figures, not a test: `make test` never runs it. A part is one entry of PARTS: an async
function given a fresh, migrated embedded database and the scale, returning whether its targets were met.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bench import conversations_backfill, conversations_retrieval  # noqa: E402
from core.store.db import Database  # noqa: E402

Part = Callable[..., Awaitable[bool]]
# name → the part: Slack's backfill at Tier 3 and the live lag (bench/conversations_backfill.py), then retrieval.
PARTS: dict[str, Part] = {
    "backfill": conversations_backfill.run_backfill,
    "live": conversations_backfill.run_live,
    "retrieval": conversations_retrieval.run,
}


async def run_part(name: str, part: Part, *, scale: float) -> bool:
    root = Path(tempfile.mkdtemp(prefix=f"relaybot-bench-{name}-"))
    root.chmod(0o755)  # the embedded server runs as its own user when this runs as root
    db = Database(url=None, data_dir=root)
    try:
        await db.open()
        return await part(db, scale=scale)
    finally:
        await db.close()
        shutil.rmtree(root, ignore_errors=True)


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of: {', '.join(PARTS)}")
    parser.add_argument("--scale", type=float, default=1.0, help="data sizes times this (1: the issue's sizes)")
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.parts.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in PARTS]
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; the parts are {', '.join(PARTS)}")
    results = {}
    for name in chosen:
        started = time.perf_counter()
        results[name] = await run_part(name, PARTS[name], scale=args.scale)
        print(f"{name}: {'ok' if results[name] else 'MISSES TARGET'} ({time.perf_counter() - started:.0f} s)")
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
