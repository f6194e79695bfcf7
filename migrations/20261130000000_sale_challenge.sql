-- Proof of work at the door (issue 44): the tries a sale's challenge asks on average (null: none),
-- kept so that a sale Redis lost comes back from reconciliation's repair still asking it.
alter table sales
    add column challenge_cost integer check (challenge_cost between 1 and 1000000);
