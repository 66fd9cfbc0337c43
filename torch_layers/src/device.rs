//! One open GPU per device PyTorch uses: its context (the device's primary context, the one
//! PyTorch uses too), the days' kernels, loaded on first use, and the scratch the kernels keep
//! between calls.
//!
//! Loading and scratch go on the extension's own stream, which is synchronized before anything
//! made there is used on PyTorch's stream; the kernels themselves run on PyTorch's current
//! stream ([`Device::on_stream`]), so they are ordered with the model's other work without a
//! synchronization.

use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::Result;
use common::{Gpu, UsageError};

/// A day's kernels, loaded once per device.
pub struct Loaded<T>(Mutex<Option<Arc<T>>>);

impl<T> Default for Loaded<T> {
    fn default() -> Self {
        Self(Mutex::new(None))
    }
}

impl<T> Loaded<T> {
    /// The kernels, loaded (compiled by NVRTC, or read from the kernel cache) on the first call.
    /// `call` is the calling operator on PyTorch's stream: loading synchronizes, which a CUDA
    /// graph capture on that stream forbids, so a first call inside a capture is refused
    /// before anything is done.
    pub fn get(
        &self,
        device: &Device,
        call: &Gpu,
        load: impl FnOnce(&Gpu) -> Result<T>,
    ) -> Result<Arc<T>> {
        let mut slot = lock(&self.0);
        if let Some(loaded) = slot.as_ref() {
            return Ok(loaded.clone());
        }
        if capturing(call)? {
            return Err(UsageError::new(
                "the layer's first call on this device is inside a CUDA graph capture: run it \
                 once before capturing (the warm-up PyTorch's capture recipe does), so that its \
                 kernels are loaded",
            )
            .into());
        }
        let loaded = Arc::new(load(&device.gpu)?);
        // What the loader allocated on the extension's stream is ready before PyTorch's
        // stream uses it.
        device.gpu.synchronize()?;
        *slot = Some(loaded.clone());
        Ok(loaded)
    }
}

/// What the kernels keep per problem (the attention's offsets on the device): the `CAPACITY`
/// most recently used problems, since a training run repeats a few shapes and varlen batches
/// would otherwise keep every shape they ever saw; and, for the life of the process, every
/// problem a CUDA graph captured, since the graph reads the entry's memory each time it is
/// replayed and nothing says when it is destroyed. Those stay until the process ends: a
/// capture of every new varlen packing would keep each one (a few hundred bytes apiece).
pub struct Cache<K, V> {
    entries: Mutex<Entries<K, V>>,
}

struct Entries<K, V> {
    /// Oldest first; dropped when a new problem needs the room.
    recent: Vec<(K, Arc<V>)>,
    /// Used by a capture: never dropped.
    captured: Vec<(K, Arc<V>)>,
}

/// Problems kept besides the captured ones.
const CAPACITY: usize = 8;

impl<K: PartialEq, V> Default for Cache<K, V> {
    fn default() -> Self {
        Self {
            entries: Mutex::new(Entries {
                recent: Vec::new(),
                captured: Vec::new(),
            }),
        }
    }
}

impl<K: PartialEq, V> Cache<K, V> {
    /// The entry for `key`, made by `make` on the extension's stream the first time.
    /// `capturing` says that the call's stream is capturing a CUDA graph: the entry is then
    /// kept for good, and it must exist already, since making one synchronizes, which a
    /// capture forbids.
    pub fn get(
        &self,
        device: &Device,
        key: K,
        capturing: bool,
        make: impl FnOnce(&Gpu) -> Result<V>,
    ) -> Result<Arc<V>> {
        let mut entries = lock(&self.entries);
        let Entries { recent, captured } = &mut *entries;
        if let Some((_, value)) = captured.iter().find(|(k, _)| *k == key) {
            return Ok(value.clone());
        }
        if let Some(i) = recent.iter().position(|(k, _)| *k == key) {
            let entry = recent.remove(i);
            let value = entry.1.clone();
            if capturing {
                captured.push(entry);
            } else {
                recent.push(entry);
            }
            return Ok(value);
        }
        if capturing {
            return Err(UsageError::new(
                "a problem of this shape is new inside a CUDA graph capture: run it once \
                 before capturing (the warm-up PyTorch's capture recipe does), so that its \
                 offsets exist on the device",
            )
            .into());
        }
        if recent.len() == CAPACITY {
            // Work already enqueued on PyTorch's stream may still read the oldest entry's
            // memory: wait for the device before it is freed.
            device.gpu.ctx.synchronize()?;
            recent.remove(0);
        }
        let value = Arc::new(make(&device.gpu)?);
        device.gpu.synchronize()?;
        recent.push((key, value.clone()));
        Ok(value)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves nothing half-written that a later call could
    // misread (slots are replaced whole), so a poisoned lock is taken as it is.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One GPU, as the extension keeps it.
pub struct Device {
    /// The device's primary context and the extension's own stream.
    pub gpu: Gpu,
    /// Each layer's kernels and scratch, as its module keeps them.
    pub attention: crate::attention::State,
    pub norm: crate::norm::State,
    pub activation: crate::activation::State,
    pub loss: crate::loss::State,
}

// Every field is either plain data or cudarc's handles, which it documents as usable from any
// thread; the kernels and scratch are only read after loading, under the GIL.
static DEVICES: Mutex<Vec<(usize, Arc<Device>)>> = Mutex::new(Vec::new());

/// The extension's state for CUDA device `ordinal`, opened on first use, with its context
/// current on the calling thread.
///
/// Autograd runs a backward on a thread of its own, where PyTorch may not have made any
/// context current yet (the first operation there is ours): the driver calls that take no
/// stream (an allocation, a memset of scratch) would then fail with an invalid context.
pub fn device(ordinal: usize) -> Result<Arc<Device>> {
    let mut devices = lock(&DEVICES);
    if let Some((_, d)) = devices.iter().find(|(o, _)| *o == ordinal) {
        d.gpu.ctx.bind_to_thread()?;
        return Ok(d.clone());
    }
    let d = Arc::new(Device {
        gpu: Gpu::open(ordinal)?,
        attention: Default::default(),
        norm: Default::default(),
        activation: Default::default(),
        loss: Default::default(),
    });
    devices.push((ordinal, d.clone()));
    Ok(d)
}

impl Device {
    /// This GPU with its launches on the stream `cu_stream` (PyTorch's current stream, as
    /// `torch.cuda.current_stream().cuda_stream` gives it; 0 is the legacy default stream).
    ///
    /// # Safety
    /// `cu_stream` must be a live stream of this device's primary context, alive until the
    /// returned `Gpu` is dropped; nothing may be allocated through it that outlives the call.
    pub unsafe fn on_stream(&self, cu_stream: u64) -> Gpu {
        // SAFETY: as the caller promised.
        unsafe { self.gpu.on_borrowed_stream(cu_stream as usize as _) }
    }
}

/// Whether `gpu`'s stream is capturing a CUDA graph (an invalidated capture counts: the
/// capture has not ended yet).
pub fn capturing(gpu: &Gpu) -> Result<bool> {
    let status = gpu.stream.capture_status()?;
    Ok(status != cudarc::driver::sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}
