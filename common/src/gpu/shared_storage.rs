//! A kernel's shared memory as one C struct, declared once, in Rust.
//!
//! A Hopper kernel's block keeps its TMA tiles, its mbarriers and its small hand-off slots in
//! dynamic shared memory. [`SharedStorage`] declares that memory member by member from the
//! day's tile table (one storage per tile: per head dim, per GEMM tile), and from the same
//! declaration gives both sides what they need:
//!
//! - the launcher, the bytes to launch with ([`SharedStorage::launch_bytes`]: the struct and
//!   the slack that lets the kernel align it to the swizzle's 1024-byte period);
//! - the kernel, a C struct (a specialization of `template <typename T, int KEY> struct
//!   Name`) whose members it reads by name and whose `sizeof` gives the bytes a TMA barrier
//!   expects; the day checks it in beside its kernel, in the header that
//!   [`c_header`](crate::gpu::params::c_header) writes, so a reader sees it;
//! - the header's `static_assert`s, which hold the C compiler's layout to the host's (each
//!   member's size and alignment and the struct's, which under C's layout rule fix every
//!   offset: NVRTC has no `offsetof`); the offsets themselves the kernel reads as constants
//!   of the struct (`S::at::k_full`), for 32-bit shared-memory address arithmetic.
//!
//! Members are laid out as C lays out a struct: each at the next multiple of its alignment,
//! the whole rounded up to the largest alignment.

use std::collections::BTreeMap;

use crate::gpu::tile::{BOX_ELEMS, SharedLayout};

/// Where a swizzled TMA tile starts: the 128-byte swizzle's pattern repeats every 1024 bytes.
pub const SWIZZLE_ALIGN: usize = 1024;

/// The bytes a launch adds to a storage struct so that the kernel can start it on a
/// [`SWIZZLE_ALIGN`] boundary (`shared_storage<S>()` in `hopper.cuh`): dynamic shared memory
/// is only 16-byte aligned.
pub const ALIGNMENT_SLACK: usize = SWIZZLE_ALIGN;

/// One member of a storage struct.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Member {
    name: &'static str,
    doc: &'static str,
    /// The C element type (`T`, `float`, `unsigned long long`, a struct's name).
    c_type: &'static str,
    element_bytes: usize,
    align: usize,
    /// The array's extents, outermost first (`[stage][box][row][column]`).
    dims: Vec<usize>,
    offset: usize,
}

impl Member {
    fn bytes(&self) -> usize {
        self.element_bytes * self.dims.iter().product::<usize>()
    }
}

/// A block's shared memory, as one C struct: `template <typename T> struct Name<T, key>`,
/// `T` the kernel's 16-bit element type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedStorage {
    name: &'static str,
    /// The template arguments after `T` that name this tile (`"128"`, or `"64, 3"`).
    key: String,
    members: Vec<Member>,
    /// The bytes laid out so far, in member order.
    layout: SharedLayout,
}

impl SharedStorage {
    /// The storage of the tile `key` (a head dim) of the kernel whose storage template is
    /// `name`.
    pub fn new(name: &'static str, key: usize) -> Self {
        Self::keyed(name, &[key])
    }

    /// The storage of the tile named by the template arguments `keys` (a head dim and a count
    /// of consumers: `Name<T, 64, 3>`).
    pub fn keyed(name: &'static str, keys: &[usize]) -> Self {
        let key: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        SharedStorage {
            name,
            key: key.join(", "),
            members: Vec::new(),
            layout: SharedLayout::new(),
        }
    }

