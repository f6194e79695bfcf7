//! The allocation and the waitlist on random drops, against a sequential reference and the
//! invariants of issue 53: nobody wins twice or over the limit, every unit is won, left, offered
//! or back in stock exactly once.

use std::collections::{BTreeMap, HashSet};

use super::{Rng, entry, seed};
use crate::draw::allocate::{Entry, Outcome, Terms, allocate, validate};
use crate::draw::rank::{ranking, ticket};
use crate::draw::waitlist::{Waiting, offer};

const SIZES: [&str; 6] = ["38", "39", "40", "41", "42", "43"];

/// A random drop: 1-6 sizes of 0-20 units, a limit of 1-4, 0-5 waitlist places, 0-40 entries
/// (one in 20 malformed, one in 40 a second entry of an entrant).
fn random_draw(rng: &mut Rng) -> (Terms, Vec<Entry>) {
    let sizes = &SIZES[..rng.range(1, 6) as usize];
    let stock = sizes.iter().map(|size| ((*size).to_owned(), rng.range(0, 20))).collect();
    let terms = Terms { stock, limit: rng.range(1, 4), waitlist_places: rng.range(0, 5) };
    let mut entries: Vec<Entry> = (0..rng.range(0, 40))
        .map(|i| {
            let mut wanted = sizes.to_vec();
            rng.shuffle(&mut wanted);
            wanted.truncate(rng.range(1, u32::try_from(sizes.len()).unwrap()) as usize);
            let mut entry = entry(&format!("user{i}"), &wanted, rng.range(1, terms.limit));
            if rng.one_in(20) {
                match rng.range(0, 4) {
                    0 => entry.quantity = 0,
                    1 => entry.quantity = terms.limit + 1,
                    2 => entry.sizes.clear(),
                    3 => entry.sizes.push("99".to_owned()),
                    _ => entry.sizes.push(entry.sizes[0].clone()),
                }
            }
            entry
        })
        .collect();
    if !entries.is_empty() && rng.one_in(40) {
        let again = Entry { sizes: vec![sizes[0].to_owned()], quantity: 1, ..entries[0].clone() };
        entries.push(again);
    }
    (terms, entries)
}

/// Each entrant's outcome in rank order.
type Results = Vec<(String, Outcome)>;
/// Units per size, as a list.
type Units = Vec<(String, u32)>;

/// The draw done the plain way: the lowest (ticket, entrant) taken out of the pending entries one
/// at a time, the stock a list of (size, units) searched from the start for each size wanted.
fn reference(seed: &str, terms: &Terms, entries: &[Entry]) -> (Results, Units) {
    let mut stock: Vec<(String, u32)> = terms.stock.iter().map(|(size, units)| (size.clone(), *units)).collect();
    let mut pending: Vec<&Entry> = entries.iter().collect();
    let (mut walked, mut places, mut results) = (Vec::<String>::new(), 0, vec![]);
    while !pending.is_empty() {
        let key = |entry: &Entry| (ticket(seed, &entry.entrant), entry.entrant.clone());
        let mut lowest = 0;
        for i in 1..pending.len() {
            if key(pending[i]) < key(pending[lowest]) {
                lowest = i;
            }
        }
        let entry = pending.remove(lowest);
        let quantity = entry.quantity;
        let sizes_ok = !entry.sizes.is_empty()
            && (0..entry.sizes.len()).all(|i| {
                stock.iter().any(|(size, _)| *size == entry.sizes[i]) && !entry.sizes[..i].contains(&entry.sizes[i])
            });
        let valid = !walked.contains(&entry.entrant) && quantity >= 1 && quantity <= terms.limit && sizes_ok;
        walked.push(entry.entrant.clone());
        let mut outcome = Outcome::Lost;
        if valid {
            'wanted: for wanted in &entry.sizes {
                for (size, units) in stock.iter_mut() {
                    if size == wanted && *units >= quantity {
                        *units -= quantity;
                        outcome = Outcome::Won { size: size.clone(), quantity };
                        break 'wanted;
                    }
                }
            }
            if outcome == Outcome::Lost && places < terms.waitlist_places {
                places += 1;
                outcome = Outcome::Waitlisted { position: places };
            }
        }
        results.push((entry.entrant.clone(), outcome));
    }
    (results, stock)
}

#[test]
fn the_allocation_equals_the_sequential_reference_and_keeps_every_unit_once() {
    let mut rng = Rng::new(53);
    let (mut won, mut waitlisted, mut invalid) = (0, 0, 0);
    for case in 0..1_500 {
        let (terms, entries) = random_draw(&mut rng);
        let seed = seed(case);
        let drawn = allocate(&terms, &ranking(&seed, entries.clone()));
        let (results, left) = reference(&seed, &terms, &entries);
        assert_eq!(drawn.results, results, "case {case}: {terms:?} {entries:?}");
        assert_eq!(drawn.left.into_iter().collect::<Vec<_>>(), left, "case {case}");
        let mut winners = HashSet::new();
        let mut units_won: BTreeMap<&str, u32> = BTreeMap::new();
        let mut positions = vec![];
        for ((entrant, outcome), entry) in results.iter().zip(ranking(&seed, entries.clone())) {
            assert_eq!(*entrant, entry.entrant);
            invalid += usize::from(validate(&entry, &terms).is_err());
            match outcome {
                Outcome::Won { size, quantity } => {
                    assert!(winners.insert(entrant), "case {case}: {entrant} won twice");
                    assert!(*quantity == entry.quantity && *quantity <= terms.limit && entry.sizes.contains(size));
                    *units_won.entry(size).or_default() += quantity;
                    won += 1;
                }
                Outcome::Waitlisted { position } => positions.push(*position),
                Outcome::Lost => {}
            }
        }
        for (size, units) in &terms.stock {
            let kept = left.iter().find(|(s, _)| s == size).unwrap().1;
            assert_eq!(units_won.get(size.as_str()).unwrap_or(&0) + kept, *units, "case {case}: size {size}");
        }
        assert_eq!(positions, (1..=u32::try_from(positions.len()).unwrap()).collect::<Vec<_>>(), "case {case}");
        waitlisted += positions.len();
        waitlist_returns(&mut rng, &terms, &entries, &results, &left, case);
    }
    assert!(won > 5_000 && waitlisted > 1_000 && invalid > 500, "inputs too tame: {won} {waitlisted} {invalid}");
}

