//! A kernel's parameters as one struct, declared once, in Rust.
//!
//! A Hopper kernel takes one `const __grid_constant__ Params p`: its TMA maps, buffers and
//! sizes as the fields of one struct. [`kernel_params!`](crate::kernel_params) declares that
//! struct in Rust (`#[repr(C)]`, what the launcher fills and passes), and from the same
//! declaration writes its C twin: [`c_header`] makes the text of a `.cuh` that the day checks
//! in beside its kernel (so a reader sees it) and compiles in front of it, and the day's test
//! [`assert_generated`] fails when the checked-in file is not what the Rust declaration makes.
//! Order, types and sizes cannot drift apart: there is one list of fields, and the header's
//! `static_assert`s hold the C compiler's sizes and alignments to the host's.
//!
//! ```ignore
//! common::kernel_params! {
//!     /// fa_hopper's parameters.
//!     pub struct FaHopperParams<T> {
//!         pub map_q: TmaDescriptor,
//!         pub o: DeviceOut<T>,
//!         pub heads: i32,
//!     }
//! }
//! ```
//!
//! A generic parameter is the C struct's template parameter; it may appear only behind a
//! pointer ([`DeviceIn`], [`DeviceOut`]), so every instantiation has one layout.

use std::marker::PhantomData;
use std::path::Path;

use cudarc::driver::{DevicePtr, DevicePtrMut, DeviceRepr};

use crate::gpu::Gpu;
use crate::gpu::tma::TmaDescriptor;

/// A Rust type with a C spelling: how the kernel's struct declares a field of this type.
pub trait CType {
    fn c_type() -> String;
}

macro_rules! c_types {
    ($($t:ty => $c:literal),+ $(,)?) => {
        $(impl CType for $t {
            fn c_type() -> String {
                $c.to_string()
            }
        })+
    };
}

c_types!(
    i8 => "signed char",
    u8 => "unsigned char",
    i16 => "short",
    u16 => "unsigned short",
    i32 => "int",
    u32 => "unsigned",
    i64 => "long long",
    u64 => "unsigned long long",
    f32 => "float",
    f64 => "double",
    half::f16 => "f16_t",
    half::bf16 => "bf16_t",
    TmaDescriptor => "TmaDescriptor",
);

/// The template parameter itself, `T`: what a generic struct's fields are written with in its
/// C declaration.
pub struct TemplateParameter;

impl CType for TemplateParameter {
    fn c_type() -> String {
        "T".to_string()
    }
}

/// A buffer the kernel reads: `const T*` in C, a device address here.
#[repr(transparent)]
pub struct DeviceIn<T> {
    address: u64,
    element: PhantomData<*const T>,
}

/// A buffer the kernel writes (and may read): `T*` in C, a device address here.
#[repr(transparent)]
pub struct DeviceOut<T> {
    address: u64,
    element: PhantomData<*mut T>,
}

impl<T> DeviceIn<T> {
    /// The address of `buffer` (a slice or a view). The struct holds no borrow: the launcher
    /// keeps `buffer` alive until the kernel has run, as for any raw pointer (the workspace's
    /// context tracks no events between streams, so nothing else is owed).
    pub fn of(gpu: &Gpu, buffer: &impl DevicePtr<T>) -> Self {
        let (address, _record) = buffer.device_ptr(&gpu.stream);
        Self::at(address)
    }

    /// A raw device address (0 for a buffer the kernel is told it does not have).
    pub fn at(address: u64) -> Self {
        Self {
            address,
            element: PhantomData,
        }
    }
}

impl<T> DeviceOut<T> {
    /// The address of `buffer`, as [`DeviceIn::of`]; a `&mut` borrow, so that a buffer the
    /// kernel writes is one the launcher may write.
    pub fn of(gpu: &Gpu, buffer: &mut impl DevicePtrMut<T>) -> Self {
        let (address, _record) = buffer.device_ptr_mut(&gpu.stream);
        Self::at(address)
    }

    /// The address of counters the kernel updates and leaves as it found them (a ticket
    /// counter back at 0), which every launch on the stream shares: a shared borrow.
    pub fn of_counters(gpu: &Gpu, counters: &impl DevicePtr<T>) -> Self {
        let (address, _record) = counters.device_ptr(&gpu.stream);
        Self::at(address)
    }

