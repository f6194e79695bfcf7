-- Waiting rooms (issue 27): a queued sale admits its buyers in a fair order at a set rate
-- (src/admission/). The row keeps the queue's settings and its shuffle seed, so a sale Redis
-- lost is seeded again with its waiting room (a repair never opens a queued sale to everyone)
-- and with the seed whose SHA-256 was published.
alter table sales
    add column queue_opens_at timestamptz,
    add column queue_rate integer check (queue_rate > 0),
    add column queue_ttl_ms bigint check (queue_ttl_ms > 0),
    add column queue_seed bytea check (octet_length(queue_seed) = 32),
    -- The seed outlives a re-seed without the queue, as Redis's does: a queue added back keeps it.
    add check ((queue_rate is null) = (queue_opens_at is null) and (queue_rate is null) = (queue_ttl_ms is null)
               and (queue_rate is null or queue_seed is not null));
