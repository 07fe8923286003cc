-- 👍/👎 on final answers: one vote per person per turn (a second click changes it), with an optional
-- comment; what `relaybot feedback` exports beside the turn's question, answer and sources.
CREATE TABLE feedback (
    turn_id      uuid NOT NULL,
    user_id      text NOT NULL,
    user_name    text NOT NULL DEFAULT '',
    platform     text NOT NULL,
    vote         smallint NOT NULL CHECK (vote IN (-1, 1)),
    comment      text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (turn_id, user_id)
);
CREATE INDEX feedback_updated_idx ON feedback (updated_at);
