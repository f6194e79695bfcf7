//! The named operators (`crate::operators`): where their roster is configured.

use std::path::PathBuf;

use secrecy::{ExposeSecret, SecretString};

use crate::operators::{Operators, parse_roster};

/// Named admin credentials (docs/operators.md).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct OperatorsConfig {
    /// A file of named operators, one `name role sha256hex` per line (`role`: viewer or operator;
    /// the hash: of the operator's token, as `seckill operator-token` prints it); `#` comments.
    #[arg(long, env = "SECKILL_OPERATORS_FILE", global = true)]
    pub operators_file: Option<PathBuf>,

    /// Named operators inline, as in the file, entries separated by `;` (both may be set: the
    /// roster is their union, each name once).
    #[arg(long, env = "SECKILL_OPERATORS", global = true)]
    pub operators: Option<String>,
}

impl OperatorsConfig {
    /// Every admin credential: the admin token (an unnamed operator) and the named operators;
    /// an error for an unreadable file or a bad entry.
    pub fn roster(&self, admin_token: Option<&SecretString>) -> Result<Operators, String> {
        let mut text = String::new();
        if let Some(path) = &self.operators_file {
            text = std::fs::read_to_string(path)
                .map_err(|e| format!("reading SECKILL_OPERATORS_FILE {}: {e}", path.display()))?;
        }
        let source = match (&self.operators_file, &self.operators) {
            (Some(path), Some(_)) => format!("SECKILL_OPERATORS_FILE {} then SECKILL_OPERATORS", path.display()),
            (Some(path), None) => format!("SECKILL_OPERATORS_FILE {}", path.display()),
            _ => "SECKILL_OPERATORS".to_owned(),
        };
        if let Some(inline) = &self.operators {
            text.push('\n');
            text.push_str(inline);
        }
        let named = parse_roster(&text, &source)?;
        Operators::new(admin_token.map(|t| t.expose_secret()), named)
    }
}
