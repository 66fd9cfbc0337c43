//! The storage types of kernel inputs and outputs. The float ones can be asked for on the
//! command line (`--dtype bf16`); the integer ones (quantized values, counts, indices) are
//! chosen by the days that need them and are not `--dtype` choices.

use std::fmt;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, Serialize, Deserialize)]
pub enum Dtype {
    F32,
    F16,
    Bf16,
    #[value(skip)]
    I8,
    #[value(skip)]
    U8,
    #[value(skip)]
    I32,
    #[value(skip)]
    U32,
}

impl Dtype {
    /// The name in tables, keys and kernel names: `f32`, `f16`, `bf16`.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
            Dtype::I8 => "i8",
            Dtype::U8 => "u8",
            Dtype::I32 => "i32",
            Dtype::U32 => "u32",
        }
    }

    pub fn size(self) -> usize {
        match self {
            Dtype::F32 | Dtype::I32 | Dtype::U32 => 4,
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::I8 | Dtype::U8 => 1,
        }
    }

    /// Whether values are integers, compared exactly.
    pub fn is_integer(self) -> bool {
        matches!(self, Dtype::I8 | Dtype::U8 | Dtype::I32 | Dtype::U32)
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
