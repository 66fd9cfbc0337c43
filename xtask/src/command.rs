//! Running the tools xtask drives (cargo, git) and reading what they print.

use std::process::Command;

use anyhow::{Context, Result, bail};

/// The standard output of `command`, or an error naming `what` with its standard error when it
/// cannot start or exits non-zero.
pub fn stdout_of(command: &mut Command, what: &str) -> Result<Vec<u8>> {
    let output = command
        .output()
        .with_context(|| format!("running {what}"))?;
    if !output.status.success() {
        bail!(
            "{what} failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(output.stdout)
}
