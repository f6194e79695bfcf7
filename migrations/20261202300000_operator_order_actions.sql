-- Operator actions on an order (issue 52): an operator voids a reservation (it becomes
-- 'cancelled', resolved_by 'operator', its units back exactly once as a buyer's cancel's are) or
-- records the refund of a paid order (it becomes 'refunded'; its units go back to the stock only
-- when the operator asks, again exactly once, through lua/release.lua's gate).
--
-- An order "gives its units back" when it is cancelled or expired, or refunded with restock; its
-- release is owed while restocked_at is null (src/reservations/store.rs, RETURNS_UNITS). So the
-- units of a sale read, in Postgres:
--   stock_initial = stock_left + reserved + paid + confirmed + refunded-not-restocked (+ queued)

alter table orders
    drop constraint orders_status_check,
    add constraint orders_status_check
        check (status in ('confirmed', 'reserved', 'paid', 'cancelled', 'expired', 'refunded')),
    -- When the refund was recorded (the payment's own resolved_at/resolved_by stay as they were).
    add column refunded_at timestamptz,
    -- Whether the refund gave the units back to the stock: set exactly on refunded orders.
    add column refund_restock boolean,
    add constraint orders_refund_fields check ((status = 'refunded') = (refund_restock is not null)
                                               and (status = 'refunded') = (refunded_at is not null));

-- The sweeper's outbox of owed releases, now with the refunds that restock.
drop index orders_release_owed;
create index orders_release_owed on orders (resolved_at)
    where restocked_at is null and (status in ('cancelled', 'expired') or (status = 'refunded' and refund_restock));

alter table sale_audit
    drop constraint sale_audit_action_check,
    add constraint sale_audit_action_check
        check (action in ('seed', 'pause', 'resume', 'end', 'stock', 'retire',
            'drop_seed', 'drop_pause', 'drop_resume', 'drop_end', 'drop_stock', 'order_cancel', 'order_refund'));
