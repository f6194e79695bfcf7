//! Settings the commands share on their command lines: which build of seckill runs
//! (`--profile`), and an app setting `NAME=VALUE`.

/// The build of the seckill binary that runs (`--profile`).
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Profile {
    Release,
    /// The debug build `cargo test` makes: far slower, for smoke runs of the tooling only.
    Debug,
}

impl From<Profile> for testbed::Profile {
    fn from(p: Profile) -> Self {
        match p {
            Profile::Release => testbed::Profile::Release,
            Profile::Debug => testbed::Profile::Debug,
        }
    }
}

/// `NAME=VALUE` of `--a-env` / `--b-env` (and of shard-ceiling's `--app-env`).
pub fn setting(text: &str) -> Result<(String, String), String> {
    let (name, value) = text.split_once('=').ok_or_else(|| format!("{text}: want NAME=VALUE"))?;
    Ok((name.to_string(), value.to_string()))
}
