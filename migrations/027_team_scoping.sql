-- Tenant isolation (issue 25): every stored thing belongs to a team (a Slack workspace, a Discord guild:
-- `platform:workspace`), and what did not say so yet says it now. Nothing is dropped; today's rows stay valid.

-- A source's owner: a team (`slack:T1`, `discord:G1`), or '' for this deployment's own (every source before
-- this migration). A conversation searches its own team's sources, plus the deployment's where its platform
-- shares them (single-workspace mode, Discord, the terminal chat, the API) — core/channels.py.
ALTER TABLE sources ADD COLUMN owner text NOT NULL DEFAULT '';
CREATE INDEX sources_owner_idx ON sources (owner);

-- A vote's workspace, so a team's export (and its purge) finds its own votes without reading others' turns.
ALTER TABLE feedback ADD COLUMN workspace text NOT NULL DEFAULT '';
UPDATE feedback f SET workspace = c.workspace
FROM (SELECT DISTINCT ON (m.turn_id) m.turn_id, m.conversation_id FROM messages m ORDER BY m.turn_id, m.id) AS t
JOIN conversations c ON c.id = t.conversation_id
WHERE t.turn_id = f.turn_id;
CREATE INDEX feedback_workspace_idx ON feedback (platform, workspace);

-- The purge and the uninstall find a team's rows by workspace; these had no index on it.
CREATE INDEX conversations_workspace_idx ON conversations (platform, workspace);
CREATE INDEX reminders_workspace_idx ON reminders (platform, workspace) WHERE status IN ('pending', 'fired');
CREATE INDEX token_usage_workspace_idx ON token_usage (platform, workspace);