    /// A raw device address (0 for a buffer the kernel is told it does not have).
    pub fn at(address: u64) -> Self {
        Self {
            address,
            element: PhantomData,
        }
    }
}

// Clone and Copy by hand: derived ones would ask T for them, which an address does not need.
impl<T> Clone for DeviceIn<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for DeviceIn<T> {}
impl<T> Clone for DeviceOut<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for DeviceOut<T> {}

// SAFETY: 8 bytes, a device address, as the kernel's pointer field holds it.
unsafe impl<T> DeviceRepr for DeviceIn<T> {}
// SAFETY: as above.
unsafe impl<T> DeviceRepr for DeviceOut<T> {}

impl<T: CType> CType for DeviceIn<T> {
    fn c_type() -> String {
        format!("const {}*", T::c_type())
    }
}

impl<T: CType> CType for DeviceOut<T> {
    fn c_type() -> String {
        format!("{}*", T::c_type())
    }
}

/// One field of a parameter struct as the host lays it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    pub c_type: String,
    pub offset: usize,
    pub size: usize,
    pub align: usize,
    /// The field's doc comment, which the C declaration carries as a comment.
    pub doc: String,
}

/// A kernel's parameter struct, as [`kernel_params!`](crate::kernel_params) records it.
pub trait KernelParams {
    /// The struct's C name (`FaHopperParams`).
    const NAME: &'static str;
    /// Its template parameter's name (`T`), for a generic struct.
    const TEMPLATE: Option<&'static str>;
    /// The struct's doc comment.
    fn doc() -> String;
    /// Size and alignment of this instantiation.
    fn size() -> usize;
    fn align() -> usize;
    /// The fields in order, their C types written with the template parameter (`const T*`).
    fn fields() -> Vec<Field>;
    /// The C name of this instantiation (`FaHopperParams<bf16_t>`).
    fn instance() -> String;
}

/// The C declaration of `P` (a template where `P` is generic), with comments from its docs.
/// Fields of one value type in a row, the later ones undocumented, share a declaration, as C
/// is written by hand (`int m, n, k;`); pointers each take their own.
pub fn c_declaration<P: KernelParams>() -> String {
    let mut out = comment(&P::doc(), "");
    if let Some(t) = P::TEMPLATE {
        out += &format!("template <typename {t}>\n");
    }
    out += &format!("struct {} {{\n", P::NAME);
    let fields = P::fields();
    let mut rest = &fields[..];
    while let [first, ..] = rest {
        let shared = 1 + rest[1..]
            .iter()
            .take_while(|f| {
                f.c_type == first.c_type && f.doc.is_empty() && !f.c_type.ends_with('*')
            })
            .count();
        let names: Vec<&str> = rest[..shared].iter().map(|f| f.name).collect();
        out += &comment(&first.doc, "    ");
        out += &format!("    {} {};\n", first.c_type, names.join(", "));
        rest = &rest[shared..];
    }
    out + "};\n"
}

/// The `static_assert` holding the C compiler's layout of `P`'s instantiation to the host's:
/// its size and alignment. The fields need no check of their own: the declaration is written
/// from the host's, in its order, and each Rust type's C spelling is tested once with NVRTC
/// (`every_c_spelling_has_the_hosts_size`), so a struct of the right fields in the right order
/// has the right offsets.
pub fn c_checks<P: KernelParams>() -> String {
    c_size_check::<P>()
}

/// The same check, named for a further instantiation of a generic struct (whose fields differ
/// only in what their pointers point to).
pub fn c_size_check<P: KernelParams>() -> String {
    let name = P::instance();
    format!(
        "static_assert(sizeof({name}) == {size} && alignof({name}) == {align}, \
         \"{name}: {size} bytes, aligned to {align}, on the host\");\n",
        size = P::size(),
        align = P::align(),
    )
}

