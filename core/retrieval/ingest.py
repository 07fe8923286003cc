"""Ingest files, folders and URLs into a source: one IngestRequest says what; its targets are read in turn."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from core.retrieval.crawl import CrawlOptions, CrawlRootError, CrawlSkip, FetchPolicy, crawl as crawl_site
from core.retrieval.embeddings import EmbeddingProvider
from core.retrieval.indexing import IndexRun, IngestProgress, IngestSummary, ProgressCallback
from core.retrieval.links import LinkBaseError, check_link_base, link_root
from core.retrieval.loaders import Skipped, iter_path, load_url
from core.retrieval.source_lease import SourceLease
from core.retrieval.store import SourceExposure, SourceKind, upsert_source
from core.retrieval.targets import SourceTarget, build_targets, is_url, remember_targets
from core.retrieval.url_guard import FetchError
from core.store.db import Database

# Importable from here as before: the CLI and the sync name them as core.retrieval.ingest's.
__all__ = [
    "KEEP_INTERVAL", "URL_TIMEOUT_S", "IngestProgress", "IngestRequest", "IngestSummary", "KeepInterval",
    "ProgressCallback", "ingest", "is_url", "read_targets", "unreachable_error",
]

URL_TIMEOUT_S = 20.0


class KeepInterval:
    """The default of an IngestRequest's sync_interval_s: leave the source's interval as it is."""


KEEP_INTERVAL = KeepInterval()


@dataclass(frozen=True, kw_only=True)
class IngestRequest:
    """What one ingest is asked to do: into which source, from which targets (files, folders, http(s) URLs,
    sitemaps), and how. Checked when it is made: a ValueError or LinkBaseError says what is wrong.

    With prune, documents of the source that no target produced any more are deleted (and the targets replace the
    remembered ones). With link_base, files are cited at link_base + their path under the targets' folder
    (core/retrieval/links.py). With crawl, URL targets are crawled on their site; sitemaps are crawled from the pages
    they list. sync_interval_s sets how often core/retrieval/sync.py reads the source again (None: never; default:
    unchanged, or never for a new source)."""

    source: str
    exposure: SourceExposure
    targets: tuple[str, ...] = ()
    sitemaps: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    prune: bool = False
    allow_private: bool = False
    link_base: str | None = None
    crawl: CrawlOptions | None = None
    sitemap_options: CrawlOptions | None = None
    sync_interval_s: int | None | KeepInterval = KEEP_INTERVAL
    owner: str = ""  # the team the source belongs to (`slack:T1`); '' for the deployment's own

    def __post_init__(self) -> None:
        for name in ("targets", "sitemaps", "include", "exclude"):
            object.__setattr__(self, name, tuple(getattr(self, name)))  # a list given is kept as it was then
        if not self.source.strip():
            raise ValueError("A source needs a name.")
        if not self.targets and not self.sitemaps:
            raise ValueError("Nothing to ingest: name a file, folder, URL or sitemap.")
        if self.link_base is not None:
            object.__setattr__(self, "link_base", check_link_base(self.link_base))
            if self.link_root is None:
                raise LinkBaseError("a link base maps files to web addresses, and no target is a file or folder")

    @property
    def link_root(self) -> str | None:
        """The folder file targets are cited under (core/retrieval/links.py); None when no target is a file."""
        return link_root(self.targets)


async def ingest(
    db: Database, request: IngestRequest, *, embedder: EmbeddingProvider | None,
    fetch: FetchPolicy = FetchPolicy(timeout_s=URL_TIMEOUT_S), progress: ProgressCallback | None = None,
) -> IngestSummary:
    """Ingest every target of `request` into its source; `fetch` is what URL fetches may reach and read.

    Unchanged documents cost nothing; a changed one has its chunks and vectors replaced in one
    transaction; a file that cannot be read is skipped with a reason and the run goes on.
    The targets are remembered on the source (added to earlier ones; with prune, replacing them) for
    core/retrieval/sync.py. Raises SourceBusy while another process ingests or syncs the source.
    """
    specs = build_targets(
        request.targets, include=request.include, exclude=request.exclude, crawl=request.crawl,
        sitemaps=request.sitemaps, sitemap_options=request.sitemap_options, allow_private=request.allow_private,
    )
    all_targets = [*request.targets, *request.sitemaps]
    async with db.connection() as conn:
        source_id = await upsert_source(
            conn, name=request.source, kind=_source_kind(all_targets), uri=" ".join(all_targets),
            exposure=request.exposure, link_base=request.link_base, link_root=request.link_root,
            owner=request.owner,
        )
    async with await SourceLease.take(db, source_id) as lease:
        async with db.connection() as conn:
            await remember_targets(conn, source_id, specs, replace=request.prune)
            if not isinstance(request.sync_interval_s, KeepInterval):
                await conn.execute(
                    "UPDATE sources SET sync_interval_s = %s WHERE id = %s", (request.sync_interval_s or None, source_id)
                )
        summary = await read_targets(
            db, source_id, specs, embedder=embedder, policy=fetch, prune=request.prune, progress=progress
        )
        await lease.finish(error=unreachable_error(summary))
    return summary


def unreachable_error(summary: IngestSummary) -> str | None:
    """The sync's error when a root could not be reached, in one line for `sources list`."""
    if not summary.unreachable:
        return None
    return "; ".join(f"{target}: {reason}" for target, reason in summary.unreachable)


