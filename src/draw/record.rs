//! A draw's published record, newline-delimited JSON (what `GET /drops/{drop}/draw` is to serve
//! once the seed is revealed, and `seckill draw verify` reads):
//!
//! ```text
//! {"kind":"draw","drop":"sneaker","commitment":"<hex>","seed":"<hex>","stock":{"42":2},"limit":2,"waitlist_places":1}
//! {"kind":"entry","entrant":"<64 hex>","sizes":["42","43"],"quantity":1}      one per entry, any order
//! {"kind":"won","entrant":"<64 hex>","size":"42","quantity":1}                one result per entrant,
//! {"kind":"waitlisted","entrant":"<64 hex>","position":3}                     any order (written in
//! {"kind":"lost","entrant":"<64 hex>"}                                        rank order)
//! ```
//!
//! The draw line comes first; fields a reader does not know are ignored.

use std::collections::{BTreeMap, HashSet};
use std::io::{self, BufRead, Read, Write};

use serde::{Deserialize, Serialize};

use super::allocate::{Entry, Outcome, Terms, allocate};
use super::rank::ranking;
use crate::admission::commitment;
use crate::domain::DropId;

/// The longest line a reader takes, in bytes (a line of 64 sizes is some 1 KiB).
pub const MAX_LINE: usize = 64 * 1024;

/// A draw as published: its terms, its seed and commitment, the entries and the announced results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The drop drawn.
    pub drop: DropId,
    /// SHA-256 of the seed's hex, published before entries opened.
    pub commitment: String,
    /// The seed, 64 hex digits, revealed after the draw.
    pub seed: String,
    /// Stock per size, limit, waitlist places.
    pub terms: Terms,
    /// Every entry, in any order.
    pub entries: Vec<Entry>,
    /// The announced outcome of each entrant.
    pub results: Vec<(String, Outcome)>,
}

impl Record {
    /// Runs the draw of `entries` with `seed` (64 hex digits) under `terms`: the record to publish,
    /// its results in rank order.
    pub fn draw(drop: DropId, seed: &str, terms: Terms, entries: Vec<Entry>) -> Self {
        let allocation = allocate(&terms, &ranking(seed, entries.clone()));
        Self { drop, commitment: commitment(seed), seed: seed.to_owned(), terms, entries, results: allocation.results }
    }
}

/// One line of a record.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Line {
    Draw {
        drop: String,
        commitment: String,
        seed: String,
        stock: BTreeMap<String, u32>,
        limit: u32,
        waitlist_places: u32,
    },
    Entry(Entry),
    Won {
        entrant: String,
        size: String,
        quantity: u32,
    },
    Waitlisted {
        entrant: String,
        position: u32,
    },
    Lost {
        entrant: String,
    },
}

/// Writes `record` as NDJSON: the draw line, the entries, the results.
pub fn write(record: &Record, mut out: impl Write) -> io::Result<()> {
    let (drop, commitment, seed) = (&record.drop, record.commitment.as_str(), record.seed.as_str());
    write_head(drop, (commitment, seed), &record.terms, &mut out)?;
    for entry in &record.entries {
        write_entry(entry, &mut out)?;
    }
    for (entrant, outcome) in &record.results {
        write_result(entrant, outcome, &mut out)?;
    }
    out.flush()
}

/// Writes a record's draw line (its first), for a writer that goes a page at a time.
pub fn write_head(drop: &DropId, (commitment, seed): (&str, &str), terms: &Terms, out: impl Write) -> io::Result<()> {
    let Terms { stock, limit, waitlist_places } = terms.clone();
    let (drop, commitment, seed) = (drop.to_string(), commitment.to_owned(), seed.to_owned());
    line(&Line::Draw { drop, commitment, seed, stock, limit, waitlist_places }, out)
}

/// Writes a record's line of one entry.
pub fn write_entry(entry: &Entry, out: impl Write) -> io::Result<()> {
    line(&Line::Entry(entry.clone()), out)
}

/// Writes a record's line of one result.
pub fn write_result(entrant: &str, outcome: &Outcome, out: impl Write) -> io::Result<()> {
    let entrant = entrant.to_owned();
    let result = match outcome.clone() {
        Outcome::Won { size, quantity } => Line::Won { entrant, size, quantity },
        Outcome::Waitlisted { position } => Line::Waitlisted { entrant, position },
        Outcome::Lost => Line::Lost { entrant },
    };
    line(&result, out)
}

