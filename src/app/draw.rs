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
