//! A unit that comes back after the draw (a winner's reservation expired or was cancelled): the
//! waitlist is offered it before the stock. `lua/release.lua` is to keep this same rule.

/// One place on the waitlist, as the draw gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// The entrant's pseudonym.
    pub entrant: String,
    /// The sizes of the entry.
    pub sizes: Vec<String>,
    /// Units of the entry (an offer is all of them, of one size).
    pub quantity: u32,
    /// Still waiting: not offered a unit yet.
    pub waiting: bool,
}

/// An offer to a waitlisted entrant: `quantity` units of `size`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    /// The waitlist place offered (1 first): the index in the waitlist plus one.
    pub position: u32,
    /// The entrant's pseudonym.
    pub entrant: String,
    /// The size that came back.
    pub size: String,
    /// Units offered: the entry's quantity.
    pub quantity: u32,
}

/// What becomes of units that come back: the offers, in waitlist order, and the units no one took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Returned {
    /// The offers made (each entrant offered stops waiting).
    pub offers: Vec<Offer>,
    /// Units that go back to the size's stock.
    pub to_stock: u32,
}

/// `units` of `size` come back: walking `waitlist` (in position order), each still waiting entrant
/// who listed `size` and whose quantity fits in the units still to give is offered its quantity;
/// the rest go back to stock. The caller marks the offered places no longer waiting.
pub fn offer(waitlist: &[Waiting], size: &str, units: u32) -> Returned {
    let mut to_give = units;
    let mut offers = vec![];
    for (index, place) in waitlist.iter().enumerate() {
        if to_give == 0 {
            break;
        }
        if place.waiting && place.quantity <= to_give && place.sizes.iter().any(|s| s == size) {
            to_give -= place.quantity;
            offers.push(Offer {
                position: u32::try_from(index + 1).unwrap_or(u32::MAX),
                entrant: place.entrant.clone(),
                size: size.to_owned(),
                quantity: place.quantity,
            });
        }
    }
    Returned { offers, to_stock: to_give }
}
