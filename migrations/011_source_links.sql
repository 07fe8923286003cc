-- Where a source's files are read on the web: citations of a file document link to
-- link_base + its path under link_root (the folder it was ingested from), URL-quoted.
-- NULL link_base: files are cited by title alone. Mapped when passages are read, so documents
-- ingested before a link base was set link too, without re-ingesting.

ALTER TABLE sources
    ADD COLUMN link_base text,
    ADD COLUMN link_root text;
