-- Reminders created by the create_reminder tool; the row is the truth, scheduler jobs only wake us up.
CREATE TABLE reminders (
    id          bigserial PRIMARY KEY,
    platform    text NOT NULL,
    workspace   text NOT NULL,
    channel     text NOT NULL,
    thread      text NOT NULL DEFAULT '',
    user_id     text NOT NULL,
    text        text NOT NULL,
    due_at      timestamptz NOT NULL,
    status      text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'fired', 'failed')),
    fired_by    text,
    fired_at    timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX reminders_pending_idx ON reminders (due_at) WHERE status = 'pending';
