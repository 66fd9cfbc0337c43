//! What the attention days' launchers share: the storage types their kernels are named for
//! (and the `--dtype` check before any GPU work), and why `fa_hopper` (forward or backward) refuses a problem.

use anyhow::{Result, bail};

use crate::UsageError;
use crate::dtype::Dtype;
use crate::element::Element;
use crate::error::Refused;
use crate::gpu::Gpu;
use crate::gpu::kernel::KernelSet;
use crate::gpu::kernel_build::KernelBuild;

/// The storage types of attention, as the kernels' names spell them: `bf16` and `f16`.
pub fn dtype_name<T: Element>() -> Result<&'static str> {
    match T::DTYPE {
        Dtype::Bf16 | Dtype::F16 => Ok(T::NAME),
        other => bail!(UsageError::new(format!(
            "attention runs on bf16 or f16 inputs, not {other}"
        ))),
    }
}

/// Refuses a storage type that is not an attention dtype, before any GPU work.
pub fn check_dtype(dtype: Dtype) -> Result<(), UsageError> {
    match dtype {
        Dtype::Bf16 | Dtype::F16 => Ok(()),
        other => Err(UsageError::new(format!(
            "--dtype {other}: attention runs on bf16 or f16 inputs"
        ))),
    }
}

/// `fa_hopper`'s kernels (`build`, day 10's forward or day 20's backward, is for sm_90a),
/// loaded on a Hopper GPU; `None` on any other, where [`hopper_refusal`] says why the version
/// cannot run.
pub fn load_hopper(gpu: &Gpu, build: &KernelBuild) -> Result<Option<KernelSet>> {
    match build.arch_on(&gpu.info.arch) {
        Some(_) => Ok(Some(KernelSet::load_build(gpu, build)?)),
        None => Ok(None),
    }
}

/// Why `fa_hopper`, day 10's forward or day 20's backward, cannot run head dim `d`: its module
/// is not loaded (`hopper_loaded` false: not a Hopper GPU) or it is not compiled for `d` (its
/// tiles' head dims are `dims`).
pub fn hopper_refusal(hopper_loaded: bool, d: usize, dims: &[usize]) -> Option<Refused> {
    if !hopper_loaded {
        return Some(Refused(
            "fa_hopper: needs sm_90a (wgmma, TMA), a Hopper GPU; fa2_mma is this GPU's fastest \
             version"
                .into(),
        ));
    }
    (!dims.contains(&d)).then(|| {
        Refused(format!(
            "fa_hopper: compiled for head dims {dims:?}, not {d}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    #[test]
    fn only_the_16_bit_types_are_attention_types() {
        assert_eq!(dtype_name::<bf16>().unwrap(), "bf16");
        assert_eq!(dtype_name::<half::f16>().unwrap(), "f16");
        assert!(dtype_name::<f32>().is_err());
        assert!(check_dtype(Dtype::Bf16).is_ok() && check_dtype(Dtype::F16).is_ok());
        assert!(check_dtype(Dtype::F32).is_err());
    }

    #[test]
    fn fa_hopper_refuses_off_hopper_and_off_its_tiles() {
        let dims = [64, 128, 256];
        assert!(hopper_refusal(true, 256, &dims).is_none());
        assert!(
            hopper_refusal(false, 256, &dims)
                .unwrap()
                .0
                .contains("sm_90a")
        );
        assert!(
            hopper_refusal(true, 96, &dims)
                .unwrap()
                .0
                .contains("not 96")
        );
    }
}
