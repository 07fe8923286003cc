"""The page reader is loaded at start: after warm_up, reading any page imports nothing and builds no tables."""

from __future__ import annotations

import gc
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


def test_after_warm_up_a_page_from_an_address_or_a_dotless_host_builds_no_suffix_tables() -> None:
    # Built after start they are not frozen (gc.freeze at start): ~11,000 objects more in every full collection.
    main_content.warm_up()
    gc.collect()
    before = len(gc.get_objects())
    for url in ("https://localhost/notes", "https://10.0.0.7/wiki", "https://intranet/wiki/deploys"):
        main_content.extract_main_content(
            "<html><body><main>" + "<p>Deploys go out on Tuesdays after the review.</p>" * 5 + "</main></body></html>",
            url=url,
        )
    gc.collect()
    assert len(gc.get_objects()) - before < 1000
