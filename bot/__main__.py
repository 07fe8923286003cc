"""`python -m bot` and the `relaybot` console script."""

from __future__ import annotations

from bot.cli import main

if __name__ == "__main__":
    main()
