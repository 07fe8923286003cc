-- What an approval shows, kept beside the agent's private run state: the platform it was asked
-- on, and each pending call (tool, raw JSON arguments in the model's key order, description).
ALTER TABLE continuations ADD COLUMN platform text NOT NULL DEFAULT '';
ALTER TABLE continuations ADD COLUMN calls jsonb NOT NULL DEFAULT '[]'::jsonb;

UPDATE continuations SET
    platform = coalesce(state -> 'conversation' ->> 'platform', ''),
    calls = coalesce(
        (SELECT jsonb_agg(jsonb_build_object(
                    'call_id', p ->> 'call_id', 'tool', p ->> 'tool',
                    'arguments', coalesce(p ->> 'arguments', ''), 'description', ''))
         FROM jsonb_array_elements(state -> 'pending') AS p),
        '[]'::jsonb);

CREATE INDEX continuations_platform_open_idx ON continuations (platform, status, expires_at);
