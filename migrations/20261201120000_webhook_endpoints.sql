-- Webhook endpoints are data (issue 51). Until now each instance passed the endpoints of its own
-- SECKILL_WEBHOOK_URL to the writers, so an instance configured without them wrote no event at
-- all, and a rolling change of the setting lost events. Now every writer reads this table, in
-- the statement that writes the event: every instance writes every event, whatever its settings.
-- SECKILL_WEBHOOK_URL only registers its URLs here at start; the admin routes
-- (/admin/webhooks) list, register, remove and re-enable them (docs/webhooks.md).

-- One endpoint. Enabled while disabled_at is null; the dispatcher (src/webhooks/) disables one
-- that failed every attempt for SECKILL_WEBHOOK_DISABLE_AFTER: its open deliveries are closed as
-- failed at disabled_at (re-enabling reopens exactly those) and the events written while it is
-- disabled get no delivery to it.
create table webhook_endpoints (
    id              bigint      generated always as identity primary key,
    url             text        not null unique,
    created_at      timestamptz not null default now(),
    -- When the current run of failed attempts began (null: the last attempt was accepted, or none yet).
    failing_since   timestamptz,
    disabled_at     timestamptz,
    disabled_reason text
);

-- The URLs of the deliveries still open keep being served: they were some instance's
-- SECKILL_WEBHOOK_URL (an operator removes one no longer wanted with DELETE /admin/webhooks/{id}).
insert into webhook_endpoints (url)
select distinct endpoint from webhook_deliveries where delivered_at is null and failed_at is null
order by endpoint
on conflict (url) do nothing;

-- Each endpoint claims its own due deliveries (one claim loop per endpoint): the index leads with
-- the endpoint, so one endpoint's claim reads its own due rows in order and stops after its batch,
-- however many another endpoint has piled up.
drop index webhook_deliveries_due;
create index webhook_deliveries_due on webhook_deliveries (endpoint, next_attempt_at, event_id)
    where delivered_at is null and failed_at is null;
-- An endpoint's failed deliveries: its count in the listing, and those its disabling closed.
create index webhook_deliveries_failed_by_endpoint on webhook_deliveries (endpoint, failed_at)
    where failed_at is not null;

-- Writes one event, `{"type", "timestamp", "data"}` (null fields of data left out), and one
-- delivery to every enabled endpoint; with a dedup_key already used, nothing. Returns the
-- event's id. The writers call it only when an endpoint is registered (src/db/outbox.rs: an
-- `exists` Postgres evaluates once per statement), so without endpoints the outbox costs nothing.
create function webhook_publish(kind text, sale text, orderid uuid, data jsonb, dedup text default null)
returns bigint language plpgsql volatile as $$
declare
    new_id bigint;
begin
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
        select new_id, url, orderid from webhook_endpoints where disabled_at is null;
    end if;
    return new_id;
end
$$;

-- The units a sale's orders hold (all but those given back) and those given back, as the calling
-- statement's snapshot sees them (stable: the worker's insert, which calls it for sale.sold_out,
-- does not see its own new rows here and adds them itself). A plpgsql function, so that the
-- planner of that insert counts one call and not a scan of a big sale's orders: without endpoints
-- the branch that calls it never runs, but the scan in its estimate made Postgres JIT-compile
-- every batch insert (0.9 s each, measured with 1.6 million orders in one sale).
create function webhook_sale_units(sale text, out held bigint, out returned bigint)
language plpgsql stable as $$
begin
    select coalesce(sum(quantity) filter (where restocked_at is null), 0),
           coalesce(sum(quantity) filter (where restocked_at is not null), 0)
    into held, returned
    from orders where sale_id = sale;
end
$$;

-- The previous version's writer, for its instances still running during a rolling upgrade: the
-- endpoints they pass are ignored, the table decides.
create or replace function webhook_emit(endpoints text[], kind text, sale text, orderid uuid, data jsonb,
                                        dedup text default null)
returns bigint language sql volatile as $$
    select webhook_publish(kind, sale, orderid, data, dedup)
$$;