    /// Adds a member of `dims` elements of `c_type`, `element_bytes` each, starting at a
    /// multiple of `align`.
    pub fn member(
        mut self,
        name: &'static str,
        doc: &'static str,
        (c_type, element_bytes, align): (&'static str, usize, usize),
        dims: &[usize],
    ) -> Self {
        assert!(align.is_power_of_two(), "{name}: alignment {align}");
        assert!(dims.iter().all(|&d| d > 0), "{name}: an empty array");
        let offset = self.layout.align(align).bytes();
        let member = Member {
            name,
            doc,
            c_type,
            element_bytes,
            align,
            dims: dims.to_vec(),
            offset,
        };
        self.layout = self.layout.align(align).region(member.bytes());
        self.members.push(member);
        self
    }

    /// Adds a ring of swizzled TMA tiles of 16-bit `T`: `[stages][boxes][rows][64]`, a box 64
    /// elements (one 128-byte swizzle row) wide, on the swizzle's 1024-byte period. A width
    /// of no whole number of boxes is rounded up (the tile table names it a violation).
    pub fn tiles(
        self,
        name: &'static str,
        doc: &'static str,
        stages: usize,
        rows: usize,
        width: usize,
    ) -> Self {
        let boxes = width.div_ceil(BOX_ELEMS);
        self.member(name, doc, HALF_TILE, &[stages, boxes, rows, BOX_ELEMS])
    }

    /// Adds `count` mbarriers.
    pub fn barriers(self, name: &'static str, doc: &'static str, count: usize) -> Self {
        self.member(name, doc, BARRIER, &[count])
    }

    /// The byte offset of member `name` from the struct's start.
    pub fn offset(&self, name: &str) -> usize {
        self.find(name).offset
    }

    /// The bytes of member `name`.
    pub fn bytes_of(&self, name: &str) -> usize {
        self.find(name).bytes()
    }

    fn find(&self, name: &str) -> &Member {
        self.members
            .iter()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("{}: no member {name}", self.name))
    }

    /// The struct's alignment: its largest member's.
    pub fn align(&self) -> usize {
        self.members.iter().map(|m| m.align).max().unwrap_or(1)
    }

    /// `sizeof` the struct: its end rounded up to its alignment.
    pub fn size(&self) -> usize {
        self.layout.align(self.align()).bytes()
    }

    /// The dynamic shared memory a block of this storage is launched with.
    pub fn launch_bytes(&self) -> usize {
        self.size() + ALIGNMENT_SLACK
    }

    /// The C specialization for this tile: the members, commented with their docs, then
    /// `at`, each member's byte offset as a constant for 32-bit address arithmetic.
    pub fn c_declaration(&self) -> String {
        let mut out = format!(
            "template <typename T> struct {}<T, {}> {{\n",
            self.name, self.key
        );
        for m in &self.members {
            for line in m.doc.lines() {
                out += &format!("    // {}\n", line.trim());
            }
            let dims: String = m.dims.iter().map(|d| format!("[{d}]")).collect();
            out += &format!("    {}{} {}{dims};\n", m.alignas(), m.c_type, m.name);
        }
        out += "    // Each member's byte offset from the struct's start.\n    struct at {\n";
        for m in &self.members {
            out += &format!(
                "        static constexpr unsigned {} = {};\n",
                m.name, m.offset
            );
        }
        out + "    };\n};\n"
    }

    /// `static_assert`s holding the C compiler's layout of the bf16 instantiation to the
    /// host's. NVRTC has no `offsetof`, so they check what fixes every offset under C's rule
    /// (each member at the next multiple of its alignment, in order): each member's size, the
    /// alignment of each member not given an `alignas`, and the struct's size and alignment.
    pub fn c_checks(&self) -> String {
        let instance = format!("{}<bf16_t, {}>", self.name, self.key);
        let mut out = format!(
            "static_assert(sizeof({instance}) == {size} && alignof({instance}) == {align}, \
             \"{instance}: {size} bytes, aligned to {align}, on the host\");\n",
            size = self.size(),
            align = self.align(),
        );
        for m in &self.members {
            out += &format!(
                "static_assert(sizeof({instance}::{name}) == {bytes}, \
                 \"{instance}::{name}: {bytes} bytes on the host\");\n",
                name = m.name,
                bytes = m.bytes(),
            );
        }
        let natural: BTreeMap<&str, usize> = self
            .members
            .iter()
            .filter(|m| m.alignas().is_empty())
            .map(|m| (m.c_type, m.align))
            .collect();
        for (c, align) in natural {
            out += &format!(
                "static_assert(alignof({c}) == {align}, \"{c}: aligned to {align} on the host\");\n"
            );
        }
        out
    }
}

impl Member {
    /// `alignas(N) ` where the member asks for more than its element type's own alignment
    /// (taken as its size, up to 8).
    fn alignas(&self) -> String {
        if self.align > self.element_bytes.min(8) {
            format!("alignas({}) ", self.align)
        } else {
            String::new()
        }
    }
}

/// A 16-bit tile element, `T` (bf16 or f16).
const HALF_TILE: (&str, usize, usize) = ("T", 2, SWIZZLE_ALIGN);

