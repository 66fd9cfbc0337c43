//! Opening the GPU, or saying clearly why not; device facts; memory helpers.
//!
//! Below the device, in order (each uses only what comes before it): [`kernel_cache`],
//! [`kernel_source`] (the kernel files and headers, embedded or read from a checkout),
//! [`nvrtc`], [`kernel_build`] (what each day compiles), [`kernel`] (loading a compiled file
//! and its kernels), [`tma`], [`launch`] (typed kernel launches, `kernel_args!`), [`tile`] (the numbers a kernel and its launcher share: defines, shared bytes, the limits a tile table checks),
//! [`params`] and [`shared_storage`] (a kernel's parameter struct and its shared memory, each
//! declared once in Rust and written out as C), [`cublas`],
//! [`cublaslt`] (the 8-bit GEMMs).

pub mod kernel_cache;
pub mod kernel_source;
pub mod nvrtc;
pub mod kernel_build;
pub mod kernel;
pub mod tma;
pub mod launch;
pub mod params;
pub mod tile;
pub mod shared_storage;
pub mod cublas;
pub mod cublaslt;

use std::sync::{Arc, OnceLock};

use anyhow::Result;
use cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, sys,
    sys::CUdevice_attribute,
};
use serde::{Deserialize, Serialize};

use crate::element::Element;
use crate::error::{SetupError, UsageError};

/// A buffer of `T` on the device, whose address and length a launch or a library call
/// reads: a `CudaSlice`, or a view of one.
pub trait DeviceBuffer<T>: DevicePtr<T> + DeviceSlice<T> {}

impl<T, B: DevicePtr<T> + DeviceSlice<T> + ?Sized> DeviceBuffer<T> for B {}

/// Refuses `buffer` unless it starts 16-byte aligned, as 16-byte loads and the TMA need:
/// `what` names the buffer and `needs` the reader ("the TMA needs").
pub fn require_16_byte_start<T>(
    gpu: &Gpu,
    buffer: &impl DeviceBuffer<T>,
    what: &str,
    needs: &str,
) -> anyhow::Result<()> {
    let (address, _record) = buffer.device_ptr(&gpu.stream);
    if address.is_multiple_of(16) {
        return Ok(());
    }
    Err(crate::error::Refused(format!(
        "{what}: {needs} a 16-byte aligned start; this one is {} bytes past a 16-byte boundary",
        address % 16
    ))
    .into())
}

/// A [`DeviceBuffer`] that a call also writes.
pub trait DeviceBufferMut<T>: DeviceBuffer<T> + DevicePtrMut<T> {}

impl<T, B: DeviceBuffer<T> + DevicePtrMut<T> + ?Sized> DeviceBufferMut<T> for B {}

/// What the report says about the device a run used.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub name: String,
    pub ordinal: usize,
    /// The NVRTC target for this device, `sm_XY`.
    pub arch: String,
    pub sms: u32,
    pub l2_bytes: u64,
    pub memory_bytes: u64,
    pub max_threads_per_sm: u32,
    pub max_shared_per_block_optin: u32,
    /// As the driver reports it, e.g. 13000 for CUDA 13.0.
    pub driver_cuda_version: i32,
    /// The SM clock the driver quotes (the boost clock), in kHz.
    #[serde(default)]
    pub clock_khz: u32,
}

impl DeviceInfo {
    /// FP32 lanes per SM: 64 on sm_60, sm_70, sm_75 and sm_80; 128 on sm_86, sm_89, sm_90 and
    /// later (the FP32 cores of the CUDA programming guide's throughput table).
    pub fn fp32_lanes_per_sm(&self) -> u32 {
        match self.arch.as_str() {
            "sm_60" | "sm_70" | "sm_72" | "sm_75" | "sm_80" => 64,
            _ => 128,
        }
    }

    /// FP32 peak in TFLOP/s: every lane issuing one fused multiply-add (2 FLOPs) per clock at
    /// the quoted clock. Power and heat can hold the real clock below it.
    pub fn fp32_peak_tflops(&self) -> f64 {
        f64::from(self.sms)
            * f64::from(self.fp32_lanes_per_sm())
            * 2.0
            * f64::from(self.clock_khz)
            * 1e3
            / 1e12
    }

    /// One line for table headers: `NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 50 MiB L2)`.
    pub fn summary(&self) -> String {
        format!(
            "{} ({}, {} SMs, {} MiB L2)",
            self.name,
            self.arch,
            self.sms,
            self.l2_bytes >> 20
        )
    }
}

/// An open GPU: its context, the one stream everything runs on, and its facts.
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub info: DeviceInfo,
    /// The copy ceiling, measured once per process by [`crate::bench`].
    pub(crate) copy_ceiling_gbs: OnceLock<f64>,
}

/// Counts the CUDA devices, or says what is missing. Never panics without a driver: cudarc
/// panics on the first driver call when libcuda cannot be loaded, so that is asked first.
pub fn device_count() -> Result<usize, SetupError> {
    // SAFETY: only tries to dlopen libcuda by its candidate names.
    if !unsafe { sys::is_culib_present() } {
        return Err(SetupError::NoDriver);
    }
    match CudaContext::device_count() {
        Ok(0) => Err(SetupError::NoDevice("it lists 0 devices".into())),
        Ok(n) => Ok(n as usize),
        Err(e) => Err(SetupError::NoDevice(driver_error_text(&e))),
    }
}

fn driver_error_text(e: &cudarc::driver::DriverError) -> String {
    match e.error_string() {
        Ok(s) => format!("{:?}: {}", e.0, s.to_string_lossy()),
        Err(_) => format!("{:?}", e.0),
    }
}

