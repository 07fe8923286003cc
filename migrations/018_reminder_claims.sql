-- Reminders get the outbox's guarantees: a claim ('fired') names its process (fired_by, a heartbeat owner)
-- and is taken over when that process dies; a failed delivery waits for next_attempt_at, until the grace.
ALTER TABLE reminders DROP CONSTRAINT reminders_status_check;
ALTER TABLE reminders ADD CONSTRAINT reminders_status_check
    CHECK (status IN ('pending', 'fired', 'delivered', 'failed'));
ALTER TABLE reminders ADD COLUMN attempts integer NOT NULL DEFAULT 0;
ALTER TABLE reminders ADD COLUMN next_attempt_at timestamptz;
ALTER TABLE reminders ADD COLUMN delivered_at timestamptz;
-- Before this migration 'fired' meant claimed and (most likely) delivered: not sent again.
UPDATE reminders SET status = 'delivered', delivered_at = fired_at WHERE status = 'fired';
CREATE INDEX reminders_claimed_idx ON reminders (fired_by) WHERE status = 'fired';
