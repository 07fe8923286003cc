-- Each live record names the answer it belongs to, so crash repair leaves alone a message whose answer is kept
-- in the outbox (pending_finals.answer_id): the outbox finishes it, and a note written over it would stay.
ALTER TABLE live_messages ADD COLUMN IF NOT EXISTS answer_id text NOT NULL DEFAULT '';
