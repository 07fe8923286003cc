-- Per-person daily limits (issue 27): one row per person and UTC day, the same kind of counters as
-- api_key_usage (core/store/day_counts.py serves both). A person is `platform:user id`. A channel's own
-- limits (user_requests_per_day, user_tokens_per_day) are kept with its row in channel_config.settings.
CREATE TABLE person_usage (
    person      text NOT NULL,
    day         date NOT NULL,
    requests    integer NOT NULL DEFAULT 0,
    tokens      bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (person, day)
);
