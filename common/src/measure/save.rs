//! `--save DIR`: arrays as `.npy`, so any run can be checked against NumPy or PyTorch:
//! `np.load("DIR/out_naive.npy")`. Half-precision data is widened to f32 (exactly); so are
//! integers, exactly up to 2^24 in magnitude.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use anyhow::{Context, Result};
use npyz::WriterBuilder;

use crate::element::Element;

/// Writes `data` (row-major in `shape`) to `dir/name.npy` as f32.
pub fn save_elements<T: Element>(
    dir: &Path,
    name: &str,
    shape: &[usize],
    data: &[T],
) -> Result<()> {
    write_npy(dir, name, shape, data.iter().map(|v| v.to_f64() as f32))
}

/// Writes f64 data (the references) to `dir/name.npy`.
pub fn save_f64(dir: &Path, name: &str, shape: &[usize], data: &[f64]) -> Result<()> {
    write_npy(dir, name, shape, data.iter().copied())
}

fn write_npy<T: npyz::AutoSerialize>(
    dir: &Path,
    name: &str,
    shape: &[usize],
    data: impl Iterator<Item = T>,
) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("{name}.npy"));
    let file = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    let mut writer = npyz::WriteOptions::new()
        .default_dtype()
        .shape(&shape)
        .writer(BufWriter::new(file))
        .begin_nd()?;
    writer.extend(data)?;
    writer.finish()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_2d_array_numpy_can_read() {
        let dir = std::env::temp_dir().join(format!("common-save-test-{}", std::process::id()));
        save_elements(&dir, "x", &[2, 3], &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        let bytes = std::fs::read(dir.join("x.npy")).unwrap();
        let npy = npyz::NpyFile::new(&bytes[..]).unwrap();
        assert_eq!(npy.shape(), &[2, 3]);
        let values: Vec<f32> = npy.into_vec().unwrap();
        assert_eq!(values, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
