"""The page reader is loaded at start: after warm_up, reading any page imports nothing and builds no tables."""

from __future__ import annotations

import sys

from core.retrieval import main_content


def test_after_warm_up_reading_a_page_long_or_short_imports_nothing_new() -> None:
    main_content.warm_up()
    before = set(sys.modules)
    main_content.extract_main_content(
        "<html><body><main>" + "<p>Deploys go out on Tuesdays after the review meeting.</p>" * 5 + "</main></body></html>",
        url="https://wiki.example/deploys",
    )
    main_content.extract_main_content("<html><body><div>Tiny.</div></body></html>", url="https://wiki.example/tiny")
    assert set(sys.modules) - before == set()
