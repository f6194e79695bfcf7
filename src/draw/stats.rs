//! A draw's counts for the live page (`GET /admin/drops/{drop}/draw/stats`): where it stands, its
//! entries over the window, its results and what became of the winners' reservations and of the
//! waitlist's offers. Counts only, read from Postgres in five bounded queries (one row, at most
//! `BUCKETS` rows, one row per outcome, one per order status twice), whatever the number of
//! entries.

use sqlx::PgPool;
use time::OffsetDateTime;

use crate::domain::DropId;

/// The buckets the entry window is cut into for `entries_over_time`.
pub const BUCKETS: usize = 24;

/// A draw's counts, as Postgres holds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stats {
    /// `upcoming` (before `opens_at`), `open`, `closed` (after `closes_at`, not run yet),
    /// `drawing` (the run has started) or `drawn`.
    pub phase: &'static str,
    pub opens_at: OffsetDateTime,
    pub closes_at: OffsetDateTime,
    pub waitlist_places: u32,
    /// Entries stored in Postgres (an accepted entry gets there within moments).
    pub entries: u64,
    /// Entries per equal slice of `[opens_at, closes_at]`, `BUCKETS` of them.
    pub entries_over_time: Vec<u64>,
    /// Results, once drawn: entrants who won, are waitlisted, lost; the units won.
    pub won: u64,
    pub waitlisted: u64,
    pub lost: u64,
    pub units_awarded: u64,
    /// The winners' orders in Postgres, by status (`reserved`, `paid`, `expired`, `cancelled`,
    /// `refunded`); a winner whose reservation the worker has not stored yet is in none.
    pub winners: Winners,
    /// The waitlist's offers (units given back, `crate::draw::offers`): the waitlisted entrants'
    /// orders in Postgres, by status.
    pub offered: Winners,
}

/// The winners' orders by status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Winners {
    pub reserved: u64,
    pub paid: u64,
    pub expired: u64,
    pub cancelled: u64,
    pub refunded: u64,
}

/// The drop's draw counts, `None` when the drop has no draw.
pub async fn read(pool: &PgPool, drop: &DropId) -> Result<Option<Stats>, sqlx::Error> {
    let row: Option<(String, OffsetDateTime, OffsetDateTime, i32, OffsetDateTime)> =
        sqlx::query_as("select state, opens_at, closes_at, waitlist_places, now() from draws where drop_id = $1")
            .bind(drop.as_str())
            .fetch_optional(pool)
            .await?;
    let Some((state, opens_at, closes_at, places, now)) = row else { return Ok(None) };
    let phase = match state.as_str() {
        "drawn" => "drawn",
        "drawing" => "drawing",
        _ if now < opens_at => "upcoming",
        _ if now < closes_at => "open",
        _ => "closed",
    };
    let buckets: Vec<(i32, i64)> = sqlx::query_as(
        "select least(greatest(width_bucket(extract(epoch from entered_at)::float8,
                    extract(epoch from $2::timestamptz)::float8, extract(epoch from $3::timestamptz)::float8, $4),
                  1), $4) as bucket, count(*)
         from draw_entries where drop_id = $1 group by bucket",
    )
    .bind(drop.as_str())
    .bind(opens_at)
    .bind(closes_at)
    .bind(BUCKETS as i32)
    .fetch_all(pool)
    .await?;
    let mut entries_over_time = vec![0u64; BUCKETS];
    for (bucket, count) in buckets {
        if let Some(slot) = usize::try_from(bucket - 1).ok().and_then(|i| entries_over_time.get_mut(i)) {
            *slot += count as u64;
        }
    }
    let outcomes: Vec<(String, i64, i64)> = sqlx::query_as(
        "select outcome, count(*), coalesce(sum(quantity), 0)::int8 from draw_results
         where drop_id = $1 group by outcome",
    )
    .bind(drop.as_str())
    .fetch_all(pool)
    .await?;
    let count = |name: &str| outcomes.iter().find(|(o, ..)| o == name).map_or(0, |(_, n, _)| *n as u64);
    let units_awarded = outcomes.iter().find(|(o, ..)| o == "won").map_or(0, |(.., units)| *units as u64);
    // The winners' orders, through the orders' key (sale, user): each winner's one row.
    let statuses: Vec<(String, i64)> = sqlx::query_as(
        "select o.status, count(*) from draw_results r
         join orders o on o.sale_id = r.drop_id || '.' || r.size and o.user_id = r.user_id and o.order_id = r.order_id
         where r.drop_id = $1 and r.outcome = 'won' group by o.status",
    )
    .bind(drop.as_str())
    .fetch_all(pool)
    .await?;
    // The offers: a waitlisted entrant's order in one of the sizes of its entry (each a key lookup).
    let offers: Vec<(String, i64)> = sqlx::query_as(
        "select o.status, count(*) from draw_results r
         join draw_entries e using (drop_id, user_id) cross join unnest(e.sizes) as listed (size)
         join orders o on o.sale_id = r.drop_id || '.' || listed.size and o.user_id = r.user_id
         where r.drop_id = $1 and r.outcome = 'waitlisted' group by o.status",
    )
    .bind(drop.as_str())
    .fetch_all(pool)
    .await?;
    let by_status = |rows: &[(String, i64)]| {
        let n = |name: &str| rows.iter().find(|(s, _)| s == name).map_or(0, |(_, n)| *n as u64);
        Winners {
            reserved: n("reserved"),
            paid: n("paid"),
            expired: n("expired"),
            cancelled: n("cancelled"),
            refunded: n("refunded"),
        }
    };
    Ok(Some(Stats {
        phase,
        opens_at,
        closes_at,
        waitlist_places: u32::try_from(places).unwrap_or(0),
        entries: entries_over_time.iter().sum(),
        entries_over_time,
        won: count("won"),
        waitlisted: count("waitlisted"),
        lost: count("lost"),
        units_awarded,
        winners: by_status(&statuses),
        offered: by_status(&offers),
    }))
}
