-- Retired sales (issue 16: nothing shrinks). Retiring a sale removes its Redis keys and
-- registrations; Postgres keeps its orders and its row, marked here with when it was retired.
-- A retired sale answers 410 `sale_retired` and cannot be seeded again (no second life).
alter table sales add column retired_at timestamptz;
