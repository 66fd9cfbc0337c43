//! PyTorch's memory seen as cudarc buffers, without taking it over.
//!
//! The days' launchers take `&CudaSlice<T>`, which owns its memory and frees it when dropped.
//! A tensor's storage belongs to PyTorch's caching allocator, so [`Borrowed`] wraps the pointer
//! in a `CudaSlice` for the length of one call and lets go of it (`CudaSlice::leak`) when it is
//! dropped, on every path, an early error included: the memory is never freed here.

use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};

use common::Gpu;
use cudarc::driver::CudaSlice;

/// A tensor's device memory as a `CudaSlice<T>` of `len` elements, for one call.
pub struct Borrowed<T>(ManuallyDrop<CudaSlice<T>>);

impl<T> Borrowed<T> {
    /// # Safety
    /// `ptr` must point to at least `len` live elements of `T` on `gpu`'s device, which stay
    /// allocated (the tensor alive) until the work enqueued with them has run; the Python layer
    /// checks the tensors' device, dtype, contiguity and sizes before any pointer reaches here.
    pub unsafe fn new(gpu: &Gpu, ptr: u64, len: usize) -> Self {
        // SAFETY: as the caller promised; the slice is leaked, never freed, in `drop`.
        Self(ManuallyDrop::new(unsafe {
            gpu.stream.upgrade_device_ptr::<T>(ptr, len)
        }))
    }

    /// Gives the slice up without freeing it: for the days' structs that own their
    /// `CudaSlice`s (the norms' `Inputs`), which [`release`] lets go of in turn.
    pub fn into_slice(mut self) -> CudaSlice<T> {
        // SAFETY: taken once; `self` is forgotten so its `drop` does not see the empty slot.
        let slice = unsafe { ManuallyDrop::take(&mut self.0) };
        std::mem::forget(self);
        slice
    }
}

/// Lets go of a slice made by [`Borrowed::into_slice`] without freeing the memory.
pub fn release<T>(slice: CudaSlice<T>) {
    let _ptr = slice.leak();
}

impl<T> Deref for Borrowed<T> {
    type Target = CudaSlice<T>;
    fn deref(&self) -> &CudaSlice<T> {
        &self.0
    }
}

impl<T> DerefMut for Borrowed<T> {
    fn deref_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.0
    }
}

impl<T> Drop for Borrowed<T> {
    fn drop(&mut self) {
        // SAFETY: taken once, here; the memory stays PyTorch's.
        release(unsafe { ManuallyDrop::take(&mut self.0) });
    }
}

/// A day's struct that owns `CudaSlice`s (the norms' `Inputs`, the activations'
/// `DeviceInputs`), made here of PyTorch's memory with [`Borrowed::into_slice`]: it says how
/// to let go of every slice it holds.
pub trait Release {
    /// Lets go of every slice with [`release`].
    fn release(self);
}

/// Such a struct, for one call: every slice is released (leaked, never freed) when this
/// drops, on every path.
pub struct Lent<S: Release>(Option<S>);

impl<S: Release> Lent<S> {
    pub fn new(inner: S) -> Self {
        Self(Some(inner))
    }
}

impl<S: Release> Deref for Lent<S> {
    type Target = S;
    fn deref(&self) -> &S {
        self.0.as_ref().expect("taken only by drop")
    }
}

impl<S: Release> DerefMut for Lent<S> {
    fn deref_mut(&mut self) -> &mut S {
        self.0.as_mut().expect("taken only by drop")
    }
}

impl<S: Release> Drop for Lent<S> {
    fn drop(&mut self) {
        if let Some(inner) = self.0.take() {
            inner.release();
        }
    }
}
