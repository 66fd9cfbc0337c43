//! The numbers a kernel file and its launcher share, written once. A day whose host code knows
//! a kernel's layout (its tile, its threads, its shared memory, its TMA boxes) keeps them in one
//! Rust table; the launcher takes its block, shared memory and boxes from it, the kernel gets
//! the same numbers as NVRTC defines ([`Defines`]) and `static_assert`s that its own layout
//! takes exactly the shared memory the launcher gives and that the tile fits an SM.
//! [`Violations`] is the host-side list of those checks, so a tile that cannot fit is named in a
//! unit test, with no GPU and no compiler. [`SharedLayout`] adds up a block's shared memory in
//! the order the kernel lays it out, alignment included.
//!
//! A kernel file compiled without its defines stops at an `#error`: a number the host did not
//! send is never silently the kernel's own.

use std::fmt::Display;

/// Dynamic shared memory a block may opt into on sm_90: 227 KiB.
pub const SM90_MAX_SHARED_BYTES: usize = 227 * 1024;

/// 32-bit registers of one SM, which the producer and the consumers of the one resident block
/// share.
pub const SM90_REGISTERS: usize = 64 * 1024;

/// The fewest registers `setmaxnreg` leaves a thread: a producer warpgroup, whose threads only
/// issue TMA copies and wait on barriers, gives back everything above it.
pub const SETMAXNREG_MIN: usize = 24;

/// Registers a thread of a one-block-per-SM kernel of `threads` threads is launched with: the
/// SM's 64 K shared out in multiples of 8, at most 255 (`__launch_bounds__(threads, 1)`).
pub fn launch_registers(threads: usize) -> usize {
    (SM90_REGISTERS / threads / 8 * 8).min(255)
}

/// Elements of one TMA box row of a 16-bit type: 64 values, one 128-byte swizzle row.
pub const BOX_ELEMS: usize = 64;

/// Threads of a warpgroup, the unit `setmaxnreg` and `wgmma` work on.
pub const WARPGROUP_THREADS: usize = 128;

/// The reasons one tile cannot compile or run on an H100, one line each, each starting with
/// the tile's label (`head dim 96: ...`, `gemm 128x256: ...`).
#[derive(Debug, Default)]
pub struct Violations {
    label: String,
    why: Vec<String>,
}

impl Violations {
    pub fn new(label: impl Display) -> Self {
        Violations {
            label: label.to_string(),
            why: Vec::new(),
        }
    }

    /// Records `what` unless `holds`.
    pub fn require(&mut self, holds: bool, what: impl FnOnce() -> String) {
        if !holds {
            self.why.push(format!("{}: {}", self.label, what()));
        }
    }

    /// `elems` (named `what`) is a whole number of 16-bit TMA box rows.
    pub fn whole_boxes(&mut self, what: &str, elems: usize) {
        self.require(elems > 0 && elems.is_multiple_of(BOX_ELEMS), || {
            format!("the {what} must be a whole number of {BOX_ELEMS}-element TMA boxes")
        });
    }

    /// `setmaxnreg` takes both counts, and a producer warpgroup of `producer` registers a
    /// thread and `consumers` warpgroups of `registers` fit the pool the block is launched
    /// with ([`launch_registers`] a thread): `setmaxnreg.inc` waits until the block's own pool
    /// has what it asks for, so a budget over the pool hangs the kernel rather than failing.
    pub fn registers(&mut self, producer: usize, consumers: usize, registers: usize) {
        for count in [producer, registers] {
            self.require(
                count.is_multiple_of(8) && (SETMAXNREG_MIN..=256).contains(&count),
                || format!("setmaxnreg takes a multiple of 8 in 24..=256, not {count}"),
            );
        }
        let threads = WARPGROUP_THREADS * (1 + consumers);
        let pool = launch_registers(threads) * threads;
        let total = WARPGROUP_THREADS * (producer + consumers * registers);
        self.require(total <= pool, || {
            format!("{total} registers, over the {pool} the block is launched with")
        });
    }

    /// The block's dynamic shared memory fits sm_90's opt-in limit.
    pub fn shared_bytes(&mut self, bytes: usize) {
        self.require(bytes <= SM90_MAX_SHARED_BYTES, || {
            format!("{bytes} bytes of shared memory, over sm_90's {SM90_MAX_SHARED_BYTES}")
        });
    }

    pub fn into_lines(self) -> Vec<String> {
        self.why
    }
}

