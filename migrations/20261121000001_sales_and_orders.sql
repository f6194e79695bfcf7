-- Sales and their orders.
--
-- Redis decides every purchase; Postgres is the durable record. The worker copies confirmed
-- orders from each sale's Redis stream into `orders`, and the unique (sale_id, user_id)
-- constraint is the final arbiter of "one order per user per sale", whatever happens in Redis
-- (a failover that loses a few writes, a redelivered stream entry, a manual re-enqueue).

-- One row per sale, written by the admin seed call in the same step that seeds Redis.
create table sales (
    sale_id       text        primary key
                  check (sale_id ~ '^[A-Za-z0-9_-]{1,64}$'),
    stock_initial bigint      not null check (stock_initial >= 0),
    starts_at     timestamptz,
    ends_at       timestamptz,
    created_at    timestamptz not null default now(),
    updated_at    timestamptz not null default now(),
    check (starts_at is null or ends_at is null or starts_at < ends_at)
);

-- One row per confirmed purchase. No foreign key to `sales`: an order that Redis confirmed must
-- be storable even if its sale row is missing, because losing a paid-for order is worse.
create table orders (
    -- UUID v7 made by the app when it asked Redis to buy; time-ordered, so the index stays compact.
    order_id   uuid        primary key,
    sale_id    text        not null,
    user_id    text        not null,
    -- When Redis confirmed the purchase (Redis server time).
    created_at timestamptz not null,
    -- When the worker committed it here; created_at .. persisted_at is the queue lag.
    persisted_at timestamptz not null default now(),
    constraint orders_one_per_user unique (sale_id, user_id)
);
