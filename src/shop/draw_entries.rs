//! A draw's entries (`crate::draw::entries`): a drop seeded in draw mode (the draw's settings
//! checked here, its secret seed drawn once), a buyer's one entry, and a buyer's entry read back.

use std::net::IpAddr;

use time::OffsetDateTime;

use super::limits::{Limited, Meter};
use super::seed::{MAX_STOCK, to_ms};
use super::{Error, Shop};
use crate::admission::{self, LineId};
use crate::challenge::Refused;
use crate::domain::{DropId, MAX_PER_BUYER, SaleId, UserId};
use crate::draw::allocate::Terms;
use crate::draw::entries::store::{self, DrawRow};
use crate::draw::entries::{self, Entered, Entry, MAX_SIZES};
use crate::drops::DropDraw;

/// A drop's draw as an operator asks it (checked by [`Shop::seed_drop`]).
#[derive(Debug, Clone, Copy)]
pub struct DrawOrder {
    /// When entries open and close.
    pub opens_at: OffsetDateTime,
    pub closes_at: OffsetDateTime,
    /// Places on the waitlist; `None`: the drop's stock, all sizes.
    pub waitlist: Option<i64>,
}

/// What a buyer asks to enter: sizes best first (short names) and units.
#[derive(Debug, Clone)]
pub struct EntryOrder {
    pub sizes: Vec<String>,
    pub quantity: i64,
}

impl Shop {
    /// The draw of a drop's seed: its row (the seed the drop's draw has, else a new one) and what
    /// Redis gets. A draw needs a payment window (winners are reservations) and has no line; a drop
    /// once in draw mode stays in it (its entries are kept for the draw).
    pub(super) async fn checked_draw(
        &self,
        drop: &DropId,
        order: Option<DrawOrder>,
        (has_line, payment_window_ms, stock): (bool, Option<i64>, i64),
    ) -> Result<Option<(DrawRow, DropDraw)>, Error> {
        let existing = store::row(&self.pool, drop).await?;
        let Some(order) = order else {
            return match existing {
                Some(_) => {
                    Err(Error::Invalid("this drop is in draw mode: a re-seed keeps its draw (give draw)".into()))
                }
                None => Ok(None),
            };
        };
        if has_line {
            return Err(Error::Invalid("a draw cannot have a waiting_room: entries replace the line".into()));
        }
        if payment_window_ms.is_none() {
            return Err(Error::Invalid(
                "a draw needs a payment_window (its winners get reservations); set one in the body".into(),
            ));
        }
        if order.opens_at >= order.closes_at {
            return Err(Error::Invalid("draw.opens_at must be before draw.closes_at".into()));
        }
        let waitlist = order.waitlist.unwrap_or(stock);
        if !(0..=MAX_STOCK).contains(&waitlist) {
            return Err(Error::Invalid(format!("draw.waitlist must be between 0 and {MAX_STOCK}")));
        }
        let (seed, commitment) = match existing {
            Some(row) => (row.seed, row.commitment),
            None => {
                let seed = hex::encode(admission::draw_seed());
                let commitment = admission::commitment(&seed);
                (seed, commitment)
            }
        };
        let draw = DropDraw {
            opens_at_ms: to_ms(order.opens_at),
            closes_at_ms: to_ms(order.closes_at),
            commitment: commitment.clone(),
            waitlist,
            state: None,
        };
        let row = DrawRow {
            seed,
            commitment,
            opens_at: order.opens_at,
            closes_at: order.closes_at,
            waitlist_places: waitlist,
        };
        Ok(Some((row, draw)))
    }

    /// `draw_stock_fixed` for a re-seed of a drop already in draw mode that would change the draw's
    /// terms (each size's stock, the per-buyer limit, the waitlist's places): the published record
    /// restates them for anyone to recompute the results, and the operator, who holds the seed and
    /// sees the entries, could otherwise choose terms that make a chosen entrant win, as the stock
    /// routes refuse to let them ([`Self::refuse_draw_restock`]). A new size changes them too, so a
    /// retired drawn drop's name is not drawn again under new sizes with its revealed seed.
    pub(super) async fn refuse_new_draw_terms(
        &self,
        drop: &DropId,
        sizes: &[(SaleId, i64)],
        per_buyer: u32,
        waitlist_places: i64,
    ) -> Result<(), Error> {
        let Some(existing) = store::row(&self.pool, drop).await? else {
            return Ok(()); // its first seed in draw mode sets them
        };
        let count = |n: i64| u32::try_from(n).unwrap_or(0);
        let held = crate::draw::run::store::terms(&self.pool, drop, count(existing.waitlist_places)).await?;
        let asked = Terms {
            stock: sizes
                .iter()
                .map(|(sale, stock)| (sale.as_str()[drop.as_str().len() + 1..].to_owned(), count(*stock)))
                .collect(),
            limit: per_buyer,
            waitlist_places: count(waitlist_places),
        };
        if asked != held {
            return Err(Error::DrawStockFixed);
        }
        Ok(())
    }