/// The text of a day's generated header: a banner naming what it is written from (`from`, one
/// item each: "the kernel_params! declarations in day10_fa2_forward/src/fa_hopper.rs"), then
/// `parts` (declarations and checks).
pub fn c_header(from: &[&str], parts: &[String]) -> String {
    let mut out = String::from("// Generated from\n");
    for source in from {
        out += &format!("//   - {source}\n");
    }
    out += "// Edit those, then run `DAYS_OF_GPU_WRITE_GENERATED=1 cargo test` to write this file\n\
            // again. A test fails while this file and they differ.\n\
            #pragma once\n\
            #include \"hopper.cuh\"\n";
    for part in parts {
        out += "\n";
        out += part;
    }
    out
}

/// The environment variable under which [`assert_generated`] writes the file instead of
/// failing.
pub const WRITE_GENERATED_ENV: &str = "DAYS_OF_GPU_WRITE_GENERATED";

/// Holds a checked-in generated file (`checked_in`, its text as the crate embedded it) to what
/// the code generates now (`generated`). With `DAYS_OF_GPU_WRITE_GENERATED=1` it writes
/// `generated` to `path` (from the package folder, `package_dir`) instead; otherwise a
/// difference panics, naming the first line that differs and how to write the file again.
pub fn assert_generated(package_dir: &str, path: &str, checked_in: &str, generated: &str) {
    if checked_in == generated {
        return;
    }
    let file = Path::new(package_dir).join(path);
    if std::env::var(WRITE_GENERATED_ENV).is_ok_and(|v| v == "1") {
        std::fs::write(&file, generated)
            .unwrap_or_else(|e| panic!("writing {}: {e}", file.display()));
        return;
    }
    let line = checked_in
        .lines()
        .zip(generated.lines())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| checked_in.lines().count().min(generated.lines().count()));
    panic!(
        "{path} is not what its Rust declarations make (first difference at line {}: {:?} \
         checked in, {:?} generated); write it again with {WRITE_GENERATED_ENV}=1 cargo test",
        line + 1,
        checked_in.lines().nth(line).unwrap_or("(end of file)"),
        generated.lines().nth(line).unwrap_or("(end of file)"),
    );
}

/// [`assert_generated`] for the calling package's checked-in header `src/<file>`, which
/// `generated` must equal: `common::assert_generated_header!("fa_hopper_params.cuh",
/// &params_header())` in the test beside the declarations.
#[macro_export]
macro_rules! assert_generated_header {
    ($file:literal, $generated:expr) => {
        $crate::gpu::params::assert_generated(
            env!("CARGO_MANIFEST_DIR"),
            concat!("src/", $file),
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/", $file)),
            $generated,
        )
    };
}

fn comment(doc: &str, indent: &str) -> String {
    doc.lines()
        .map(|l| {
            format!(
                "{indent}//{}{}\n",
                if l.is_empty() { "" } else { " " },
                l.trim()
            )
        })
        .collect()
}