impl Gpu {
    /// Opens GPU `ordinal`, failing with a [`SetupError`] when there is none.
    pub fn open(ordinal: usize) -> Result<Self> {
        let count = device_count()?;
        if ordinal >= count {
            return Err(SetupError::NoSuchDevice {
                requested: ordinal,
                count,
            }
            .into());
        }
        let ctx =
            CudaContext::new(ordinal).map_err(|e| SetupError::NoDevice(driver_error_text(&e)))?;
        // Everything runs on one stream, so cudarc's per-buffer events (which order work across
        // streams) would only add API calls around every launch and timing loop.
        // SAFETY: no buffer exists yet, and this crate never uses a second stream.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream()?;
        let info = read_device_info(&ctx, ordinal)?;
        Ok(Self {
            ctx,
            stream,
            info,
            copy_ceiling_gbs: OnceLock::new(),
        })
    }

    /// This GPU with its work enqueued on a stream another library owns (PyTorch's current
    /// stream, for `torch_layers`): launches through the returned `Gpu` are ordered with that
    /// library's own work on the stream, with no synchronization between them.
    ///
    /// # Safety
    /// `cu_stream` must be a live stream of this GPU's context (null is the legacy default
    /// stream), and must outlive the returned `Gpu` and every buffer allocated through it.
    pub unsafe fn on_borrowed_stream(&self, cu_stream: sys::CUstream) -> Gpu {
        // SAFETY: as the caller promised; the wrapper never destroys the stream.
        let stream = unsafe { self.ctx.wrap_borrowed_stream(cu_stream) };
        Gpu {
            ctx: self.ctx.clone(),
            stream,
            info: self.info.clone(),
            copy_ceiling_gbs: OnceLock::new(),
        }
    }

    /// Refuses, before anything is allocated, a problem whose buffers do not fit in the free
    /// device memory (with a little room left for the runtime).
    pub fn check_fits(&self, what: &str, bytes: u64) -> Result<(), UsageError> {
        let (free, _total) = self
            .ctx
            .mem_get_info()
            .map_err(|e| UsageError::new(format!("cannot read free device memory: {e}")))?;
        let headroom = 256 << 20;
        if bytes.saturating_add(headroom) > free as u64 {
            return Err(UsageError::new(format!(
                "{what} needs {:.2} GiB of device memory but {} has {:.2} GiB free",
                gib(bytes),
                self.info.name,
                gib(free as u64)
            )));
        }
        Ok(())
    }

    /// Copies a host slice to a new device buffer.
    pub fn upload<T: Element>(&self, host: &[T]) -> Result<CudaSlice<T>> {
        Ok(self.stream.clone_htod(host)?)
    }

    /// Copies a device buffer back (waits for the stream).
    pub fn download<T: Element>(&self, dev: &CudaSlice<T>) -> Result<Vec<T>> {
        Ok(self.stream.clone_dtoh(dev)?)
    }

    /// A new device buffer filled with [`Element::POISON`].
    pub fn alloc_poisoned<T: Element>(&self, len: usize) -> Result<CudaSlice<T>> {
        // SAFETY: every element is written by `poison` before anyone reads it.
        let mut buf = unsafe { self.stream.alloc::<T>(len) }?;
        self.poison(&mut buf)?;
        Ok(buf)
    }

    /// Fills `buf` with [`Element::POISON`] on the stream, with a driver memset.
    pub fn poison<T: Element>(&self, buf: &mut CudaSlice<T>) -> Result<()> {
        let len = buf.len();
        let (ptr, _guard) = buf.device_ptr_mut(&self.stream);
        let stream = self.stream.cu_stream();
        // SAFETY: `ptr` is a live allocation of `len` elements of T, the memset writes exactly
        // that many elements of T's size, and runs on the stream that owns the buffer.
        let status = unsafe {
            match std::mem::size_of::<T>() {
                4 => sys::cuMemsetD32Async(ptr, poison_bits::<T, u32>(), len, stream),
                2 => sys::cuMemsetD16Async(ptr, poison_bits::<T, u16>(), len, stream),
                1 => sys::cuMemsetD8Async(ptr, poison_bits::<T, u8>(), len, stream),
                n => unreachable!("no Element has {n} bytes"),
            }
        };
        status.result()?;
        Ok(())
    }

    pub fn synchronize(&self) -> Result<()> {
        Ok(self.stream.synchronize()?)
    }
}

fn poison_bits<T: Element, B: Copy>() -> B {
    assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<B>());
    // SAFETY: same size, both plain bit patterns.
    unsafe { std::mem::transmute_copy(&T::POISON) }
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

fn read_device_info(ctx: &Arc<CudaContext>, ordinal: usize) -> Result<DeviceInfo> {
    let attr = |a: CUdevice_attribute| ctx.attribute(a);
    let (major, minor) = ctx.compute_capability()?;
    let mut driver_cuda_version = 0;
    // SAFETY: valid out-pointer; the driver is loaded (a context exists).
    unsafe { sys::cuDriverGetVersion(&mut driver_cuda_version) }.result()?;
    Ok(DeviceInfo {
        name: ctx.name()?,
        ordinal,
        arch: format!("sm_{major}{minor}"),
        sms: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
        l2_bytes: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u64,
        memory_bytes: ctx.total_mem()? as u64,
        max_threads_per_sm: attr(
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
        )? as u32,
        max_shared_per_block_optin: attr(
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        )? as u32,
        driver_cuda_version,
        clock_khz: attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)? as u32,
    })
}
