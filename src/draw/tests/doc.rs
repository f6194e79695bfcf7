//! docs/draw.md's worked example is what the code gives: its table and its waitlist offer are
//! recomputed from the seed the doc shows, and the doc must contain them word for word.

use std::collections::BTreeMap;

use super::{entry, pseudonym};
use crate::admission::commitment;
use crate::draw::allocate::{Entry, Outcome, Terms, allocate};
use crate::draw::rank::{ranking, ticket};
use crate::draw::waitlist::{Waiting, offer};

const DOC: &str = include_str!("../../../docs/draw.md");

/// The example's entrants, in the order they entered.
const ENTRANTS: [(&str, &[&str], u32); 5] = [
    ("alice", &["42", "43"], 1),
    ("bob", &["43"], 1),
    ("carol", &["42"], 2),
    ("dave", &["43", "42"], 1),
    ("erin", &["42"], 1),
];

/// The example's table and its waitlist line, as the code computes them from `seed`.
fn example(seed: &str) -> String {
    let terms = Terms { stock: BTreeMap::from([("42".into(), 2), ("43".into(), 1)]), limit: 2, waitlist_places: 2 };
    let entries: Vec<Entry> = ENTRANTS.iter().map(|(name, sizes, quantity)| entry(name, sizes, *quantity)).collect();
    let name = |entrant: &str| ENTRANTS.iter().map(|e| e.0).find(|name| pseudonym(name) == entrant).unwrap();
    let ranked = ranking(seed, entries);
    let drawn = allocate(&terms, &ranked);
    let mut text = String::from(
        "| rank | buyer | entrant (first 12 hex) | ticket (first 16 hex) | sizes | quantity | result |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for (rank, (entry, (_, outcome))) in ranked.iter().zip(&drawn.results).enumerate() {
        let result = match outcome {
            Outcome::Won { size, quantity } => format!("won {quantity} × {size}"),
            Outcome::Waitlisted { position } => format!("waitlist place {position}"),
            Outcome::Lost => "lost".to_owned(),
        };
        text += &format!(
            "| {} | {} | `{}` | `{}` | {} | {} | {result} |\n",
            rank + 1,
            name(&entry.entrant),
            &entry.entrant[..12],
            &hex::encode(ticket(seed, &entry.entrant))[..16],
            entry.sizes.join(", "),
            entry.quantity,
        );
    }
    let left: Vec<String> = drawn.left.iter().map(|(size, units)| format!("{units} × {size}")).collect();
    text += &format!("\nLeft in stock: {}.\n", left.join(", "));
    let waitlist: Vec<Waiting> = ranked
        .iter()
        .zip(&drawn.results)
        .filter(|(_, (_, outcome))| matches!(outcome, Outcome::Waitlisted { .. }))
        .map(|(e, _)| Waiting {
            entrant: e.entrant.clone(),
            sizes: e.sizes.clone(),
            quantity: e.quantity,
            waiting: true,
        })
        .collect();
    for size in ["42", "43"] {
        let returned = offer(&waitlist, size, 1);
        let offers: Vec<String> =
            returned.offers.iter().map(|o| format!("offered to {} (place {})", name(&o.entrant), o.position)).collect();
        let to_stock = if returned.to_stock > 0 { "back to stock" } else { "" };
        text += &format!("\nIf one unit of {size} comes back: {}{to_stock}.", offers.join(", "));
    }
    text
}

#[test]
fn the_docs_worked_example_is_what_the_code_gives() {
    let seed = DOC.split("SEED=").nth(1).expect("docs/draw.md shows SEED=<64 hex>");
    let seed = &seed[..seed.find(|c: char| !c.is_ascii_hexdigit()).unwrap_or(seed.len())];
    assert_eq!(seed.len(), 64, "docs/draw.md's seed");
    let expected = example(seed);
    assert!(DOC.contains(&commitment(seed)), "docs/draw.md must show the commitment {}", commitment(seed));
    assert!(DOC.contains(&pseudonym("alice")), "docs/draw.md must show alice's pseudonym {}", pseudonym("alice"));
    assert!(DOC.contains(&expected), "docs/draw.md's worked example must read:\n{expected}");
}
