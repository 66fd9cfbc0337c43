//! Figures of the libraries people use instead (PyTorch, cuBLAS, ...), measured by the scripts
//! in `peers/` on the same GPU in the same run, and matched to our problems by key
//! (`softmax/f32/32768x4096`).

use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// One peer's time on one problem.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PeerFigure {
    /// The problem, as our reports name it: `softmax/f32/32768x4096`.
    pub key: String,
    /// Who: `torch.softmax`.
    pub peer: String,
    pub median_ms: f64,
    pub gb_per_s: f64,
}

/// What a peers script writes.
#[derive(Debug, Deserialize)]
struct PeersFile {
    figures: Vec<PeerFigure>,
}

/// Reads a peers file.
pub fn load(path: &Path) -> Result<Vec<PeerFigure>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let file: PeersFile = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a peers results file", path.display()))?;
    Ok(file.figures)
}

/// The figures for one problem.
pub fn for_key(figures: &[PeerFigure], key: &str) -> Vec<PeerFigure> {
    figures.iter().filter(|f| f.key == key).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_peers_file_and_matches_by_key() {
        let dir = std::env::temp_dir().join(format!("peers-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("peers.json");
        std::fs::write(
            &path,
            r#"{"torch": "2.11", "figures": [
                {"key": "softmax/f32/8x8", "peer": "torch.softmax", "median_ms": 0.5, "gb_per_s": 1.0},
                {"key": "softmax/f16/8x8", "peer": "torch.softmax", "median_ms": 0.4, "gb_per_s": 0.6}]}"#,
        )
        .unwrap();
        let figures = load(&path).unwrap();
        let matched = for_key(&figures, "softmax/f32/8x8");
        assert_eq!(matched.len(), 1);
        assert_eq!(matched[0].median_ms, 0.5);
        assert!(for_key(&figures, "softmax/f32/9x9").is_empty());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
