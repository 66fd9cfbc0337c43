//! What a warp-specialised Hopper kernel's tile must respect, for the days that describe
//! their tiles in one Rust table (day 10's forward, day 20's backward). Each such day keeps a
//! table of tiles per head dim; the launcher takes its block, shared memory and TMA boxes from
//! it, the kernel gets the same numbers as NVRTC defines ([`TileDefines`]) and
//! `static_assert`s that its own layout takes exactly the shared memory the launcher gives and
//! that the tile fits an SM. [`Violations`] is the host-side list of those checks, so a tile
//! that cannot fit is named in a unit test, with no GPU and no compiler.

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

/// Head-dim elements of one TMA box: 64 16-bit values, one 128-byte swizzle row.
pub const BOX_ELEMS: usize = 64;

/// Threads of a warpgroup, the unit `setmaxnreg` and `wgmma` work on.
pub const WARPGROUP_THREADS: usize = 128;

/// The reasons one head dim's tile cannot compile or run on an H100, one line each.
#[derive(Debug, Default)]
pub struct Violations {
    head_dim: usize,
    why: Vec<String>,
}

impl Violations {
    pub fn new(head_dim: usize) -> Self {
        Violations {
            head_dim,
            why: Vec::new(),
        }
    }

    /// Records `what` unless `holds`.
    pub fn require(&mut self, holds: bool, what: impl FnOnce() -> String) {
        if !holds {
            self.why
                .push(format!("head dim {}: {}", self.head_dim, what()));
        }
    }

    /// The head dim is a whole number of TMA boxes.
    pub fn whole_boxes(&mut self) {
        let d = self.head_dim;
        self.require(d > 0 && d.is_multiple_of(BOX_ELEMS), || {
            format!("the head dim must be a whole number of {BOX_ELEMS}-element TMA boxes")
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

/// One tile's NVRTC defines, named `-D{prefix}_D{head dim}_{NAME}=value` (the kernel file
/// builds its per-head-dim constants from exactly these names).
pub struct TileDefines {
    prefix: &'static str,
    head_dim: usize,
    defines: Vec<String>,
}

impl TileDefines {
    pub fn new(prefix: &'static str, head_dim: usize) -> Self {
        TileDefines {
            prefix,
            head_dim,
            defines: Vec::new(),
        }
    }

    pub fn set(mut self, name: &str, value: usize) -> Self {
        self.defines.push(format!(
            "-D{}_D{}_{name}={value}",
            self.prefix, self.head_dim
        ));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn violations_name_the_head_dim_and_what_failed() {
        let mut v = Violations::new(96);
        v.whole_boxes();
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

        let mut fits = Violations::new(128);
        fits.whole_boxes();
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
        let mut fits = Violations::new(128);
        fits.registers(24, 2, 240);
        assert!(fits.into_lines().is_empty());
        let mut over = Violations::new(128);
        over.registers(32, 2, 240);
        assert_eq!(over.into_lines().len(), 1);
    }

    #[test]
    fn defines_carry_the_prefix_and_head_dim() {
        let d = TileDefines::new("XY", 64).set("KEYS", 128).into_vec();
        assert_eq!(d, ["-DXY_D64_KEYS=128"]);
        assert_eq!(file_define("XY", "THREADS", 384), "-DXY_THREADS=384");
    }
}
