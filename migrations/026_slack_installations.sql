-- Slack's "Add to Slack" installs (adapters/slack/installations.py over core/store/installations.py): one bot per
-- workspace or Grid org, and who installed it. `enterprise_id` is '' outside a Grid org; `team_id` is '' for an
-- org-wide install (is_enterprise_install), which answers for every workspace of its org.
-- `fields` holds what may be shown (names, ids, scopes, expiry); `sealed` the tokens, Fernet-encrypted with
-- SECRET_KEY by the adapter: no token is ever stored in the clear.
CREATE TABLE slack_bots (
    enterprise_id         text NOT NULL DEFAULT '',
    team_id               text NOT NULL DEFAULT '',
    is_enterprise_install boolean NOT NULL DEFAULT false,
    fields                jsonb NOT NULL,
    sealed                bytea NOT NULL,
    token_expires_at      timestamptz,
    installed_at          timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    refresh_error         text,
    PRIMARY KEY (enterprise_id, team_id)
);

CREATE TABLE slack_installers (
    enterprise_id         text NOT NULL DEFAULT '',
    team_id               text NOT NULL DEFAULT '',
    user_id               text NOT NULL,
    is_enterprise_install boolean NOT NULL DEFAULT false,
    fields                jsonb NOT NULL,
    sealed                bytea NOT NULL,
    token_expires_at      timestamptz,
    installed_at          timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (enterprise_id, team_id, user_id)
);

-- The OAuth flow's `state`: issued with the install page, consumed once by the redirect, refused once expired.
CREATE TABLE slack_oauth_states (
    state      text PRIMARY KEY,
    expires_at timestamptz NOT NULL
);
CREATE INDEX slack_oauth_states_expiry ON slack_oauth_states (expires_at);
