-- The draw's run (issue 53, src/draw/run/): every entrant's result, written once, in one
-- transaction, after the entries closed and all of them reached `draw_entries`. A re-run of the
-- draw (an operator's, or after a crash) reads these rows and never allocates again, so the same
-- winners get the same order ids however often it runs.
create table draw_results (
    drop_id text not null,
    user_id text not null,
    -- The entrant's public pseudonym: SHA-256("<drop>\n<user>") in hex (crate::draw::entrant).
    entrant text not null check (entrant ~ '^[0-9a-f]{64}$'),
    outcome text not null check (outcome in ('won', 'waitlisted', 'lost')),
    -- The size won (its short name); null unless won.
    size text check ((outcome = 'won') = (size is not null)),
    -- Units of the entry (won: the units awarded).
    quantity integer not null check (quantity >= 1),
    -- The waitlist place (1 first); null unless waitlisted.
    position integer check ((outcome = 'waitlisted') = (position is not null) and (position is null or position >= 1)),
    -- The winner's reservation (UUID v7, chosen with the results); null unless won.
    order_id uuid unique check ((outcome = 'won') = (order_id is not null)),
    primary key (drop_id, user_id)
);

-- An operator's run of a draw is in the audit trail.
alter table sale_audit
    drop constraint sale_audit_action_check,
    add constraint sale_audit_action_check
        check (action in ('seed', 'pause', 'resume', 'end', 'stock', 'retire',
            'drop_seed', 'drop_pause', 'drop_resume', 'drop_end', 'drop_stock', 'order_cancel', 'order_refund',
            'draw'));