/// An mbarrier: 8 bytes, 8-aligned.
const BARRIER: (&str, usize, usize) = ("unsigned long long", 8, 8);

/// f32 elements of a TMA destination that is not swizzled: 128-byte aligned, as the TMA
/// requires of any shared-memory box.
pub const F32_BOXES: (&str, usize, usize) = ("float", 4, 128);

/// f32 elements of a swizzled TMA tile.
pub const F32_TILE: (&str, usize, usize) = ("float", 4, SWIZZLE_ALIGN);

/// The primary template every tile's storage specializes, with its doc; `params` are the
/// template parameters after `T` (`"int KEY"`, or `"int D, int NC"`).
pub fn c_primary(name: &str, doc: &str, params: &str) -> String {
    let mut out: String = doc.lines().map(|l| format!("// {}\n", l.trim())).collect();
    out += &format!("template <typename T, {params}> struct {name};\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe() -> SharedStorage {
        SharedStorage::new("Probe", 64)
            .tiles("q", "Q tiles.", 2, 64, 128)
            .member("l", "L.", F32_BOXES, &[2, 64])
            .barriers("full", "Full.", 3)
            .member("slot", "A slot.", ("int", 4, 4), &[1])
    }

    #[test]
    fn members_are_laid_out_as_c_lays_them_out() {
        let s = probe();
        assert_eq!(s.offset("q"), 0);
        assert_eq!(s.bytes_of("q"), 2 * 64 * 128 * 2);
        assert_eq!(s.offset("l"), 32768);
        assert_eq!(s.offset("full"), 32768 + 512);
        assert_eq!(s.offset("slot"), 32768 + 512 + 24);
        // 33308 bytes, rounded up to the tiles' 1024.
        assert_eq!(s.size(), 33792);
        assert_eq!(s.launch_bytes(), 33792 + 1024);
        assert_eq!(s.align(), 1024);
    }

    #[test]
    fn the_declaration_names_every_member() {
        let text = probe().c_declaration();
        assert!(
            text.starts_with("template <typename T> struct Probe<T, 64> {\n"),
            "{text}"
        );
        assert!(
            text.contains("    // Q tiles.\n    alignas(1024) T q[2][2][64][64];\n"),
            "{text}"
        );
        assert!(
            text.contains("    alignas(128) float l[2][64];\n"),
            "{text}"
        );
        assert!(text.contains("    unsigned long long full[3];\n"), "{text}");
        assert!(text.contains("    int slot[1];\n"), "{text}");
        assert!(
            text.contains("static constexpr unsigned slot = 33304;\n"),
            "{text}"
        );
        let checks = probe().c_checks();
        assert!(
            checks.contains("sizeof(Probe<bf16_t, 64>::l) == 512"),
            "{checks}"
        );
        assert!(checks.contains("alignof(int) == 4"), "{checks}");
    }

    #[test]
    fn the_header_compiles_and_holds_the_layout() {
        if !crate::testing::nvrtc_or_skip("NVRTC compile of a generated storage struct") {
            return;
        }
        let s = probe();
        let text = format!(
            "#include \"dtype.cuh\"\n{}{}{}",
            c_primary("Probe", "A probe.", "int KEY"),
            s.c_declaration(),
            s.c_checks()
        );
        compile(&text).unwrap_or_else(|e| panic!("{e:#}\n{text}"));
        // A C struct that is not the host's fails its checks: a member of another size, or
        // one more.
        let wrong = text.replacen("float l[2][64];", "float l[2][65];", 1);
        let err = format!("{:#}", compile(&wrong).unwrap_err());
        assert!(err.contains("Probe<bf16_t, 64>::l: 512 bytes"), "{err}");
        let wrong = text.replacen("int slot[1];", "int slot[1];\n    float extra[300];", 1);
        let err = format!("{:#}", compile(&wrong).unwrap_err());
        assert!(err.contains("Probe<bf16_t, 64>: 33792 bytes"), "{err}");
    }

    fn compile(code: &str) -> anyhow::Result<crate::gpu::nvrtc::Compiled> {
        let code = Box::leak(code.to_string().into_boxed_str());
        let source = crate::gpu::kernel_source::KernelSource::inline("probe.cu", code);
        crate::gpu::nvrtc::compile_with_cache(&source, "sm_90a", &[], None)
    }
}
