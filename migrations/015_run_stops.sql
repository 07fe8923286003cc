-- Runs in progress, so a Stop click reaches the run wherever it lives: the click writes the stop
-- request on the run's row (and NOTIFYs), the process running it sees it and cancels the run.
-- One row per turn (a resumed run takes its turn's row again); `outcome` says how it ended.
CREATE TABLE run_stops (
    run_id           uuid PRIMARY KEY,
    platform         text NOT NULL,
    workspace        text NOT NULL,
    channel          text NOT NULL,
    thread           text NOT NULL DEFAULT '',
    asked_by         text NOT NULL,
    started_at       timestamptz NOT NULL DEFAULT now(),
    seen_at          timestamptz NOT NULL DEFAULT now(),
    ended_at         timestamptz,
    outcome          text,
    stop_by_id       text,
    stop_by          text,
    stop_at          timestamptz
);
CREATE INDEX run_stops_requested_idx ON run_stops (run_id) WHERE ended_at IS NULL AND stop_at IS NOT NULL;
CREATE INDEX run_stops_started_idx ON run_stops (started_at);
