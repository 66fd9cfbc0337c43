//! Paths as the repository's links spell them, resolved without touching the disk.

use std::path::{Path, PathBuf};

/// `dir/link` with `.` and `..` resolved by name alone (no symbolic links followed, nothing
/// read from disk); `None` when the link climbs out of the root `dir` is relative to.
pub fn lexical_join(dir: &Path, link: &str) -> Option<PathBuf> {
    let mut parts: Vec<String> = dir
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    for part in link.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            name => parts.push(name.to_owned()),
        }
    }
    Some(parts.iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dots_resolve_by_name_and_the_root_is_a_floor() {
        let dir = Path::new("day05/src");
        assert_eq!(
            lexical_join(dir, "../README.md#x"),
            Some(PathBuf::from("day05/README.md#x"))
        );
        assert_eq!(
            lexical_join(dir, "./a//b.rs"),
            Some(PathBuf::from("day05/src/a/b.rs"))
        );
        assert_eq!(lexical_join(dir, "../../../x"), None);
    }
}
