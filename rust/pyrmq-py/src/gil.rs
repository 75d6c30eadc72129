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
    detach(py, f, errors::to_py)
}

/// Runs `f` without the GIL and maps its error with `map_err` once the GIL is back.
///
/// The store logs through Python's `logging`; an exception raised there on this thread (a
/// KeyboardInterrupt delivered while a handler ran, a failing filter) is left set, and is
/// raised here rather than returned alongside a result, which Python refuses as a
/// `SystemError`. The work itself is done.
pub fn detach<T, E, F>(py: Python<'_>, f: F, map_err: fn(E) -> PyErr) -> PyResult<T>
where
    F: FnOnce() -> Result<T, E> + Send,
    T: Send,
    E: Send,
{
    let out = py.detach(f).map_err(map_err);
    match PyErr::take(py) {
        Some(raised) => Err(raised),
        None => out,
    }
}
