//! The published record: written and read back, refused with the line named, verified when honest
//! and caught when changed.

use std::collections::BTreeMap;

use super::{Rng, entry, pseudonym, seed};
use crate::domain::DropId;
use crate::draw::allocate::{Outcome, Terms};
use crate::draw::record::{MAX_LINE, ParseError, Problem, Record, read, write};
use crate::draw::verify::{Mismatch, Summary, verify};

/// An honest draw of 60 entries for 3 sizes of 4 units, 2 each at most, 5 waitlist places.
fn honest() -> Record {
    let mut rng = Rng::new(3);
    let sizes = ["41", "42", "43"];
    let stock = sizes.iter().map(|s| ((*s).to_owned(), 4)).collect();
    let terms = Terms { stock, limit: 2, waitlist_places: 5 };
    let entries = (0..60)
        .map(|i| {
            let mut wanted = sizes.to_vec();
            rng.shuffle(&mut wanted);
            entry(&format!("buyer{i}"), &wanted[..rng.range(1, 3) as usize], rng.range(1, 2))
        })
        .collect();
    Record::draw(DropId::parse("sneaker").unwrap(), &seed(1), terms, entries)
}

fn text(record: &Record) -> String {
    let mut out = vec![];
    write(record, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

fn parse(text: &str) -> Result<Record, ParseError> {
    read(text.as_bytes())
}

#[test]
fn a_record_reads_back_as_written() {
    let record = honest();
    let text = text(&record);
    assert_eq!(text.lines().count(), 1 + 60 + 60);
    assert!(text.starts_with(r#"{"kind":"draw","drop":"sneaker","commitment":""#), "{text}");
    assert!(text.contains(r#""stock":{"41":4,"42":4,"43":4},"limit":2,"waitlist_places":5}"#), "{text}");
    for kind in
        [r#"{"kind":"entry","entrant":""#, r#"{"kind":"won","#, r#"{"kind":"waitlisted","#, r#"{"kind":"lost","#]
    {
        assert!(text.contains(kind), "no {kind} in {text}");
    }
    assert_eq!(parse(&text).unwrap(), record);
    // Any order after the draw line, blank lines and CRLF endings: the same record.
    let mut lines: Vec<&str> = text.lines().collect();
    lines[1..].reverse();
    let reordered = parse(&(lines.join("\r\n") + "\n\n")).unwrap();
    assert_eq!((reordered.entries.len(), reordered.results.len()), (60, 60));
    assert_eq!(verify(&reordered), verify(&record));
}

/// The line and problem of reading `text`.
fn refused(text: &str) -> (usize, Problem, String) {
    let err = parse(text).expect_err(text.get(..200).unwrap_or(text));
    let message = err.to_string();
    (err.line, err.problem, message)
}

#[test]
fn a_malformed_record_is_refused_naming_the_line() {
    let good = text(&honest());
    let lines: Vec<&str> = good.lines().collect();
    let with = |at: usize, line: &str| {
        let mut changed = lines.clone();
        changed.insert(at, line);
        changed.join("\n")
    };
    let (line, problem, message) = refused(&with(2, "{not json"));
    assert!(line == 3 && matches!(problem, Problem::Json { column: 2, .. }), "{message}");
    assert!(message.starts_with("line 3: not a record line (column 2): ") && !message.contains("line 1"), "{message}");
    let (line, _, message) = refused(&with(1, r#"{"kind":"prize","entrant":"00"}"#));
    assert!(line == 2 && message.contains("unknown variant `prize`"), "{message}");
    let long = format!(r#"{{"kind":"lost","entrant":"{}"}}"#, "a".repeat(MAX_LINE));
    let (line, problem, _) = refused(&with(4, &long));
    assert!(line == 5 && matches!(problem, Problem::TooLong));
    let (line, problem, _) = refused(&with(5, lines[1]));
    assert!(line == 6 && matches!(problem, Problem::DuplicateEntry(e) if lines[1].contains(&e)));
    let (line, problem, _) = refused(&with(lines.len(), lines[lines.len() - 1]));
    assert!(line == lines.len() + 1 && matches!(problem, Problem::DuplicateResult(_)));
    let (line, problem, _) = refused(&with(7, lines[0]));
    assert!(line == 8 && matches!(problem, Problem::SecondDraw));
    let (line, problem, _) = refused(&lines[1..].join("\n"));
    assert!(line == 1 && matches!(problem, Problem::NoDraw));
    assert!(matches!(refused("").1, Problem::NoDraw));
    let (line, _, message) = refused(&with(1, r#"{"kind":"lost","entrant":"alice"}"#));
    assert!(line == 2 && message.contains("entrant must be 64 lowercase hex digits"), "{message}");
    let (line, _, message) = refused(&good.replacen(r#""seed":""#, r#""seed":"X"#, 1));
    assert!(line == 1 && message.contains("seed must be 64"), "{message}");
}

#[test]
fn an_honest_record_verifies() {
    let record = honest();
    let summary = verify(&record).unwrap();
    let count = |f: fn(&Outcome) -> bool| record.results.iter().filter(|(_, o)| f(o)).count();
    let won = count(|o| matches!(o, Outcome::Won { .. }));
    assert!((6..=12).contains(&won), "12 units to winners of 1 or 2: {won}");
    let expected = Summary { entries: 60, won, waitlisted: 5, lost: 60 - won - 5 };
    assert_eq!(summary, expected);
    assert_eq!(expected.to_string(), format!("60 entries, {won} won, 5 waitlisted, {} lost", 55 - won));
    assert_eq!(Summary { entries: 1_234_567, ..expected }.to_string().split(' ').next(), Some("1,234,567"));
}

/// The first winner and the first loser of `record`, by index in its results.
fn a_winner_and_a_loser(record: &Record) -> (usize, usize) {
    let find = |lost: bool| record.results.iter().position(|(_, o)| (*o == Outcome::Lost) == lost).unwrap();
    (find(false), find(true))
}

#[test]
fn verify_catches_a_changed_record() {
    let record = honest();
    let (winner, loser) = a_winner_and_a_loser(&record);

    let mut swapped = record.clone();
    let won = swapped.results[winner].1.clone();
    swapped.results[winner].1 = Outcome::Lost;
    swapped.results[loser].1 = won.clone();
    let differs =
        Mismatch::Differs { entrant: record.results[winner].0.clone(), announced: Outcome::Lost, expected: won };
    assert_eq!(verify(&swapped), Err(differs));

    let mut missing = record.clone();
    let (entrant, expected) = missing.results.remove(loser);
    assert_eq!(verify(&missing), Err(Mismatch::Missing { entrant, expected: expected.clone() }));

    let mut reseeded = record.clone();
    reseeded.seed = seed(2);
    assert!(matches!(verify(&reseeded), Err(Mismatch::Commitment { .. })));
    reseeded.commitment = crate::admission::commitment(&reseeded.seed);
    assert!(matches!(verify(&reseeded), Err(Mismatch::Differs { .. })), "another seed, another draw");

    let mut extra = record.clone();
    let announced = Outcome::Won { size: "42".to_owned(), quantity: 1 };
    extra.results.push((pseudonym("stranger"), announced.clone()));
    assert_eq!(verify(&extra), Err(Mismatch::NoEntry { entrant: pseudonym("stranger"), announced }));

    let mut twice = record.clone();
    twice.results.push((record.results[loser].0.clone(), record.results[winner].1.clone()));
    assert_eq!(verify(&twice), Err(Mismatch::Twice { entrant: record.results[loser].0.clone() }));

    let mut invalid = record.clone();
    invalid.entries[0].quantity = 3;
    assert!(
        matches!(verify(&invalid), Err(Mismatch::InvalidEntry { entrant, .. }) if entrant == record.entries[0].entrant)
    );
}

#[test]
fn a_record_with_no_entries_verifies_as_empty() {
    let terms = Terms { stock: BTreeMap::from([("42".to_owned(), 3)]), limit: 1, waitlist_places: 0 };
    let record = Record::draw(DropId::parse("quiet").unwrap(), &seed(9), terms, vec![]);
    assert_eq!(verify(&parse(&text(&record)).unwrap()), Ok(Summary::default()));
}
