-- A drop's line as its seed wrote it, whole (issue 52's repair): the admission window and the
-- shuffle seed join the opening time and rate, so reconciliation's repair of a size Redis lost
-- rebuilds the drop's line exactly (src/reconcile.rs), as a queued sale's row allows for its own.
alter table drops
    add column line_ttl_ms bigint check (line_ttl_ms > 0),
    add column line_seed bytea check (octet_length(line_seed) = 32);

-- A line seeded before these columns: the default admission window (SECKILL_ADMISSION_TTL) and a
-- fresh seed. The repair keeps the seed Redis still has (HSETNX), so only a line Redis lost whole
-- takes this one.
update drops
set line_ttl_ms = 60000,
    line_seed = decode(md5(random()::text || drop_id) || md5(random()::text || clock_timestamp()::text), 'hex')
where line_rate is not null;

alter table drops
    add constraint drops_line_whole check ((line_rate is null) = (line_opens_at is null)
        and (line_rate is null) = (line_ttl_ms is null) and (line_rate is null) = (line_seed is null));
