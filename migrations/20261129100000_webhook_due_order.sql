-- The dispatcher's claim (src/webhooks/store.rs) takes the due deliveries in the order
-- (next_attempt_at, event_id). The index on next_attempt_at alone left Postgres to sort every open
-- delivery for each round, and to test each one for an earlier open event of its order: a round
-- cost grew with the backlog (1.4 s, then 4.3 s at a few thousand open deliveries, under 1,000
-- orders/s), so the dispatcher fell further behind the more it had to do. In this order the index
-- is read from its start and the scan stops after the batch.
drop index webhook_deliveries_due;
create index webhook_deliveries_due on webhook_deliveries (next_attempt_at, event_id)
    where delivered_at is null and failed_at is null;
