//! The allocation and the waitlist on random drops, against a sequential reference and the
//! invariants of issue 53: nobody wins twice or over the limit, every unit is won, left, offered
//! or back in stock exactly once.

use std::collections::{BTreeMap, HashSet};

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

use super::{Rng, entry, seed};
use crate::draw::allocate::{Entry, Outcome, Terms, allocate, validate};
use crate::draw::rank::{ranking, ticket};
use crate::draw::waitlist::{Waiting, offer};

const SIZES: [&str; 6] = ["38", "39", "40", "41", "42", "43"];

/// A drop's sizes, stock and rules, and its entries: an entry is its sizes (best first), its
/// quantity, and a defect in one entry of 20 (0: quantity 0, 1: over the limit, 2: no size,
/// 3: a size the drop lacks, 4: a size twice).
type Case = (Vec<u32>, u32, u32, Vec<(Vec<&'static str>, u32, Option<u8>)>, bool);

/// A random drop: 1-6 sizes of 0-20 units, a limit of 1-4, 0-5 waitlist places, 0-40 entries
/// (one in 20 malformed; in one drop of 20, a second entry of the first entrant).
fn random_draw() -> impl Strategy<Value = (Terms, Vec<Entry>)> {
    (1..=6usize, 1..=4u32)
        .prop_flat_map(|(n, limit)| {
            let sizes = SIZES[..n].to_vec();
            let defect = prop_oneof![19 => Just(None), 1 => (0..5u8).prop_map(Some)];
            let entry = (proptest::sample::subsequence(sizes, 1..=n).prop_shuffle(), 1..=limit, defect);
            let entries = proptest::collection::vec(entry, 0..=40);
            (proptest::collection::vec(0..=20u32, n), Just(limit), 0..=5u32, entries, proptest::bool::weighted(0.05))
        })
        .prop_map(|(stock, limit, waitlist_places, raw, repeat): Case| {
            let stock = stock.iter().zip(SIZES).map(|(units, size)| (size.to_owned(), *units)).collect();
            let terms = Terms { stock, limit, waitlist_places };
            let mut entries: Vec<Entry> = raw
                .iter()
                .enumerate()
                .map(|(i, (wanted, quantity, defect))| {
                    let mut entry = entry(&format!("user{i}"), wanted, *quantity);
                    match defect {
                        Some(0) => entry.quantity = 0,
                        Some(1) => entry.quantity = limit + 1,
                        Some(2) => entry.sizes.clear(),
                        Some(3) => entry.sizes.push("99".to_owned()),
                        Some(_) => entry.sizes.push(entry.sizes[0].clone()),
                        None => {}
                    }
                    entry
                })
                .collect();
            if repeat && !entries.is_empty() {
                entries.push(Entry { sizes: vec![SIZES[0].to_owned()], quantity: 1, ..entries[0].clone() });
            }
            (terms, entries)
        })
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

/// Checks one drawn case against the reference and the invariants; the counts of winners,
/// waitlisted and invalid entries.
fn check(seed: &str, terms: &Terms, entries: &[Entry], returns: &[Index]) -> (usize, usize, usize) {
    let drawn = allocate(terms, &ranking(seed, entries.to_vec()));
    let (results, left) = reference(seed, terms, entries);
    assert_eq!(drawn.results, results);
    assert_eq!(drawn.left.into_iter().collect::<Vec<_>>(), left);
    let (mut winners, mut invalid) = (HashSet::new(), 0);
    let mut units_won: BTreeMap<&str, u32> = BTreeMap::new();
    let mut positions = vec![];
    for ((entrant, outcome), entry) in results.iter().zip(ranking(seed, entries.to_vec())) {
        assert_eq!(*entrant, entry.entrant);
        invalid += usize::from(validate(&entry, terms).is_err());
        match outcome {
            Outcome::Won { size, quantity } => {
                assert!(winners.insert(entrant), "{entrant} won twice");
                assert!(*quantity == entry.quantity && *quantity <= terms.limit && entry.sizes.contains(size));
                *units_won.entry(size).or_default() += quantity;
            }
            Outcome::Waitlisted { position } => positions.push(*position),
            Outcome::Lost => {}
        }
    }
    for (size, units) in &terms.stock {
        let kept = left.iter().find(|(s, _)| s == size).unwrap().1;
        assert_eq!(units_won.get(size.as_str()).unwrap_or(&0) + kept, *units, "size {size}");
    }
    assert_eq!(positions, (1..=u32::try_from(positions.len()).unwrap()).collect::<Vec<_>>());
    waitlist_returns(terms, entries, &results, &left, returns);
    (winners.len(), positions.len(), invalid)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1_000, ..ProptestConfig::default() })]

    #[test]
    fn the_allocation_equals_the_sequential_reference_and_keeps_every_unit_once(
        (terms, entries) in random_draw(),
        seed in any::<[u8; 32]>(),
        returns in proptest::collection::vec(any::<Index>(), 0..40),
    ) {
        check(&hex::encode(seed), &terms, &entries, &returns);
    }
}

