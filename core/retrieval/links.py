"""Where a file document is read on the web: its source's link base plus its path under the ingest root."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from urllib.parse import quote, urlsplit
from urllib.request import url2pathname


class LinkBaseError(ValueError):
    """A link base that is not an http(s) address; the message says so in words."""


def check_link_base(url: str) -> str:
    """The link base as stored (spaces trimmed), or LinkBaseError when it is not an http(s) address."""
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or any(c.isspace() for c in url):
        raise LinkBaseError(f"a link base must be an http(s) address like https://github.com/org/repo/blob/main/, not {url!r}")
    return url


def link_root(targets: Sequence[str]) -> str | None:
    """The folder file targets are cited relative to: a folder target itself, a file target's folder, and
    for several targets the deepest folder holding them all. None when no target is a local path."""
    folders = []
    for target in targets:
        if target.lower().startswith(("http://", "https://")):
            continue
        path = Path(target).expanduser().resolve()
        folders.append(str(path if path.is_dir() else path.parent))
    if not folders:
        return None
    return os.path.commonpath(folders)


def web_uri(uri: str, *, link_base: str | None, root: str | None) -> str:
    """A document's citation address: a `file://` uri under `root` becomes link_base + the relative path
    (each segment URL-quoted); anything else (a web page, a source without a link base, a file outside
    the root) is returned as it is."""
    if not link_base or not root or not uri.startswith("file://"):
        return uri
    path = Path(url2pathname(urlsplit(uri).path))
    try:
        relative = path.relative_to(root)
    except ValueError:
        return uri
    if not relative.parts:
        return uri
    base = link_base if link_base.endswith("/") else link_base + "/"
    return base + quote(PurePosixPath(*relative.parts).as_posix(), safe="/")
