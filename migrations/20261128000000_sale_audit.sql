-- The operators' audit trail (issue 41): every seed, pause, resume, end, stock change and
-- retirement of a sale, written by the use case that did it (src/shop/, src/retire/janitor.rs),
-- read newest first by GET /admin/sales/{sale_id}/audit (src/controls/audit.rs).
--
-- Rows stay: they are human-paced (a few per sale, each a deliberate operator action or one
-- janitor retirement), so the table stays small beside orders; a retired sale keeps its trail
-- as it keeps its orders. No foreign key to sales: a sale Redis knows without a row (restored by
-- hand) can still be paused, and its trail is kept.
create table sale_audit (
    id bigint generated always as identity primary key,
    sale_id text not null,
    action text not null check (action in ('seed', 'pause', 'resume', 'end', 'stock', 'retire')),
    -- The operator's reason, as given (the API bounds it to 200 characters).
    reason text check (char_length(reason) <= 200),
    -- What the action did, as the API answered it (e.g. {"add": 50, "stock_initial": 150, "stock_left": 50}).
    effect jsonb not null default '{}',
    -- Who did it, when known ("janitor" for its retirements; the admin token names nobody).
    actor text,
    at timestamptz not null default now()
);

create index sale_audit_newest_first on sale_audit (sale_id, id desc);
