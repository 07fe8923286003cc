-- respond_to (issue 27) replaces followups_need_mention in stored channel settings: true was `mentions`, false
-- `threads`. A row that has both keeps its respond_to (it won already); every row loses the older key, and each
-- change is audited. The older field is still taken and read (core/channels.py maps it onto respond_to).
INSERT INTO config_audit (scope, field, before, after, changed_by)
SELECT scope, 'respond_to', settings -> 'respond_to',
       COALESCE(settings -> 'respond_to',
                to_jsonb(CASE WHEN (settings ->> 'followups_need_mention')::boolean THEN 'mentions' ELSE 'threads' END)),
       'migration:025_respond_to_rows'
FROM channel_config
WHERE settings ? 'followups_need_mention' AND NOT settings ? 'respond_to';

UPDATE channel_config
SET settings = (settings - 'followups_need_mention')
               || CASE WHEN settings ? 'respond_to' THEN '{}'::jsonb
                       ELSE jsonb_build_object('respond_to',
                            CASE WHEN (settings ->> 'followups_need_mention')::boolean THEN 'mentions' ELSE 'threads' END)
                  END,
    version = version + 1,
    updated_at = now(),
    updated_by = 'migration:025_respond_to_rows'
WHERE settings ? 'followups_need_mention';
