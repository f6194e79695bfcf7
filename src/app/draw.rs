//! `seckill draw verify`: reads a drop's published draw and checks it (`crate::draw::verify`).

use std::io::BufReader;
use std::path::Path;
use std::process::ExitCode;

use crate::draw::record::{self, Problem};
use crate::draw::verify;

/// Exit status when the record does not verify (or is malformed).
const EXIT_MISMATCH: u8 = 1;
/// Exit status when the record could not be read.
const EXIT_UNREADABLE: u8 = 3;

/// The `seckill draw verify` command: reads the record at `path` (`-`: stdin), verifies it, prints
/// `verified: …; commitment ok` and exits 0, or prints why not and exits 1 (3: not readable).
pub fn verify_draw(path: &Path) -> ExitCode {
    let parsed = if path.as_os_str() == "-" {
        record::read(std::io::stdin().lock())
    } else {
        match std::fs::File::open(path) {
            Ok(file) => record::read(BufReader::new(file)),
            Err(err) => {
                eprintln!("seckill draw verify: {}: {err}", path.display());
                return ExitCode::from(EXIT_UNREADABLE);
            }
        }
    };
    let record = match parsed {
        Ok(record) => record,
        Err(err) => {
            eprintln!("seckill draw verify: {}: {err}", path.display());
            let unreadable = matches!(err.problem, Problem::Io(_));
            return ExitCode::from(if unreadable { EXIT_UNREADABLE } else { EXIT_MISMATCH });
        }
    };
    match verify(&record) {
        Ok(summary) => {
            println!("verified: {summary}; commitment ok");
            ExitCode::SUCCESS
        }
        Err(mismatch) => {
            println!("does not verify: {mismatch}");
            ExitCode::from(EXIT_MISMATCH)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::process::ExitCode;

    use super::verify_draw;
    use crate::domain::DropId;
    use crate::draw::allocate::{Entry, Outcome, Terms};
    use crate::draw::record::{Record, write};

    #[test]
    fn verify_exits_0_for_an_honest_record_1_for_a_changed_or_malformed_one_3_for_no_file() {
        let terms = Terms { stock: BTreeMap::from([("42".to_owned(), 1)]), limit: 1, waitlist_places: 0 };
        let entries = ["a", "b"].map(|c| Entry { entrant: c.repeat(64), sizes: vec!["42".to_owned()], quantity: 1 });
        let seed = "5".repeat(64);
        let honest = Record::draw(DropId::parse("sneaker").unwrap(), &seed, terms, entries.to_vec());
        let mut changed = honest.clone();
        for (_, outcome) in &mut changed.results {
            *outcome =
                if *outcome == Outcome::Lost { Outcome::Won { size: "42".into(), quantity: 1 } } else { Outcome::Lost };
        }
        let dir = std::env::temp_dir().join(format!("seckill-draw-verify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str, record: &Record| {
            let path = dir.join(name);
            write(record, std::fs::File::create(&path).unwrap()).unwrap();
            path
        };
        let (honest, changed) = (file("honest.ndjson", &honest), file("changed.ndjson", &changed));
        let malformed = dir.join("malformed.ndjson");
        std::fs::write(&malformed, "{\"kind\":\"lost\"}\n").unwrap();
        let codes = [&honest, &changed, &malformed, &dir.join("absent.ndjson")].map(|path| verify_draw(path));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(codes, [ExitCode::SUCCESS, ExitCode::from(1), ExitCode::from(1), ExitCode::from(3)]);
    }
}
