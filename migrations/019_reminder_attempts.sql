-- Each reminder delivered exactly once: a claim records when it first attempted the post (before calling the
-- platform), so a process taking over a dead one's claim looks the reminder up from then before posting it.
ALTER TABLE reminders ADD COLUMN IF NOT EXISTS attempted_at timestamptz;
