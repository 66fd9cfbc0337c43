//! Typed kernel launches. [`kernel_args!`](crate::kernel_args) states a CUDA kernel's argument
//! list once, as the Rust types its parameters are passed as, and makes the one function that
//! launches it; the launcher calls that function instead of pushing untyped arguments one by
//! one, so an argument of the wrong type, or one too few, is a compile error on the host.
//!
//! ```ignore
//! common::kernel_args! {
//!     /// `softmax_warp_f32(const float* x, float* out, index_t rows, index_t cols)`
//!     fn softmax_warp_f32(x: &CudaSlice<f32>, out: &mut CudaSlice<f32>, rows: u64, cols: u64);
//! }
//! // SAFETY: x and out hold rows x cols values (checked above); warps past the last row return.
//! unsafe { softmax_warp_f32(gpu, &kernel, &shape, x, out, rows as u64, cols as u64) }?;
//! ```

use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};

pub use anyhow::Result;
pub use cudarc::driver::{DeviceRepr, LaunchArgs, PushKernelArg};

/// One argument of a kernel launch: a device buffer (shared or mutable), or a value the kernel
/// takes by copy (its bytes are what the kernel's parameter holds).
pub trait KernelArg {
    /// Adds this argument to `launch`, borrowed for as long as the launch is being built.
    fn push<'s>(&'s mut self, launch: &mut LaunchArgs<'s>);
}

impl<T> KernelArg for &CudaSlice<T> {
    fn push<'s>(&'s mut self, launch: &mut LaunchArgs<'s>) {
        launch.arg(&**self);
    }
}

impl<T> KernelArg for &mut CudaSlice<T> {
    fn push<'s>(&'s mut self, launch: &mut LaunchArgs<'s>) {
        launch.arg(&mut **self);
    }
}

impl<T> KernelArg for &CudaView<'_, T> {
    fn push<'s>(&'s mut self, launch: &mut LaunchArgs<'s>) {
        launch.arg(&**self);
    }
}

impl<T> KernelArg for &mut CudaViewMut<'_, T> {
    fn push<'s>(&'s mut self, launch: &mut LaunchArgs<'s>) {
        launch.arg(&mut **self);
    }
}

/// Makes each listed type (a `DeviceRepr` value: a scalar, a `#[repr(C)]` struct) a
/// [`KernelArg`] passed by copy. A day's own parameter struct uses it too:
/// `common::kernel_arg_by_value!(KernelShape);`.
#[macro_export]
macro_rules! kernel_arg_by_value {
    ($($t:ty),+ $(,)?) => {
        $(
            impl $crate::gpu::launch::KernelArg for $t {
                fn push<'s>(&'s mut self, launch: &mut $crate::gpu::launch::LaunchArgs<'s>) {
                    $crate::gpu::launch::PushKernelArg::arg(launch, &*self);
                }
            }
        )+
    };
}

kernel_arg_by_value!(
    u8,
    i8,
    u16,
    i16,
    u32,
    i32,
    u64,
    i64,
    f32,
    f64,
    half::f16,
    half::bf16
);
kernel_arg_by_value!(crate::gpu::tma::TmaDescriptor);

/// Declares a kernel's argument list once and makes the function that launches it:
/// `unsafe fn NAME(gpu, kernel, shape, args...) -> Result<()>` checks the launch shape against
/// the kernel ([`Kernel::config`](crate::Kernel::config)), pushes the arguments in order and
/// launches on `gpu.stream`. Generic parameters may be listed (`fn f<T>(x: &CudaSlice<T>)`).
///
/// The function is `unsafe`: its caller promises that the loaded kernel takes exactly these
/// arguments with these C types, and that every access the launch shape makes the kernel do
/// lies inside the buffers it is given (a `// SAFETY:` comment at the call says why).
#[macro_export]
macro_rules! kernel_args {
    ($(
        $(#[$meta:meta])*
        $vis:vis fn $name:ident $(< $($generic:ident),+ >)? ( $($arg:ident : $ty:ty),* $(,)? );
    )+) => {$(
        $(#[$meta])*
        ///
        /// # Safety
        /// The loaded kernel takes these arguments in this order with these C types, and every
        /// access the launch shape makes it do lies inside the buffers given.
        #[allow(clippy::too_many_arguments, dead_code)]
        $vis unsafe fn $name $(< $($generic),+ >)? (
            gpu: &$crate::Gpu,
            kernel: &$crate::Kernel,
            shape: &$crate::LaunchShape,
            $(mut $arg: $ty),*
        ) -> $crate::gpu::launch::Result<()> {
            let config = kernel.config(shape)?;
            let mut launch = gpu.stream.launch_builder(&kernel.func);
            $( $crate::gpu::launch::KernelArg::push(&mut $arg, &mut launch); )*
            // SAFETY: the caller's promise, above.
            unsafe { launch.launch(config) }?;
            Ok(())
        }
    )+};
}
