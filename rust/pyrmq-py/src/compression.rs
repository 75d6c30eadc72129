//! Message body compression for Python: the producer's compressions and every reader's
//! inflation, without the GIL.

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyrmq_remoting::{BodyError, Compression};

use crate::{errors, gil};

/// `(compressed body, sys flag bits)` of `body` compressed with `compression` (`"zlib"`,
/// `"lz4"` or `"zstd"`, RocketMQ's `compressType` names); `level` applies to zlib.
#[pyfunction]
pub fn compress_body<'py>(
    py: Python<'py>,
    body: &[u8],
    compression: &str,
    level: i32,
) -> PyResult<(Bound<'py, PyBytes>, i32)> {
    let Some(kind) = Compression::from_name(compression) else {
        return Err(errors::ConfigError::new_err(format!(
            "unknown compression {compression:?}: zlib, lz4 or zstd"
        )));
    };
    let packed = py.detach(|| kind.compress(body, level));
    Ok((PyBytes::new(py, &packed), kind.sys_flag()))
}

/// `body`, compressed as `sys_flag` says, inflated; MessageBodyError when it does not inflate,
/// names an unknown compression, or inflates past `limit` bytes.
#[pyfunction]
#[pyo3(signature = (body, sys_flag, limit=None))]
pub fn inflate_body<'py>(
    py: Python<'py>,
    body: &[u8],
    sys_flag: i32,
    limit: Option<usize>,
) -> PyResult<Bound<'py, PyBytes>> {
    let out = inflate(py, body, sys_flag, limit.unwrap_or(usize::MAX))?;
    Ok(PyBytes::new(py, &out))
}

/// The inflated body, the GIL released meanwhile.
pub fn inflate(py: Python<'_>, body: &[u8], sys_flag: i32, limit: usize) -> PyResult<Vec<u8>> {
    gil::detach(
        py,
        || pyrmq_remoting::inflate_body(body, sys_flag, limit),
        to_py,
    )
}

/// A body error as the Python exception.
// Taken by value so that it plugs into `map_err` directly.
#[allow(clippy::needless_pass_by_value)]
pub fn to_py(err: BodyError) -> PyErr {
    errors::MessageBodyError::new_err(err.to_string())
}