#[test]
fn the_random_drops_reach_winners_waitlists_and_invalid_entries() {
    let mut runner = TestRunner::deterministic();
    let (mut won, mut waitlisted, mut invalid) = (0, 0, 0);
    for case in 0..500 {
        let (terms, entries) = random_draw().new_tree(&mut runner).unwrap().current();
        let (w, l, i) = check(&seed(case), &terms, &entries, &[]);
        (won, waitlisted, invalid) = (won + w, waitlisted + l, invalid + i);
    }
    assert!(won > 2_000 && waitlisted > 500 && invalid > 200, "inputs too tame: {won} {waitlisted} {invalid}");
}

/// Winners give their units back in a random order; each return goes down the waitlist. No entrant
/// is offered twice; each return's units are offered or back in stock; the offers are exactly
/// the waitlist's walk; at the end, per size, stock = left + kept by winners + offered + returned.
fn waitlist_returns(
    terms: &Terms,
    entries: &[Entry],
    results: &[(String, Outcome)],
    left: &[(String, u32)],
    returns: &[Index],
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
    let mut back: Vec<(String, u32)> = left.to_vec();
    let mut offered = HashSet::new();
    for index in returns {
        if held.is_empty() {
            break;
        }
        let (size, units) = held.remove(index.index(held.len()));
        let returned = offer(&waitlist, &size, units);
        let mut given = 0;
        for (i, made) in returned.offers.iter().enumerate() {
            let place = &mut waitlist[made.position as usize - 1];
            assert!(offered.insert(made.entrant.clone()), "{} offered twice", made.entrant);
            assert!(place.waiting && place.entrant == made.entrant && place.sizes.contains(&size));
            assert!(made.size == size && made.quantity == place.quantity && made.quantity <= units - given);
            assert!(i == 0 || returned.offers[i - 1].position < made.position, "not in order");
            given += made.quantity;
            place.waiting = false;
            held.push((size.clone(), made.quantity)); // the offer is a reservation: it may come back too
        }
        assert_eq!(given + returned.to_stock, units);
        // Passed over: only a place not waiting, without the size, or wanting more than was left.
        for (index, place) in waitlist.iter().enumerate().filter(|(_, p)| p.waiting && p.sizes.contains(&size)) {
            let position = u32::try_from(index + 1).unwrap();
            let before: u32 = returned.offers.iter().filter(|o| o.position < position).map(|o| o.quantity).sum();
            assert!(place.quantity > units - before, "place {position} was passed over");
        }
        back.iter_mut().find(|(s, _)| *s == size).unwrap().1 += returned.to_stock;
    }
    for (size, units) in &terms.stock {
        let held: u32 = held.iter().filter(|(s, _)| s == size).map(|(_, q)| q).sum();
        let back = back.iter().find(|(s, _)| s == size).unwrap().1;
        assert_eq!(held + back, *units, "size {size}");
    }
}

proptest! {
    #[test]
    fn the_ranking_does_not_depend_on_the_order_entries_arrived_in(
        (_, mut entries) in random_draw(),
        seed in any::<[u8; 32]>(),
        arrival in any::<u64>(),
    ) {
        let mut seen = HashSet::new();
        entries.retain(|e| seen.insert(e.entrant.clone()));
        let seed = hex::encode(seed);
        let ranked = ranking(&seed, entries.clone());
        Rng::new(arrival).shuffle(&mut entries);
        prop_assert_eq!(ranking(&seed, entries.clone()), ranked.clone());
        let tickets: Vec<[u8; 32]> = ranked.iter().map(|e| ticket(&seed, &e.entrant)).collect();
        prop_assert!(tickets.is_sorted(), "tickets not ascending");
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
