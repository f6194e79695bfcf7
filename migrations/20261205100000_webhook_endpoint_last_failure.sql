-- When an endpoint's last failed round was. A run of failures is broken by a silence longer than
-- the retry schedule's longest pause (and an hour): no attempt, no evidence that the endpoint kept
-- failing. Without it, a run that ended in silence (every attempt of its events spent) stood
-- open, and days later the first refusal of a new event disabled the endpoint at once.
alter table webhook_endpoints add column last_failed_at timestamptz;
