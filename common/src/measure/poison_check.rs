//! Checking a kernel whose output may legitimately equal the poison.
//!
//! Integers have no spare bit pattern: uint8 quantization writes every value 0..=255,
//! the u8 poison (0xa5) included, and the check would call such an element "never
//! written". So it is checked twice: `Session` compares every element whose reference
//! is not the poison (the output was filled with the poison), and [`verify_poison_valued`]
//! runs the kernel again on an output filled with zeros and checks that the remaining
//! elements now hold the poison value. Each element is thus compared after a fill that
//! differs from its expected value.

use crate::element::Element;
use crate::gpu::Gpu;
use anyhow::{Result, bail};
use cudarc::driver::CudaSlice;

/// The reference split by whether it equals `T::POISON`.
pub struct PoisonSplit {
    /// Flat indices (and their reference values) the poisoned run can check.
    pub checked_at: Vec<usize>,
    pub checked_values: Vec<f64>,
    /// Flat indices whose reference is the poison value.
    pub poison_valued: Vec<usize>,
}

impl PoisonSplit {
    /// [`verify_poison_valued`] for these elements, failing (the message begins with `what`)
    /// when any of them was never written.
    pub fn require_written<T: Element>(
        &self,
        gpu: &Gpu,
        out: &mut CudaSlice<T>,
        launch: &mut impl FnMut(&mut CudaSlice<T>) -> Result<()>,
        what: &str,
    ) -> Result<()> {
        let unwritten = verify_poison_valued(gpu, out, &self.poison_valued, launch)?;
        if unwritten > 0 {
            bail!(
                "{what}: {unwritten} of the {} elements whose value is the poison were never \
                 written",
                self.poison_valued.len()
            );
        }
        Ok(())
    }
}

pub fn split<T: Element>(reference: &[f64]) -> PoisonSplit {
    let poison = T::POISON.to_f64();
    let mut split = PoisonSplit {
        checked_at: Vec::new(),
        checked_values: Vec::new(),
        poison_valued: Vec::new(),
    };
    for (i, &v) in reference.iter().enumerate() {
        if v == poison {
            split.poison_valued.push(i);
        } else {
            split.checked_at.push(i);
            split.checked_values.push(v);
        }
    }
    split
}

/// Fills `out` with zeros (not the poison), runs `launch`, and returns how many of the
/// `poison_valued` elements do not hold the poison value (0 when the kernel wrote them).
pub fn verify_poison_valued<T: Element>(
    gpu: &Gpu,
    out: &mut CudaSlice<T>,
    poison_valued: &[usize],
    launch: &mut impl FnMut(&mut CudaSlice<T>) -> Result<()>,
) -> Result<usize> {
    if poison_valued.is_empty() {
        return Ok(0);
    }
    assert!(!T::from_f64(0.0).is_poison(), "zero is this type's poison");
    gpu.stream.memset_zeros(out)?;
    launch(out)?;
    gpu.synchronize()?;
    let got = gpu.download(out)?;
    Ok(poison_valued
        .iter()
        .filter(|&&i| !got[i].is_poison())
        .count())
}