    /// `user` enters the drop's draw once, while entries are open: sizes best first (1 to 6,
    /// distinct, each the drop's), a quantity within the drop's limit; one Redis call keeps the
    /// entry and streams it to Postgres. Shares the line's join rate limits; a draw that asks a
    /// proof of work needs `solution` (of `GET /drops/{drop}/challenge`), spent in the same call.
    pub async fn enter_draw(
        &self,
        drop: &DropId,
        user: &UserId,
        order: EntryOrder,
        client: IpAddr,
        solution: Option<&str>,
    ) -> Limited<Entry> {
        let mut meter = Meter::new(&self.limits, &self.metrics);
        let outcome = async {
            let (sizes, quantity) = checked_entry(drop, order)?;
            self.known_drop(drop, client, &meter).await?;
            let line = LineId::Drop(drop.clone());
            let spent = solution.map(|s| self.proof(&line.tag(), user, client, Some(s))).transpose()?;
            meter.check(self.sales.keyspace(), client, user, &line.limited_as()).await?;
            let entered = entries::enter(self.sales.keyspace(), drop, user, (&sizes, quantity), spent.as_ref()).await?;
            match entered {
                Entered::Entered(entry) => {
                    if let Some(spent) = &spent {
                        self.solved(spent);
                    }
                    Ok(entry)
                }
                Entered::Duplicate(entry) => Err(Error::AlreadyEntered(entry)),
                Entered::Unknown => Err(Error::NotADraw),
                Entered::Invalid(why) => Err(Error::Invalid(why)),
                Entered::NotOpen => Err(Error::EntriesNotOpen),
                Entered::Closed => Err(Error::EntriesClosed),
                Entered::ChallengeRequired => Err(self.required()),
                Entered::ChallengeReplayed => Err(self.refused(Refused::Replayed)),
            }
        }
        .await;
        meter.finish(outcome)
    }

    /// The buyer's entry in the drop's draw, with its result once drawn (`super::DrawResult`):
    /// `no_entry` without one, `not_a_draw` for a drop not in draw mode. Limited as the line's join is
    /// (per client and buyer): a read costs Redis and, once drawn, Postgres.
    pub async fn draw_entry(
        &self,
        drop: &DropId,
        user: &UserId,
        client: IpAddr,
    ) -> Limited<(Entry, Option<super::DrawResult>)> {
        let mut meter = Meter::new(&self.limits, &self.metrics);
        let outcome = async {
            self.known_drop(drop, client, &meter).await?;
            meter.check(self.sales.keyspace(), client, user, &LineId::Drop(drop.clone()).limited_as()).await?;
            match entries::entry(self.sales.keyspace(), drop, user).await? {
                Some(entry) => Ok((entry, self.draw_result(drop, user).await?)),
                None if entries::info(self.sales.keyspace(), drop).await?.is_none() => Err(Error::NotADraw),
                None => Err(Error::NoEntry),
            }
        }
        .await;
        meter.finish(outcome)
    }

    /// `unknown_drop` for a drop none of whose sizes the registry holds (this instance's copy, no
    /// Redis call per request; counted against `client`'s quota of unknown ids).
    async fn known_drop(&self, drop: &DropId, client: IpAddr, meter: &Meter<'_>) -> Result<(), Error> {
        if !self.board.group_registered(drop.as_str()).await? {
            meter.check_unknown_sale(client)?;
            return Err(Error::UnknownDrop);
        }
        Ok(())
    }
}

/// An entry's own rules: 1 to [`MAX_SIZES`] distinct sizes, each a valid size name of the drop,
/// and 1 to [`MAX_PER_BUYER`] units (the drop's own limit is checked by `lua/draw_enter.lua`).
fn checked_entry(drop: &DropId, EntryOrder { sizes, quantity }: EntryOrder) -> Result<(Vec<String>, u32), Error> {
    if sizes.is_empty() || sizes.len() > MAX_SIZES {
        return Err(Error::Invalid(format!("sizes must name 1 to {MAX_SIZES} sizes, best first")));
    }
    for (i, size) in sizes.iter().enumerate() {
        drop.size(size).map_err(|why| Error::Invalid(format!("sizes: {why}")))?;
        if sizes[..i].contains(size) {
            return Err(Error::Invalid(format!("sizes: {size} is named twice")));
        }
    }
    match u32::try_from(quantity) {
        Ok(q @ 1..) if q <= MAX_PER_BUYER => Ok((sizes, q)),
        _ => Err(Error::Invalid(format!("quantity must be 1-{MAX_PER_BUYER} (at most the drop's per_buyer)"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_names_distinct_sizes_of_the_drop_and_a_quantity_in_bounds() {
        let drop = DropId::parse("kicks").unwrap();
        let order =
            |sizes: &[&str], quantity| EntryOrder { sizes: sizes.iter().map(|s| s.to_string()).collect(), quantity };
        assert_eq!(checked_entry(&drop, order(&["42", "41"], 2)).unwrap(), (vec!["42".into(), "41".into()], 2));
        for bad in [order(&[], 1), order(&["42", "42"], 1), order(&["1", "2", "3", "4", "5", "6", "7"], 1)] {
            assert!(matches!(checked_entry(&drop, bad), Err(Error::Invalid(_))));
        }
        for bad in [order(&["4 2"], 1), order(&["42"], 0), order(&["42"], 101), order(&["42"], -1)] {
            assert!(matches!(checked_entry(&drop, bad), Err(Error::Invalid(_))));
        }
    }
}
