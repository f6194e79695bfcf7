//! The published record of a drawn draw (`GET /drops/{drop}/draw`), written from Postgres a page
//! at a time (the `draws` row, the sizes' stock, the entries, the results) by the core's line
//! writers ([`crate::draw::record`]), so memory stays bounded whatever the entries' count.

use futures::Stream;
use sqlx::PgPool;

use super::readers::Reader;
use super::store;
use crate::domain::DropId;
use crate::draw::record::{write_entry, write_head, write_result};

/// Rows read per page.
const PAGE_ROWS: i64 = 1_000;

/// Where a record's writing stands.
enum Part {
    Head,
    Entries(Option<String>),
    Results(Option<String>),
    Done,
}

/// The record of the drop's draw, NDJSON, chunk by chunk (a page of lines each); the first chunk is
/// the draw line. The caller checked that the draw is drawn. `reader`'s place
/// ([`super::readers`]) is held until the stream is dropped.
pub fn stream(
    pool: PgPool,
    drop: DropId,
    draw: store::Draw,
    reader: Reader,
) -> impl Stream<Item = Result<Vec<u8>, sqlx::Error>> + Send + 'static {
    let state = (pool, drop, draw, Part::Head, reader);
    futures::stream::try_unfold(state, |(pool, drop, draw, part, reader)| async move {
        let mut out = Vec::new();
        let next = match part {
            Part::Done => return Ok(None),
            Part::Head => {
                let terms = store::terms(&pool, &drop, draw.waitlist_places).await?;
                write_head(&drop, (&draw.commitment, &draw.seed), &terms, &mut out).map_err(io)?;
                Part::Entries(None)
            }
            Part::Entries(after) => {
                let page = store::entries_page(&pool, &drop, after.as_deref(), PAGE_ROWS).await?;
                for (_, entry) in &page {
                    write_entry(entry, &mut out).map_err(io)?;
                }
                match page.last() {
                    Some((user, _)) if page.len() as i64 == PAGE_ROWS => Part::Entries(Some(user.clone())),
                    _ => Part::Results(None),
                }
            }
            Part::Results(after) => {
                let page = store::results_page(&pool, &drop, after.as_deref(), PAGE_ROWS).await?;
                for result in &page {
                    write_result(&result.entrant, &result.outcome, &mut out).map_err(io)?;
                }
                match page.last() {
                    Some(last) if page.len() as i64 == PAGE_ROWS => Part::Results(Some(last.user.to_string())),
                    _ => Part::Done,
                }
            }
        };
        Ok(Some((out, (pool, drop, draw, next, reader))))
    })
}

fn io(err: std::io::Error) -> sqlx::Error {
    sqlx::Error::Io(err)
}
