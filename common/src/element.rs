//! The storage types kernels read and write, and what the checks need to know about them.

use std::any::Any;

use cudarc::driver::{CudaSlice, DeviceRepr, ValidAsZeroBits};
use half::{bf16, f16};

use crate::dtype::Dtype;

/// A storage type of kernel inputs and outputs (f32, f16, bf16; i8, u8, i32, u32).
///
/// Outputs are filled with [`Element::POISON`] before each run: a NaN with a payload no
/// arithmetic produces (the GPU's own NaN is `0x7fffffff` for f32), so the check can tell an
/// element the kernel never wrote from one it computed as NaN.
pub trait Element: DeviceRepr + ValidAsZeroBits + Copy + Send + Sync + 'static {
    /// The name used in tables and kernel names (`f32`, `f16`, `bf16`).
    const NAME: &'static str;
    const DTYPE: Dtype;
    const POISON: Self;
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
    fn is_poison(self) -> bool;
}

impl Element for f32 {
    const NAME: &'static str = "f32";
    const DTYPE: Dtype = Dtype::F32;
    const POISON: Self = f32::from_bits(0x7fc0_dead);
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn is_poison(self) -> bool {
        self.to_bits() == Self::POISON.to_bits()
    }
}

/// f16 and bf16 differ only in name and poison bits.
macro_rules! half_element {
    ($t:ty, $dtype:expr, $name:literal, $poison_bits:literal) => {
        impl Element for $t {
            const NAME: &'static str = $name;
            const DTYPE: Dtype = $dtype;
            const POISON: Self = <$t>::from_bits($poison_bits);
            fn to_f64(self) -> f64 {
                <$t>::to_f64(self)
            }
            fn from_f64(v: f64) -> Self {
                <$t>::from_f64(v)
            }
            fn is_poison(self) -> bool {
                self.to_bits() == Self::POISON.to_bits()
            }
        }
    };
}

half_element!(f16, Dtype::F16, "f16", 0x7e5d);
half_element!(bf16, Dtype::Bf16, "bf16", 0x7fd5);

/// Integers have no spare bit pattern like a NaN payload: the poison is a value chosen to be
/// unlikely as a result (the most negative `i8`, which a symmetric quantizer never writes;
/// `0xdeadbeef`-like patterns for 32-bit types), and a kernel that may write it legitimately
/// should be checked twice with different inputs. Exact values: `to_f64` is lossless for every
/// `i32`/`u32`.
macro_rules! integer_element {
    ($t:ty, $dtype:expr, $name:literal, $poison:expr) => {
        impl Element for $t {
            const NAME: &'static str = $name;
            const DTYPE: Dtype = $dtype;
            const POISON: Self = $poison;
            fn to_f64(self) -> f64 {
                self as f64
            }
            /// Rounds to nearest and saturates at the type's range (`as` on floats).
            fn from_f64(v: f64) -> Self {
                v.round() as $t
            }
            fn is_poison(self) -> bool {
                self == Self::POISON
            }
        }
    };
}

integer_element!(i8, Dtype::I8, "i8", i8::MIN);
integer_element!(u8, Dtype::U8, "u8", 0xa5);
integer_element!(i32, Dtype::I32, "i32", 0xdead_beef_u32 as i32);
integer_element!(u32, Dtype::U32, "u32", 0xdead_beef);

/// `slice` as a slice of `U`, when `T` is `U`: lets generic code call a launcher written for
/// one type (yesterday's f32 kernel) after checking the type.
pub fn as_type<T: Element, U: Element>(slice: &CudaSlice<T>) -> Option<&CudaSlice<U>> {
    (slice as &dyn Any).downcast_ref()
}

/// The mutable form of [`as_type`].
pub fn as_type_mut<T: Element, U: Element>(slice: &mut CudaSlice<T>) -> Option<&mut CudaSlice<U>> {
    (slice as &mut dyn Any).downcast_mut()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poison_is_a_nan_arithmetic_does_not_make<T: Element>(computed_nan: T) {
        assert!(T::POISON.to_f64().is_nan());
        assert!(T::POISON.is_poison());
        assert!(!computed_nan.is_poison());
        assert!(!T::from_f64(1.0).is_poison());
    }

    #[test]
    fn poison_values_are_distinct_nans() {
        poison_is_a_nan_arithmetic_does_not_make(f32::from_bits(0x7fff_ffff));
        poison_is_a_nan_arithmetic_does_not_make(f32::NAN);
        poison_is_a_nan_arithmetic_does_not_make(f16::NAN);
        poison_is_a_nan_arithmetic_does_not_make(bf16::NAN);
    }

    #[test]
    fn integers_round_trip_exactly_and_have_a_poison() {
        assert_eq!(i32::from_f64(i32::MAX.to_f64()), i32::MAX);
        assert_eq!(u32::from_f64(4_000_000_000.0), 4_000_000_000);
        assert_eq!(i8::from_f64(-2.5), -3);
        assert_eq!(i8::from_f64(300.0), 127);
        assert!(i8::POISON.is_poison() && !i8::from_f64(-127.0).is_poison());
        assert!(i32::POISON.is_poison() && u32::POISON.is_poison() && u8::POISON.is_poison());
    }
}