/// Winners give their units back in a random order; each return goes down the waitlist. No entrant
/// is offered twice; each return's units are offered or back in stock; the offers are exactly
/// the waitlist's walk; at the end, per size, stock = left + kept by winners + offered + returned.
fn waitlist_returns(
    rng: &mut Rng,
    terms: &Terms,
    entries: &[Entry],
    results: &[(String, Outcome)],
    left: &[(String, u32)],
    case: u64,
) {
    let entry_of = |entrant: &str| entries.iter().find(|e| e.entrant == entrant).unwrap();
    let mut waitlist: Vec<Waiting> = results
        .iter()
        .filter(|(_, outcome)| matches!(outcome, Outcome::Waitlisted { .. }))
        .map(|(entrant, _)| {
            let Entry { sizes, quantity, .. } = entry_of(entrant).clone();
            Waiting { entrant: entrant.clone(), sizes, quantity, waiting: true }
        })
        .collect();
    let mut held: Vec<(String, u32)> = results
        .iter()
        .filter_map(|(_, outcome)| match outcome {
            Outcome::Won { size, quantity } => Some((size.clone(), *quantity)),
            _ => None,
        })
        .collect();
    rng.shuffle(&mut held);
    let mut back: Vec<(String, u32)> = left.to_vec();
    let mut offered = HashSet::new();
    for _ in 0..rng.range(0, u32::try_from(held.len()).unwrap()) {
        let (size, units) = held.pop().unwrap();
        let returned = offer(&waitlist, &size, units);
        let mut given = 0;
        for (i, made) in returned.offers.iter().enumerate() {
            let place = &mut waitlist[made.position as usize - 1];
            assert!(offered.insert(made.entrant.clone()), "case {case}: {} offered twice", made.entrant);
            assert!(place.waiting && place.entrant == made.entrant && place.sizes.contains(&size));
            assert!(made.size == size && made.quantity == place.quantity && made.quantity <= units - given);
            assert!(i == 0 || returned.offers[i - 1].position < made.position, "case {case}: not in order");
            given += made.quantity;
            place.waiting = false;
            held.insert(0, (size.clone(), made.quantity)); // the offer is a reservation: it may come back too
        }
        assert_eq!(given + returned.to_stock, units, "case {case}");
        // Passed over: only a place not waiting, without the size, or wanting more than was left.
        for (index, place) in waitlist.iter().enumerate().filter(|(_, p)| p.waiting && p.sizes.contains(&size)) {
            let position = u32::try_from(index + 1).unwrap();
            let before: u32 = returned.offers.iter().filter(|o| o.position < position).map(|o| o.quantity).sum();
            assert!(place.quantity > units - before, "case {case}: place {position} was passed over");
        }
        back.iter_mut().find(|(s, _)| *s == size).unwrap().1 += returned.to_stock;
    }
    for (size, units) in &terms.stock {
        let held: u32 = held.iter().filter(|(s, _)| s == size).map(|(_, q)| q).sum();
        let back = back.iter().find(|(s, _)| s == size).unwrap().1;
        assert_eq!(held + back, *units, "case {case}: size {size}");
    }
}

#[test]
fn the_ranking_does_not_depend_on_the_order_entries_arrived_in() {
    let mut rng = Rng::new(7);
    for case in 0..200 {
        let (_, mut entries) = random_draw(&mut rng);
        let mut seen = HashSet::new();
        entries.retain(|e| seen.insert(e.entrant.clone()));
        let seed = seed(case);
        let ranked = ranking(&seed, entries.clone());
        rng.shuffle(&mut entries);
        assert_eq!(ranking(&seed, entries.clone()), ranked, "case {case}");
        let tickets: Vec<[u8; 32]> = ranked.iter().map(|e| ticket(&seed, &e.entrant)).collect();
        assert!(tickets.is_sorted(), "case {case}: tickets not ascending");
    }
}

#[test]
fn a_malformed_or_repeated_entry_loses_and_takes_nothing() {
    let stock = BTreeMap::from([("42".to_owned(), 1), ("43".to_owned(), 1)]);
    let terms = Terms { stock, limit: 1, waitlist_places: 1 };
    let ranked = vec![
        entry("zero", &["42"], 0),
        entry("over", &["42"], 2),
        entry("none", &[], 1),
        entry("unknown", &["44", "42"], 1),
        entry("twice", &["42", "42"], 1),
        entry("alice", &["43"], 1),
        entry("alice", &["42"], 1),
        entry("bob", &["43"], 1),
    ];
    let drawn = allocate(&terms, &ranked);
    let outcomes: Vec<&Outcome> = drawn.results.iter().map(|(_, outcome)| outcome).collect();
    let won = Outcome::Won { size: "43".to_owned(), quantity: 1 };
    let mut expected = vec![&Outcome::Lost; 5];
    expected.extend([&won, &Outcome::Lost, &Outcome::Waitlisted { position: 1 }]);
    assert_eq!(outcomes, expected);
    assert_eq!(drawn.left["42"], 1, "no invalid entry took a unit of 42");
    assert_eq!(ranked.iter().take(5).filter(|e| validate(e, &terms).is_err()).count(), 5);
}
