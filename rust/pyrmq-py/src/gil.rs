//! The one helper that releases the GIL around Rust work and maps its errors.

use pyo3::prelude::*;
use pyrmq_store::StoreResult;

use crate::errors;

/// Runs `f` without the GIL. Inputs must already be owned or borrowed from immutable objects.
pub fn run<T, F>(py: Python<'_>, f: F) -> PyResult<T>
where
    F: FnOnce() -> StoreResult<T> + Send,
    T: Send,
{
    py.detach(f).map_err(errors::to_py)
}

/// Runs `f` without the GIL and maps its error with `map_err` once the GIL is back.
pub fn detach<T, E, F>(py: Python<'_>, f: F, map_err: fn(E) -> PyErr) -> PyResult<T>
where
    F: FnOnce() -> Result<T, E> + Send,
    T: Send,
    E: Send,
{
    py.detach(f).map_err(map_err)
}
