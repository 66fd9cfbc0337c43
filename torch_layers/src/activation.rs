//! (being written)

use pyo3::prelude::*;

/// The layer's state on one device.
#[derive(Default)]
pub struct State {}

/// Adds the layer's functions to the module.
pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
