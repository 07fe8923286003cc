-- A kept final's part may have been posted without anyone seeing it (a dropped connection, a timeout, a
-- crash): when a post of it was attempted is recorded ({"<part>": epoch seconds}), so the next delivery
-- looks that part up from then (and only then) instead of posting it again or reading the whole thread.
ALTER TABLE pending_finals ADD COLUMN attempted jsonb NOT NULL DEFAULT '{}'::jsonb;
-- A final handed back after a failure is not taken again before this (backoff, capped at 5 minutes).
ALTER TABLE pending_finals ADD COLUMN not_before timestamptz NOT NULL DEFAULT now();
