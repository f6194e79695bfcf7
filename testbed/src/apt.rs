//! `apt-get install` of Debian packages with service auto-start blocked: while it runs, a
//! temporary `/usr/sbin/policy-rc.d` (only if the machine has none) tells the packages' scripts
//! not to start the distro's own Redis or Postgres.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::process::wait_bounded;

const POLICY: &str = "/usr/sbin/policy-rc.d";
/// Marks the policy-rc.d we create, so a stale one of an interrupted run is recognised.
const MARKER: &str = "# seckill testbed: temporary, blocks service auto-start during apt-get install";

/// `apt-get install -y --no-install-recommends PACKAGES` (as root), retried once after an
/// `apt-get update`; each apt-get is bounded (15 min install, 10 min update).
pub fn install(packages: &[&str]) -> Result<()> {
    let _policy = BlockServiceStart::new()?;
    if apt_get(&["install", "-y", "--no-install-recommends"], packages, 900).is_ok() {
        return Ok(());
    }
    eprintln!("testbed: apt-get install failed; running apt-get update and retrying");
    let _ = apt_get(&["update"], &[], 600);
    apt_get(&["install", "-y", "--no-install-recommends"], packages, 900)
}

fn apt_get(args: &[&str], packages: &[&str], limit_secs: u64) -> Result<()> {
    let mut child = Command::new("apt-get")
        .args(args)
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .spawn()
        .context("running apt-get")?;
    match wait_bounded(&mut child, Duration::from_secs(limit_secs))? {
        Some(status) if status.success() => Ok(()),
        Some(status) => bail!("apt-get {} {}: {status}", args.join(" "), packages.join(" ")),
        None => bail!("apt-get {} took more than {limit_secs} s", args.join(" ")),
    }
}

/// The temporary policy-rc.d, removed on drop (only if we created it).
struct BlockServiceStart {
    created: bool,
}

impl BlockServiceStart {
    fn new() -> Result<Self> {
        let policy = Path::new(POLICY);
        if std::fs::read_to_string(policy).is_ok_and(|text| text.contains(MARKER)) {
            std::fs::remove_file(policy)?; // a stale one of ours from an interrupted run
        }
        if policy.exists() {
            return Ok(Self { created: false });
        }
        std::fs::write(policy, format!("#!/bin/sh\n{MARKER}\nexit 101\n"))
            .and_then(|()| std::fs::set_permissions(policy, std::fs::Permissions::from_mode(0o755)))
            .with_context(|| format!("writing {POLICY}"))?;
        Ok(Self { created: true })
    }
}

impl Drop for BlockServiceStart {
    fn drop(&mut self) {
        if self.created {
            let _ = std::fs::remove_file(POLICY);
        }
    }
}
