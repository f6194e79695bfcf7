//! The app's Lua scripts as files: `lua/<name>` from the working tree or a git revision, and
//! assembled with the pieces they name (`-- @<piece>` lines) as the app assembles them.

use std::process::Command;

use anyhow::{Context, ensure};

/// A revision's `lua/<name>` (the working tree's for `None`).
pub fn lua_file(rev: Option<&str>, name: &str) -> anyhow::Result<String> {
    let root = testbed::workspace_root();
    let Some(rev) = rev else {
        return std::fs::read_to_string(root.join("lua").join(name)).with_context(|| format!("reading lua/{name}"));
    };
    let out = Command::new("git").arg("-C").arg(&root).args(["show", &format!("{rev}:lua/{name}")]).output()?;
    ensure!(out.status.success(), "git show {rev}:lua/{name}: {}", String::from_utf8_lossy(&out.stderr).trim());
    Ok(String::from_utf8(out.stdout)?)
}

/// The working tree's `lua/<name>` with each piece `lua/<piece>.lua` after its `-- @<piece>`
/// line, as the app assembles it (a script without a `-- @limiter` line): what `SCRIPT LOAD` takes.
pub fn assembled(name: &str) -> anyhow::Result<String> {
    let mut script = String::new();
    splice(None, &lua_file(None, name)?, "", &mut script)?;
    Ok(script)
}

/// `text`'s lines into `script`, each marker line followed by what it names.
pub fn splice(rev: Option<&str>, text: &str, limiter: &str, script: &mut String) -> anyhow::Result<()> {
    for line in text.lines() {
        script.push_str(line);
        script.push('\n');
        match line.strip_prefix("-- @") {
            Some("limiter") => splice(rev, limiter, "", script)?,
            Some(name) => splice(rev, &lua_file(rev, &format!("{name}.lua"))?, limiter, script)?,
            None => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use seckill::redis::lua::{self, limiters};

    /// `SCRIPT LOAD` of what [`super::assembled`] gives loads the app's own script: the same SHA.
    #[test]
    fn an_assembled_script_is_the_one_the_app_runs() {
        let hash = |file: &str| redis::Script::new(&super::assembled(file).unwrap()).get_hash().to_owned();
        assert_eq!(hash("buy.lua"), lua::BUY.get_hash());
        let sources = [
            ("sliding_log.lua", limiters::SLIDING_LOG),
            ("sliding_counter.lua", limiters::SLIDING_COUNTER),
            ("fixed_window.lua", limiters::FIXED_WINDOW),
            ("token_bucket.lua", limiters::TOKEN_BUCKET),
            ("gcra.lua", limiters::GCRA),
        ];
        for (file, source) in sources {
            assert_eq!(hash(file), lua::limiter(source).get_hash(), "{file}");
        }
    }
}
