//! Fairness: over 1,000 draws (1,000 seeds) of a drop of 5 units among 20 entrants, each entrant
//! wins as often as any other, and so does each place in the order of arrival (a chi-square test
//! at the 1% level); rankings biased on purpose fail the same test. The seeds are fixed, so each
//! run computes the same statistics: the test cannot flicker.

use std::collections::{BTreeMap, HashMap};

use super::{Rng, entry, seed};
use crate::draw::allocate::{Entry, Outcome, Terms, allocate};
use crate::draw::rank::ranking;

const DRAWS: u64 = 1_000;
const ENTRANTS: usize = 20;
const UNITS: u32 = 5;

/// The chi-square distribution's upper 1% point for 19 degrees of freedom (ENTRANTS - 1): 36.191
/// (NIST/SEMATECH e-Handbook of Statistical Methods, section 1.3.6.7.4, "Critical Values of the
/// Chi-Square Distribution", upper-tail table, ν = 19, column 0.01).
const CRITICAL_19_AT_1_PERCENT: f64 = 36.191;

/// The chi-square statistic of win counts, for ENTRANTS counts over DRAWS draws of UNITS winners
/// each, drawn without replacement. A count has variance n·p·(1-p) (n draws, p = UNITS/ENTRANTS)
/// and the counts covary by -n·p·(1-p)/(N-1) (their total is fixed), so
/// Σ (count - n·p)² · (N-1) / (N·n·p·(1-p)) follows chi-square with N-1 degrees of freedom
/// (Pearson's Σ (O-E)²/E would understate it by a factor (1-p)·N/(N-1), 0.79 here).
fn chi_square(wins: &[u32]) -> f64 {
    let (draws, entrants) = (DRAWS as f64, wins.len() as f64);
    let p = f64::from(UNITS) / entrants;
    let expected = draws * p;
    let squares: f64 = wins.iter().map(|w| (f64::from(*w) - expected).powi(2)).sum();
    squares * (entrants - 1.0) / (entrants * draws * p * (1.0 - p))
}

/// Runs the draws with `rank`, the entries arriving in a new random order each time; the win
/// counts by entrant and by place of arrival.
fn win_counts(rank: impl Fn(&str, Vec<Entry>) -> Vec<Entry>) -> (Vec<u32>, Vec<u32>) {
    let terms = Terms { stock: BTreeMap::from([("42".to_owned(), UNITS)]), limit: 1, waitlist_places: 0 };
    let entries: Vec<Entry> = (0..ENTRANTS).map(|i| entry(&format!("entrant{i}"), &["42"], 1)).collect();
    let who: HashMap<String, usize> = entries.iter().enumerate().map(|(i, e)| (e.entrant.clone(), i)).collect();
    let (mut by_entrant, mut by_arrival) = (vec![0; ENTRANTS], vec![0; ENTRANTS]);
    let mut rng = Rng::new(1_000);
    for draw in 0..DRAWS {
        let mut arrived = entries.clone();
        rng.shuffle(&mut arrived);
        let place: HashMap<&str, usize> = arrived.iter().enumerate().map(|(i, e)| (e.entrant.as_str(), i)).collect();
        let drawn = allocate(&terms, &rank(&seed(draw), arrived.clone()));
        for (entrant, outcome) in &drawn.results {
            if matches!(outcome, Outcome::Won { .. }) {
                by_entrant[who[entrant]] += 1;
                by_arrival[place[entrant.as_str()]] += 1;
            }
        }
        assert_eq!(drawn.left["42"], 0);
    }
    (by_entrant, by_arrival)
}

#[test]
fn each_entrant_and_each_place_of_arrival_wins_as_often_as_any_other() {
    let (by_entrant, by_arrival) = win_counts(ranking);
    let (entrants, arrivals) = (chi_square(&by_entrant), chi_square(&by_arrival));
    eprintln!("chi-square by entrant {entrants:.2}, by arrival {arrivals:.2} (critical {CRITICAL_19_AT_1_PERCENT})");
    assert!(entrants < CRITICAL_19_AT_1_PERCENT, "wins by entrant {by_entrant:?}: chi-square {entrants:.2}");
    assert!(arrivals < CRITICAL_19_AT_1_PERCENT, "wins by arrival {by_arrival:?}: chi-square {arrivals:.2}");
}

#[test]
fn the_test_catches_rankings_biased_on_purpose() {
    // First come, first served: the first five to arrive always win.
    let (_, by_arrival) = win_counts(|_, entries| entries);
    assert!(chi_square(&by_arrival) > CRITICAL_19_AT_1_PERCENT, "{by_arrival:?}");
    // By pseudonym, not ticket: the same five entrants win every draw.
    let (by_entrant, _) = win_counts(|_, mut entries| {
        entries.sort_by(|a, b| a.entrant.cmp(&b.entrant));
        entries
    });
    assert!(chi_square(&by_entrant) > CRITICAL_19_AT_1_PERCENT, "{by_entrant:?}");
    // Subtler: the seed's ranking, but one draw in five the first to arrive jumps the queue (one in
    // ten, 303 wins where 250 are expected, stays below the critical value at 1,000 draws).
    let (_, by_arrival) = win_counts(|seed, entries| {
        let first = entries[0].entrant.clone();
        let mut ranked = ranking(seed, entries);
        if u8::from_str_radix(&seed[..2], 16).unwrap() < 51 {
            let at = ranked.iter().position(|e| e.entrant == first).unwrap();
            let jumper = ranked.remove(at);
            ranked.insert(0, jumper);
        }
        ranked
    });
    assert!(chi_square(&by_arrival) > CRITICAL_19_AT_1_PERCENT, "{by_arrival:?}: {}", chi_square(&by_arrival));
}
