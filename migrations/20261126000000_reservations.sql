-- Payment windows (issue 26): a win in a sale with a payment window is a reservation that is
-- paid by its deadline, or cancelled, or expires; a cancelled or expired unit goes back into
-- the sale's stock exactly once.
--
-- Postgres is the authority on an order's fate: every transition is one compare-and-set from
-- 'reserved' (src/reservations/store.rs). An order of a sale without a window is 'confirmed',
-- final at once, as before: the new columns have constant defaults, so adding them rewrites
-- nothing.

-- The sale's payment window; null: orders are final at once.
alter table sales add column payment_window_ms bigint check (payment_window_ms > 0);

alter table orders
    add column status text not null default 'confirmed'
        check (status in ('confirmed', 'reserved', 'paid', 'cancelled', 'expired')),
    -- The deadline of a reservation: created_at (Redis time) + the sale's window.
    add column pay_by timestamptz,
    -- When it left 'reserved', and why (the payment event's id, 'buyer', 'deadline').
    add column resolved_at timestamptz,
    add column resolved_by text,
    -- A cancelled or expired order's unit is back in the Redis stock (lua/release.lua ran). Null
    -- on a released order: the release is still owed (the outbox the sweeper re-drives).
    add column restocked_at timestamptz,
    add check (status <> 'reserved' or resolved_at is null),
    add check (status = 'confirmed' or pay_by is not null);

-- The sweeper's two questions, each answered from a small partial index: which reservations are
-- due, and which releases are still owed.
create index orders_reserved_by_deadline on orders (pay_by) where status = 'reserved';
create index orders_release_owed on orders (resolved_at) where status in ('cancelled', 'expired') and restocked_at is null;
-- Payment events name the order by id; only orders of sales with a window are indexed (the
-- orders of other sales pay nothing for it).
create index orders_with_window_by_id on orders (order_id) where pay_by is not null;

-- Every payment event received, once (its id is the shop's): the same event again gets the same
-- answer. outcome: 'paid' (it paid a reservation in time), 'late' (the order had expired or been
-- cancelled: refund it), 'duplicate' (the order was already paid by another event: refund it).
create table payment_events (
    event_id    text        primary key check (length(event_id) between 1 and 128),
    sale_id     text        not null,
    order_id    uuid        not null,
    received_at timestamptz not null default now(),
    outcome     text        not null check (outcome in ('paid', 'late', 'duplicate')),
    -- The order's status after the event.
    status      text        not null
);
-- The payments to refund: listed oldest first (GET /admin/late-payments), counted per sale (the
-- admin status, which the live page polls).
create index payment_events_refunds on payment_events (received_at) where outcome <> 'paid';
create index payment_events_refunds_by_sale on payment_events (sale_id) where outcome <> 'paid';
