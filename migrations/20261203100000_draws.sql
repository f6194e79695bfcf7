-- The draw (issue 53): a drop seeded in draw mode takes entries for a window instead of selling
-- first come, first served; after the window its entries are ranked from a secret seed, revealed
-- afterwards, whose SHA-256 (the commitment) is public before entries open.
--
-- One row per draw, written in the transaction of the drop's seed. The seed is drawn once: a
-- re-seed of the drop keeps it and its commitment.
create table draws (
    drop_id text primary key check (drop_id ~ '^[A-Za-z0-9_-]+$' and length(drop_id) <= 64),
    -- 64 hex digits, secret until revealed_at.
    seed text not null check (seed ~ '^[0-9a-f]{64}$'),
    -- SHA-256 of the seed's 64 hex digits, in hex (crate::admission::commitment).
    commitment text not null check (commitment ~ '^[0-9a-f]{64}$'),
    opens_at timestamptz not null,
    closes_at timestamptz not null,
    -- Places on the waitlist for units that come back (default: the drop's stock).
    waitlist_places integer not null check (waitlist_places >= 0),
    state text not null default 'open' check (state in ('open', 'drawing', 'drawn')),
    revealed_at timestamptz,
    created_at timestamptz not null default now(),
    check (opens_at < closes_at)
);

-- Every accepted entry, copied from the draw's entry stream by the worker (src/orders/worker/),
-- once: the key is one entry per buyer and drop, so a redelivery writes nothing. No foreign key
-- to `draws`: the worker may read an entry before the seed's transaction commits.
create table draw_entries (
    drop_id text not null,
    user_id text not null,
    -- The buyer's sizes, best first (their short names: `42` for the sale `<drop>.42`).
    sizes text[] not null check (cardinality(sizes) between 1 and 6),
    quantity integer not null check (quantity >= 1),
    entered_at timestamptz not null,
    primary key (drop_id, user_id)
);
