//! The days' errors as Python exceptions: what the caller asked for wrongly (a size a kernel
//! does not take, a refused version, too little memory) is a `ValueError`; a machine that
//! cannot run the kernels (no driver, no GPU, no NVRTC) and anything that fails on the GPU is
//! a `RuntimeError`. Each carries the days' one-line message.

use common::error::{Refused, SetupError, UsageError};
use pyo3::PyErr;
use pyo3::exceptions::{PyRuntimeError, PyValueError};

/// The Python exception for a day's error.
pub fn to_py(e: anyhow::Error) -> PyErr {
    let text = format!("{e:#}");
    if e.downcast_ref::<UsageError>().is_some() || e.downcast_ref::<Refused>().is_some() {
        PyValueError::new_err(text)
    } else if e.downcast_ref::<SetupError>().is_some() {
        PyRuntimeError::new_err(text)
    } else {
        PyRuntimeError::new_err(format!("the GPU work failed: {text}"))
    }
}

/// A `ValueError` with this message.
pub fn value_error(text: impl Into<String>) -> PyErr {
    PyValueError::new_err(text.into())
}
