-- Order events out (issue 42): a transactional outbox. Each event row is written by the statement
-- (or in the transaction) that makes the change it reports, so an event exists exactly when its
-- change committed; the dispatcher (src/webhooks/) then posts it to every endpoint, at least once.
--
-- Nothing here is written unless SECKILL_WEBHOOK_URL names endpoints: every writer passes the
-- endpoints as an array and skips the call to webhook_emit when it is empty.

-- Every event, once. `id` is the listing's cursor (GET /admin/events?after=) and the order of
-- one order's events; `event_id` is the `webhook-id` of every attempt; `body` the exact bytes
-- every attempt sends.
create table webhook_events (
    id         bigint      generated always as identity primary key,
    event_id   text        not null unique,
    type       text        not null,
    sale_id    text        not null,
    order_id   uuid,
    body       text        not null,
    -- The transaction that wrote the event: the listing shows an event only once every
    -- transaction older than its own has finished (src/webhooks/store.rs).
    txid       xid8        not null default pg_current_xact_id(),
    -- Makes an event idempotent where its writer may run twice (sale.sold_out: one per sale,
    -- stock_initial and units given back).
    dedup_key  text        unique,
    created_at timestamptz not null default now()
);
create index webhook_events_created on webhook_events (created_at);

-- One event to one endpoint. Open while neither delivered_at nor failed_at is set; its
-- next_attempt_at is also the lease of an attempt in flight (src/webhooks/dispatcher.rs).
create table webhook_deliveries (
    event_id        bigint      not null references webhook_events (id) on delete cascade,
    endpoint        text        not null,
    -- The event's order (null: a sale's event), for the per-order order of deliveries.
    order_id        uuid,
    attempts        integer     not null default 0,
    next_attempt_at timestamptz not null default now(),
    delivered_at    timestamptz,
    failed_at       timestamptz,
    last_status     integer,
    last_error      text,
    primary key (event_id, endpoint)
);
create index webhook_deliveries_due on webhook_deliveries (next_attempt_at)
    where delivered_at is null and failed_at is null;
create index webhook_deliveries_open_by_order on webhook_deliveries (order_id, endpoint, event_id)
    where delivered_at is null and failed_at is null and order_id is not null;
create index webhook_deliveries_failed on webhook_deliveries (event_id) where failed_at is not null;

-- A Standard Webhooks message id: `msg_` and a UUID v7 (time-ordered), in hex.
create function webhook_message_id() returns text language sql volatile as $$
    select 'msg_' || encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    placing substring(int8send((extract(epoch from clock_timestamp()) * 1000)::bigint) from 3)
                    from 1 for 6),
            52, 1), 53, 1),
        'hex')
$$;

-- Writes one event, `{"type", "timestamp", "data"}` (null fields of data left out), and its
-- deliveries to `endpoints`; with a dedup_key already used, nothing. Returns the event's id.
create function webhook_emit(endpoints text[], kind text, sale text, orderid uuid, data jsonb, dedup text default null)
returns bigint language plpgsql volatile as $$
declare
    new_id bigint;
begin
    if cardinality(endpoints) = 0 then
        return null;
    end if;
    insert into webhook_events (event_id, type, sale_id, order_id, body, dedup_key)
    values (webhook_message_id(), kind, sale, orderid,
            jsonb_build_object(
                'type', kind,
                'timestamp', to_char(now() at time zone 'utc', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                'data', jsonb_strip_nulls(data))::text,
            dedup)
    on conflict (dedup_key) do nothing
    returning id into new_id;
    if new_id is not null then
        insert into webhook_deliveries (event_id, endpoint, order_id)
        select new_id, e, orderid from unnest(endpoints) as e;
    end if;
    return new_id;
end
$$;

-- The data of an order's event.
create function webhook_order_data(o_order uuid, o_sale text, o_user text, o_status text, o_quantity integer,
                                   o_pay_by timestamptz)
returns jsonb language sql stable as $$
    select jsonb_build_object(
        'order_id', o_order, 'sale_id', o_sale, 'user_id', o_user, 'status', o_status, 'quantity', o_quantity,
        'pay_by', to_char(o_pay_by at time zone 'utc', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
$$;
