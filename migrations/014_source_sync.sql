-- Fresh sources (issue 13): what each source is read from, so the sync job can read it again, and
-- how its last sync went. sync_interval_s (003) says how often: NULL = never on a schedule.
--
-- targets: JSON list of {"target", "include", "exclude", "crawl": {"depth", "max_pages",
--   "max_bytes"}, "sitemap", "allow_private"} (core/retrieval/targets.py).
-- sync_status: 'ok', or 'error' with sync_error saying why (a folder or URL unreachable: nothing
--   was pruned). last_synced_at (003) is when the last ingest or sync ended, whatever its status.
-- sync_holder / sync_lease_until: the process ingesting or syncing the source now; a lease, so a
--   crashed holder's simply runs out (core/retrieval/source_lease.py).

ALTER TABLE sources
    ADD COLUMN targets          jsonb NOT NULL DEFAULT '[]'::jsonb,
    ADD COLUMN sync_status      text CHECK (sync_status IN ('ok', 'error')),
    ADD COLUMN sync_error       text,
    ADD COLUMN sync_holder      text,
    ADD COLUMN sync_lease_until timestamptz;

-- Sources ingested before targets were recorded from one path or URL: that is their target. Several
-- targets were joined with spaces, which paths may hold too, so those stay unknown until ingested again.
UPDATE sources SET targets = jsonb_build_array(jsonb_build_object('target', uri))
    WHERE uri <> '' AND position(' ' IN uri) = 0;