/// Declares a kernel's parameter struct once: the `#[repr(C)]` struct the launcher fills and
/// passes by value (a [`KernelArg`](crate::gpu::launch::KernelArg)), and its [`KernelParams`]
/// record, from which [`c_declaration`] and [`c_checks`] write its C twin. A generic parameter
/// is the C struct's template parameter and appears only behind [`DeviceIn`] / [`DeviceOut`].
#[macro_export]
macro_rules! kernel_params {
    (
        $(#[doc = $doc:literal])*
        $vis:vis struct $name:ident $(< $t:ident >)? {
            $( $(#[doc = $fdoc:literal])* $fvis:vis $field:ident : $ty:ty ),* $(,)?
        }
    ) => {
        $(#[doc = $doc])*
        #[repr(C)]
        $vis struct $name $(< $t >)? {
            $( $(#[doc = $fdoc])* $fvis $field : $ty ),*
        }

        impl $(< $t >)? Clone for $name $(< $t >)? {
            fn clone(&self) -> Self {
                *self
            }
        }
        impl $(< $t >)? Copy for $name $(< $t >)? {}

        // SAFETY: `#[repr(C)]` of fields each passed by copy, declared to the kernel by the
        // header this same declaration writes.
        unsafe impl $(< $t >)? $crate::gpu::launch::DeviceRepr for $name $(< $t >)? {}

        impl $(< $t >)? $crate::gpu::launch::KernelArg for $name $(< $t >)? {
            fn push<'s>(&'s mut self, launch: &mut $crate::gpu::launch::LaunchArgs<'s>) {
                $crate::gpu::launch::PushKernelArg::arg(launch, &*self);
            }
        }

        impl $(< $t: $crate::gpu::params::CType >)? $name $(< $t >)? {
            fn declared_fields() -> Vec<$crate::gpu::params::Field> {
                vec![$($crate::gpu::params::Field {
                    name: stringify!($field),
                    c_type: <$ty as $crate::gpu::params::CType>::c_type(),
                    offset: ::std::mem::offset_of!(Self, $field),
                    size: ::std::mem::size_of::<$ty>(),
                    align: ::std::mem::align_of::<$ty>(),
                    doc: <[&str]>::join(&[$($fdoc),*], "\n"),
                }),*]
            }
        }

        // A struct may be a field of another (one declared before it in the same header).
        impl $(< $t: $crate::gpu::params::CType >)? $crate::gpu::params::CType
            for $name $(< $t >)?
        {
            fn c_type() -> String {
                <Self as $crate::gpu::params::KernelParams>::instance()
            }
        }

        impl $(< $t: $crate::gpu::params::CType >)? $crate::gpu::params::KernelParams
            for $name $(< $t >)?
        {
            const NAME: &'static str = stringify!($name);
            const TEMPLATE: Option<&'static str> = $crate::kernel_params!(@template $($t)?);

            fn doc() -> String {
                <[&str]>::join(&[$($doc),*], "\n")
            }

            fn size() -> usize {
                ::std::mem::size_of::<Self>()
            }

            fn align() -> usize {
                ::std::mem::align_of::<Self>()
            }

            fn fields() -> Vec<$crate::gpu::params::Field> {
                // As the declaration writes them: with the template parameter `T`.
                <$name $(< $crate::kernel_params!(@declared $t) >)?>::declared_fields()
            }

            fn instance() -> String {
                let arguments: Vec<String> =
                    vec![$(<$t as $crate::gpu::params::CType>::c_type())?];
                if arguments.is_empty() {
                    stringify!($name).to_string()
                } else {
                    format!("{}<{}>", stringify!($name), arguments.join(", "))
                }
            }
        }
    };
    (@template) => { None };
    (@template $t:ident) => { Some(stringify!($t)) };
    (@declared $t:ident) => { $crate::gpu::params::TemplateParameter };
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::kernel_params! {
        /// A probe's parameters.
        pub struct ProbeParams<T> {
            pub map: TmaDescriptor,
            /// Rows of x.
            pub x: DeviceIn<T>,
            pub out: DeviceOut<f32>,
            pub rows: i32,
            pub scale: f32,
        }
    }

    crate::kernel_params! {
        struct Plain {
            n: u64,
            flag: i32,
            mode: i32,
        }
    }

    #[test]
    fn one_declaration_makes_both_structs() {
        assert_eq!(ProbeParams::<half::bf16>::instance(), "ProbeParams<bf16_t>");
        assert_eq!(Plain::instance(), "Plain");
        // The map is 64-byte aligned, so the struct is padded to 192 bytes.
        assert_eq!(ProbeParams::<half::bf16>::size(), 192);
        let described: Vec<(&str, String, usize, usize)> = ProbeParams::<half::bf16>::fields()
            .into_iter()
            .map(|f| (f.name, f.c_type, f.offset, f.size))
            .collect();
        let expected = [
            ("map", "TmaDescriptor", 0, 128),
            ("x", "const T*", 128, 8),
            ("out", "float*", 136, 8),
            ("rows", "int", 144, 4),
            ("scale", "float", 148, 4),
        ];
        let expected: Vec<(&str, String, usize, usize)> = expected
            .iter()
            .map(|&(n, c, o, s)| (n, c.to_string(), o, s))
            .collect();
        assert_eq!(described, expected);
        assert_eq!(
            c_declaration::<ProbeParams<half::bf16>>(),
            "// A probe's parameters.\ntemplate <typename T>\nstruct ProbeParams {\n    \
             TmaDescriptor map;\n    // Rows of x.\n    const T* x;\n    float* out;\n    \
             int rows;\n    float scale;\n};\n"
        );
        // Fields of one type in a row share a declaration.
        assert_eq!(
            c_declaration::<Plain>(),
            "struct Plain {\n    unsigned long long n;\n    int flag, mode;\n};\n"
        );
        let checks = c_checks::<Plain>();
        assert!(
            checks.starts_with("static_assert(sizeof(Plain) == 16 && alignof(Plain) == 8"),
            "{checks}"
        );
    }

    #[test]
    fn the_header_compiles_and_holds_the_layout() {
        let header = c_header(
            &["params.rs"],
            &[
                c_declaration::<ProbeParams<half::bf16>>(),
                c_checks::<ProbeParams<half::bf16>>(),
            ],
        );
        let kernel = "KERNEL void probe(const __grid_constant__ ProbeParams<bf16_t> p) {\n\
                      if (p.rows < 0) p.out[0] = p.scale;\n}\n";
        if !crate::testing::nvrtc_or_skip("NVRTC compile of a generated parameter header") {
            return;
        }
        compile(&format!("{header}\n{kernel}")).unwrap_or_else(|e| panic!("{e:#}\n{header}"));
        // A struct whose C layout is not the host's (a header left from an older declaration
        // with a field more) fails the header's check.
        let wrong = header.replacen("int rows;", "TmaDescriptor extra;\n    int rows;", 1);
        let err = format!("{:#}", compile(&format!("{wrong}\n{kernel}")).unwrap_err());
        assert!(err.contains("ProbeParams<bf16_t>: 192 bytes"), "{err}");
    }

    /// Every Rust type a parameter struct may hold, spelled in C as `CType` spells it, has the
    /// host's size and alignment there.
    #[test]
    fn every_c_spelling_has_the_hosts_size() {
        fn check<T: CType>() -> String {
            let (c, size, align) = (
                T::c_type(),
                std::mem::size_of::<T>(),
                std::mem::align_of::<T>(),
            );
            format!("static_assert(sizeof({c}) == {size} && alignof({c}) == {align}, \"{c}\");\n")
        }
        let checks = [
            check::<i8>(),
            check::<u8>(),
            check::<i16>(),
            check::<u16>(),
            check::<i32>(),
            check::<u32>(),
            check::<i64>(),
            check::<u64>(),
            check::<f32>(),
            check::<f64>(),
            check::<half::f16>(),
            check::<half::bf16>(),
            check::<TmaDescriptor>(),
            check::<DeviceIn<half::bf16>>(),
            check::<DeviceOut<f32>>(),
            check::<ProbeParams<half::f16>>(),
        ]
        .concat();
        if !crate::testing::nvrtc_or_skip("NVRTC compile of every C spelling") {
            return;
        }
        let header = c_header(
            &["params.rs"],
            &[c_declaration::<ProbeParams<half::bf16>>()],
        );
        compile(&format!("{header}\n{checks}")).unwrap_or_else(|e| panic!("{e:#}\n{checks}"));
    }

    /// `code` compiled for sm_90a, front end and all.
    fn compile(code: &str) -> anyhow::Result<crate::gpu::nvrtc::Compiled> {
        let code = Box::leak(code.to_string().into_boxed_str());
        let source = crate::gpu::kernel_source::KernelSource::inline("probe.cu", code);
        crate::gpu::nvrtc::compile_with_cache(&source, "sm_90a", &[], None)
    }

    #[test]
    fn a_generated_file_must_be_what_the_code_makes() {
        assert_generated("/nonexistent", "x.cuh", "a\nb\n", "a\nb\n");
        let failed = std::panic::catch_unwind(|| {
            assert_generated("/nonexistent", "x.cuh", "a\nb\n", "a\nc\n")
        });
        let message = failed.unwrap_err();
        let message = message
            .downcast_ref::<String>()
            .expect("a formatted message");
        assert!(
            message.contains("line 2") && message.contains("\"c\""),
            "{message}"
        );
        assert!(message.contains(WRITE_GENERATED_ENV), "{message}");
    }
}