async def read_targets(
    db: Database,
    source_id: int,
    specs: Sequence[SourceTarget],
    *,
    embedder: EmbeddingProvider | None,
    policy: FetchPolicy,
    prune: bool,
    progress: ProgressCallback | None = None,
) -> IngestSummary:
    """Read every target into the source (the caller holds its lease); with prune, delete documents no target
    produced, unless a target's root (folder, URL, start page, sitemap, robots.txt) could not be reached."""
    run = IndexRun(db, source_id=source_id, embedder=embedder, progress=progress)
    await run.load_known()
    for spec in specs:
        if spec.crawl is not None or spec.sitemap:
            await _read_crawl(run, spec, policy)
        elif is_url(spec.target):
            await _read_url(run, spec, policy)
        else:
            await _read_path(run, spec)
    await run.flush()
    if prune:
        if not run.unreachable:
            await run.prune()
        else:
            run.skipped.append(("--prune", "nothing was removed because a target could not be found"))
    run.report()
    return run.summary()


def _policy_for(spec: SourceTarget, policy: FetchPolicy) -> FetchPolicy:
    return replace(policy, allow_private=True) if spec.allow_private else policy


async def _read_url(run: IndexRun, spec: SourceTarget, policy: FetchPolicy) -> None:
    policy = _policy_for(spec, policy)
    try:
        document = await load_url(
            spec.target,
            allow_private=policy.allow_private,
            allowed_networks=policy.allowed_networks,
            max_bytes=policy.max_url_bytes,
            timeout_s=policy.timeout_s,
        )
    except FetchError as error:
        run.seen.add(spec.target)  # a URL that fails today keeps yesterday's copy
        run.skip(spec.target, str(error))
        run.unreachable.append((spec.target, str(error)))
        return
    await run.take(document)


async def _read_crawl(run: IndexRun, spec: SourceTarget, policy: FetchPolicy) -> None:
    try:
        async for item in crawl_site(
            spec.target, sitemap=spec.sitemap, options=spec.crawl or CrawlOptions(), policy=_policy_for(spec, policy)
        ):
            if isinstance(item, CrawlSkip):
                if item.keep:
                    run.seen.add(item.uri)  # it may still exist: keep yesterday's copy
                run.skip(item.uri, item.reason)
            else:
                await run.take(item)
    except CrawlRootError as error:
        run.skip(spec.target, str(error))
        run.unreachable.append((spec.target, str(error)))


async def _read_path(run: IndexRun, spec: SourceTarget) -> None:
    path = Path(spec.target).expanduser()
    if not path.exists():
        run.skip(spec.target, "there is no such file or folder")
        run.unreachable.append((spec.target, "there is no such file or folder"))
        return
    documents = iter_path(path, include=spec.include, exclude=spec.exclude)
    while True:
        try:
            loaded = await asyncio.to_thread(next, documents, None)
        except OSError as error:  # the folder itself became unreadable mid-walk
            run.skip(spec.target, f"the folder could not be read ({error})")
            run.unreachable.append((spec.target, f"the folder could not be read ({error})"))
            return
        if loaded is None:
            return
        if isinstance(loaded, Skipped):
            run.seen.add(loaded.uri)
            run.skip(loaded.uri, loaded.reason)
        else:
            await run.take(loaded)


def _source_kind(targets: Sequence[str]) -> SourceKind:
    urls = sum(1 for target in targets if is_url(target))
    if urls == 0:
        return "files"
    return "urls" if urls == len(targets) else "mixed"

