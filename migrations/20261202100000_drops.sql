-- Drops (issue 52): a product whose sizes are the sales of one group (`<drop>.<size>`), seeded,
-- switched and restocked whole (src/drops/, src/shop/drops.rs). The sizes' `sales` rows stay the
-- unit of record; a drop's own settings are kept here, one row per drop, written in the
-- transaction of its seed.
create table drops (
    drop_id text primary key check (drop_id ~ '^[A-Za-z0-9_-]+$' and length(drop_id) <= 64),
    per_buyer integer not null check (per_buyer between 1 and 100),
    starts_at timestamptz,
    ends_at timestamptz,
    payment_window_ms bigint,
    -- The drop's line (waiting room): when it opens and buyers admitted per second; null: none.
    line_opens_at timestamptz,
    line_rate integer,
    challenge_cost integer,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now()
);

-- A drop's own actions (its seed, switch and stock changes) are one audit entry each, for all its
-- sizes: `drop_id` names the drop and `sale_id` is null. GET /admin/drops/{drop}/audit lists them;
-- a size's own trail (GET /admin/sales/{sale}/audit) lists them too.
alter table sale_audit
    alter column sale_id drop not null,
    add column drop_id text,
    add constraint sale_audit_names_a_sale_or_a_drop check (sale_id is not null or drop_id is not null),
    drop constraint sale_audit_action_check,
    add constraint sale_audit_action_check check (action in ('seed', 'pause', 'resume', 'end', 'stock', 'retire',
        'drop_seed', 'drop_pause', 'drop_resume', 'drop_end', 'drop_stock'));

create index sale_audit_drop_newest_first on sale_audit (drop_id, id desc) where drop_id is not null;
