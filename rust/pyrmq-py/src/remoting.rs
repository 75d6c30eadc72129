//! `decode_frames` and `encode_command`: the remoting codec of `pyrmq-remoting` for Python.
//!
//! One call handles every whole frame in a buffer, with the GIL released while frames are split
//! and headers parsed; only building the result tuples needs the GIL.

use std::collections::BTreeMap;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use pyrmq_remoting::{self as remoting, Header, SerializeType, DEFAULT_MAX_FRAME_BYTES};

use crate::{errors, gil};

// The text signature above spells the default out for stubs and help().
const _: () = assert!(DEFAULT_MAX_FRAME_BYTES == 16 * 1024 * 1024);

/// Below this, decoding takes a few microseconds: releasing the GIL for it would hand the
/// interpreter to any thread waiting for it (a consume thread, say) and stall the event loop
/// until that thread gives it back.
const DETACH_FROM_BYTES: usize = 1 << 20;

/// Input bytes: a `bytes` object is read in place; any other buffer is copied once.
enum Input<'py> {
    Bytes(Bound<'py, PyBytes>),
    Copied(Vec<u8>),
}

impl Input<'_> {
    fn extract<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Input<'py>> {
        if let Ok(b) = obj.cast::<PyBytes>() {
            return Ok(Input::Bytes(b.clone()));
        }
        let buf = pyo3::buffer::PyBuffer::<u8>::get(obj).map_err(|_| {
            PyTypeError::new_err(format!(
                "{what} must be bytes or a byte buffer, not {}",
                obj.get_type()
                    .name()
                    .map_or_else(|_| "?".to_owned(), |n| n.to_string())
            ))
        })?;
        Ok(Input::Copied(buf.to_vec(obj.py())?))
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Input::Bytes(b) => b.as_bytes(),
            Input::Copied(v) => v,
        }
    }
}

/// Decodes every whole frame at the start of `buffer`.
///
/// Returns `(commands, consumed)`: one tuple `(code, language, version, opaque, flag, remark,
/// ext_fields, body, serialize_type)` per frame, and the bytes those frames took. An incomplete
/// trailing frame is not consumed. A malformed frame raises `FrameDecodeError`.
#[pyfunction]
#[pyo3(
    signature = (buffer, max_frame_bytes = DEFAULT_MAX_FRAME_BYTES),
    text_signature = "(buffer, max_frame_bytes=16777216)"
)]
pub fn decode_frames<'py>(
    py: Python<'py>,
    buffer: &Bound<'py, PyAny>,
    max_frame_bytes: usize,
) -> PyResult<(Vec<Bound<'py, PyTuple>>, usize)> {
    let input = Input::extract(buffer, "buffer")?;
    let bytes = input.as_slice();
    let decode = || remoting::decode_frames(bytes, max_frame_bytes);
    let (frames, consumed) = if bytes.len() >= DETACH_FROM_BYTES {
        gil::detach(py, decode, errors::frame_decode_to_py)?
    } else {
        decode().map_err(errors::frame_decode_to_py)?
    };
    let mut out = Vec::with_capacity(frames.len());
    for frame in frames {
        let Header {
            code,
            language,
            version,
            opaque,
            flag,
            remark,
            ext_fields,
        } = frame.header;
        let tuple = (
            code,
            language,
            version,
            opaque,
            flag,
            remark,
            ext_fields,
            PyBytes::new(py, frame.body),
            frame.serialize_type.as_byte(),
        )
            .into_pyobject(py)?;
        out.push(tuple);
    }
    Ok((out, consumed))
}

/// Encodes a whole frame: length field, header-length word, header and body.
///
/// JSON headers take the shape a Java 4.9.7 broker answers with (sorted keys, every extFields
/// value a string). Raises `ValueError` when a value does not fit the chosen serialize type.
#[pyfunction]
pub fn encode_command<'py>(
    py: Python<'py>,
    code: i32,
    language: String,
    version: i32,
    opaque: i32,
    flag: i32,
    remark: Option<String>,
    ext_fields: BTreeMap<String, String>,
    body: &Bound<'py, PyAny>,
    serialize_type: u8,
) -> PyResult<Bound<'py, PyBytes>> {
    let serialize_type = SerializeType::from_byte(serialize_type).ok_or_else(|| {
        PyValueError::new_err(format!(
            "unknown serialize type {serialize_type} (0 = JSON, 1 = ROCKETMQ)"
        ))
    })?;
    let header = Header {
        code,
        language,
        version,
        opaque,
        flag,
        remark,
        ext_fields,
    };
    let body = Input::extract(body, "body")?;
    let body = body.as_slice();
    let prefix = remoting::encode_frame_prefix(&header, serialize_type, body.len())
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    PyBytes::new_with(py, prefix.len() + body.len(), |out| {
        let (head, tail) = out.split_at_mut(prefix.len());
        head.copy_from_slice(&prefix);
        tail.copy_from_slice(body);
        Ok(())
    })
}