fn line(line: &Line, mut out: impl Write) -> io::Result<()> {
    serde_json::to_writer(&mut out, line)?;
    out.write_all(b"\n")
}

/// Why a record could not be read, and on which line (1 first).
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {problem}")]
pub struct ParseError {
    /// The line, counted from 1.
    pub line: usize,
    /// What is wrong with it.
    pub problem: Problem,
}

/// What is wrong with a record's line.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    #[error("cannot read: {0}")]
    Io(#[from] io::Error),
    #[error("longer than {MAX_LINE} bytes")]
    TooLong,
    #[error("not a record line (column {column}): {message}")]
    Json { column: usize, message: String },
    #[error("the record must open with its draw line ({{\"kind\":\"draw\",…}})")]
    NoDraw,
    #[error("a second draw line")]
    SecondDraw,
    #[error("{0}")]
    Field(String),
    #[error("entrant {0} entered twice")]
    DuplicateEntry(String),
    #[error("entrant {0} has a second result")]
    DuplicateResult(String),
}

/// Reads a record from `input`, a line at a time (no line over [`MAX_LINE`]; blank lines skipped).
pub fn read(mut input: impl BufRead) -> Result<Record, ParseError> {
    let (mut buf, mut number, mut record) = (Vec::new(), 0, None::<Record>);
    let (mut entered, mut announced) = (HashSet::new(), HashSet::new());
    loop {
        number += 1;
        buf.clear();
        let at = |problem: Problem| ParseError { line: number, problem };
        let read = (&mut input).take(MAX_LINE as u64 + 1).read_until(b'\n', &mut buf).map_err(|e| at(e.into()))?;
        if read == 0 {
            break;
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
        }
        if buf.len() > MAX_LINE {
            return Err(at(Problem::TooLong));
        }
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let line: Line = serde_json::from_slice(&buf).map_err(|e| at(json(&e)))?;
        let Some(record) = record.as_mut() else {
            record = Some(head(line).map_err(at)?);
            continue;
        };
        let entrant = match line {
            Line::Draw { .. } => return Err(at(Problem::SecondDraw)),
            Line::Entry(entry) => {
                hex64("entrant", &entry.entrant).map_err(at)?;
                if !entered.insert(entry.entrant.clone()) {
                    return Err(at(Problem::DuplicateEntry(entry.entrant)));
                }
                record.entries.push(entry);
                continue;
            }
            Line::Won { entrant, size, quantity } => (entrant, Outcome::Won { size, quantity }),
            Line::Waitlisted { entrant, position } => (entrant, Outcome::Waitlisted { position }),
            Line::Lost { entrant } => (entrant, Outcome::Lost),
        };
        hex64("entrant", &entrant.0).map_err(at)?;
        if !announced.insert(entrant.0.clone()) {
            return Err(at(Problem::DuplicateResult(entrant.0)));
        }
        record.results.push(entrant);
    }
    record.ok_or(ParseError { line: 1, problem: Problem::NoDraw })
}

/// A JSON error of one line, without serde's own position (always line 1 of the slice).
fn json(err: &serde_json::Error) -> Problem {
    let text = err.to_string();
    let at = format!(" at line {} column {}", err.line(), err.column());
    Problem::Json { column: err.column(), message: text.strip_suffix(&at).unwrap_or(&text).to_owned() }
}

/// The record begun by its first line, which must be the draw's.
fn head(line: Line) -> Result<Record, Problem> {
    let Line::Draw { drop, commitment, seed, stock, limit, waitlist_places } = line else {
        return Err(Problem::NoDraw);
    };
    let drop = DropId::parse(&drop).map_err(Problem::Field)?;
    hex64("seed", &seed)?;
    hex64("commitment", &commitment)?;
    let terms = Terms { stock, limit, waitlist_places };
    Ok(Record { drop, commitment, seed, terms, entries: vec![], results: vec![] })
}

/// `value` is 64 lowercase hex digits, or the problem naming `field`.
fn hex64(field: &str, value: &str) -> Result<(), Problem> {
    let hex = value.len() == 64 && value.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if hex { Ok(()) } else { Err(Problem::Field(format!("{field} must be 64 lowercase hex digits, not {value:?}"))) }
}