/// NVRTC defines under one prefix, `-D{prefix}_{NAME}=value`: a whole file's (`GEMM_WG`) or
/// one tile's among several (`FH_D128`, [`Defines::tile`]); the kernel file builds its
/// constants from exactly these names.
pub struct Defines {
    prefix: String,
    defines: Vec<String>,
}

impl Defines {
    pub fn new(prefix: impl Display) -> Self {
        Defines {
            prefix: prefix.to_string(),
            defines: Vec::new(),
        }
    }

    /// One tile's defines among a file's several, keyed by the head dim or size it serves:
    /// `-D{prefix}_D{key}_{NAME}=value`.
    pub fn tile(prefix: &str, key: usize) -> Self {
        Defines::new(format!("{prefix}_D{key}"))
    }

    pub fn set(mut self, name: &str, value: usize) -> Self {
        self.defines
            .push(format!("-D{}_{name}={value}", self.prefix));
        self
    }

    pub fn into_vec(self) -> Vec<String> {
        self.defines
    }
}

/// A define shared by every tile of a file: `-D{prefix}_{NAME}=value`.
pub fn file_define(prefix: &str, name: &str, value: usize) -> String {
    format!("-D{prefix}_{name}={value}")
}

/// A block's dynamic shared memory, added up region by region in the order the kernel lays it
/// out, each region starting at the alignment it needs: the host's figure and the kernel's
/// `static_assert` then come from the same walk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SharedLayout {
    bytes: usize,
}

impl SharedLayout {
    pub const fn new() -> Self {
        SharedLayout { bytes: 0 }
    }

    /// Adds a region of `bytes`.
    pub const fn region(self, bytes: usize) -> Self {
        SharedLayout {
            bytes: self.bytes + bytes,
        }
    }

    /// Pads to the next multiple of `align` (a power of two): a swizzled TMA tile starts on
    /// 1024 bytes, an mbarrier on 8.
    pub const fn align(self, align: usize) -> Self {
        SharedLayout {
            bytes: self.bytes.next_multiple_of(align),
        }
    }

    pub const fn bytes(self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn violations_name_the_tile_and_what_failed() {
        let mut v = Violations::new("head dim 96");
        v.whole_boxes("head dim", 96);
        v.registers(24, 3, 240);
        v.registers(24, 2, 164);
        v.shared_bytes(SM90_MAX_SHARED_BYTES + 1);
        let lines = v.into_lines();
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert!(lines.iter().all(|l| l.starts_with("head dim 96: ")));
        assert!(lines[0].contains("TMA boxes"));
        assert!(lines[1].contains("registers, over the 65536"));
        assert!(lines[2].contains("setmaxnreg"));
        assert!(lines[3].contains("shared memory"));

        let mut fits = Violations::new("head dim 128");
        fits.whole_boxes("head dim", 128);
        fits.registers(24, 2, 240);
        fits.shared_bytes(SM90_MAX_SHARED_BYTES);
        assert!(fits.into_lines().is_empty());
    }

    #[test]
    fn the_launch_pool_is_what_setmaxnreg_redistributes() {
        assert_eq!(launch_registers(384), 168);
        assert_eq!(launch_registers(512), 128);
        assert_eq!(launch_registers(128), 255);
        // Two consumers of 240: the producer keeps 24 (3072 + 61440 = 168 x 384), not 32.
        let mut fits = Violations::new("t");
        fits.registers(24, 2, 240);
        assert!(fits.into_lines().is_empty());
        let mut over = Violations::new("t");
        over.registers(32, 2, 240);
        assert_eq!(over.into_lines().len(), 1);
    }

    #[test]
    fn defines_carry_the_prefix_and_key() {
        let d = Defines::tile("XY", 64).set("KEYS", 128).into_vec();
        assert_eq!(d, ["-DXY_D64_KEYS=128"]);
        let d = Defines::new("GEMM_WG").set("BM", 128).into_vec();
        assert_eq!(d, ["-DGEMM_WG_BM=128"]);
        assert_eq!(file_define("XY", "THREADS", 384), "-DXY_THREADS=384");
    }

    #[test]
    fn shared_layout_pads_each_region_to_its_alignment() {
        let layout = SharedLayout::new()
            .region(100)
            .align(8)
            .region(16)
            .align(1024);
        assert_eq!(layout.bytes(), 1024);
        assert_eq!(SharedLayout::new().region(8).align(8).region(3).bytes(), 11);
    }
}
