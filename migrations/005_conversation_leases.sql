-- Who is running an answer in a conversation right now: a lease row, renewed while the run lasts,
-- so runs are serialised across processes without holding a database connection per answer.
CREATE TABLE conversation_leases (
    conversation_id  bigint PRIMARY KEY,
    holder           text NOT NULL,
    expires_at       timestamptz NOT NULL
);
