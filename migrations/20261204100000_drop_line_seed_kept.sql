-- A drop's shuffle seed outlives its line, as Redis keeps it: a line taken away by a re-seed and
-- added back by another keeps the seed it was drawn with (lua/drop_seed.lua keeps the line's state,
-- and HSETNX the seed in it). The row dropped it with the line and drew a new one when the line
-- came back, so Postgres and Redis held different seeds, and the repair of a line Redis lost
-- would have shuffled it again with the other one. A line still needs its seed.
alter table drops
    drop constraint drops_line_whole,
    add constraint drops_line_whole check ((line_rate is null) = (line_opens_at is null)
        and (line_rate is null) = (line_ttl_ms is null) and (line_rate is null or line_seed is not null));
