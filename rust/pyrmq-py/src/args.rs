//! Argument types whose conversion failures are pyrmq's errors rather than Python's
//! `OverflowError` and `UnicodeEncodeError`: a queue id no `int` of a record holds, text with a
//! lone surrogate (which UTF-8 cannot encode), a message field out of its record's range. A
//! wrong type stays a `TypeError`.

use std::ops::Deref;

use pyo3::exceptions::{PyOverflowError, PyUnicodeEncodeError};
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::errors::{self, InvalidQueueIdError, InvalidTopicError};

/// A topic name; text UTF-8 cannot encode is an illegal topic name.
#[derive(Clone, Copy)]
pub struct Topic<'a>(&'a str);

/// Text stored in, or matched against, a message: tags, keys, hosts, property strings.
#[derive(Clone, Copy)]
pub struct Text<'a>(&'a str);

/// A queue id; one outside `i32` is an illegal queue id.
#[derive(Clone, Copy)]
pub struct QueueId(pub i32);

/// An integer field of a stored record (flag, sys flag, times, reconsume count); one outside
/// the field's range is an illegal message.
#[derive(Clone, Copy)]
pub struct Field<T>(pub T);

/// An offset or time bound of a query: one beyond `i64` is clamped to it, as it lies past
/// every queue's end or every store time anyway.
#[derive(Clone, Copy)]
pub struct Bound64(pub i64);

fn is_unencodable(py: Python<'_>, e: &PyErr) -> bool {
    e.is_instance_of::<PyUnicodeEncodeError>(py)
}

fn extract_str<'a>(obj: Borrowed<'a, '_, PyAny>, err: fn(String) -> PyErr) -> PyResult<&'a str> {
    <&'a str>::extract(obj).map_err(|e| {
        if is_unencodable(obj.py(), &e) {
            err(format!("{e}"))
        } else {
            e
        }
    })
}

impl<'a> FromPyObject<'a, '_> for Topic<'a> {
    type Error = PyErr;
    fn extract(obj: Borrowed<'a, '_, PyAny>) -> PyResult<Self> {
        extract_str(obj, |m| {
            InvalidTopicError::new_err(format!("the topic must be encodable text: {m}"))
        })
        .map(Topic)
    }
}

impl<'a> FromPyObject<'a, '_> for Text<'a> {
    type Error = PyErr;
    fn extract(obj: Borrowed<'a, '_, PyAny>) -> PyResult<Self> {
        extract_str(obj, |m| {
            errors::illegal(format!("text must be encodable: {m}"))
        })
        .map(Text)
    }
}

impl Deref for Topic<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        self.0
    }
}

impl Deref for Text<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        self.0
    }
}

/// The UTF-8 of a `str` already known to be one; a lone surrogate is an illegal message.
pub fn text_of<'a>(s: &'a Bound<'_, PyString>, what: &str) -> PyResult<&'a str> {
    s.to_str().map_err(|e| {
        if is_unencodable(s.py(), &e) {
            errors::illegal(format!("{what} must be encodable text: {e}"))
        } else {
            e
        }
    })
}

impl FromPyObject<'_, '_> for QueueId {
    type Error = PyErr;
    fn extract(obj: Borrowed<'_, '_, PyAny>) -> PyResult<Self> {
        i32::extract(obj).map(QueueId).map_err(|e| {
            if e.is_instance_of::<PyOverflowError>(obj.py()) {
                InvalidQueueIdError::new_err(format!("queue id {} is outside a 32-bit int", &*obj))
            } else {
                e
            }
        })
    }
}

impl<'a, 'py, T> FromPyObject<'a, 'py> for Field<T>
where
    T: FromPyObject<'a, 'py, Error = PyErr>,
{
    type Error = PyErr;
    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        T::extract(obj).map(Field).map_err(|e| {
            if e.is_instance_of::<PyOverflowError>(obj.py()) {
                errors::illegal(format!("{} is out of range for its record field", &*obj))
            } else {
                e
            }
        })
    }
}

impl FromPyObject<'_, '_> for Bound64 {
    type Error = PyErr;
    fn extract(obj: Borrowed<'_, '_, PyAny>) -> PyResult<Self> {
        match i64::extract(obj) {
            Ok(v) => Ok(Bound64(v)),
            Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => {
                let negative = obj.lt(0i64)?;
                Ok(Bound64(if negative { i64::MIN } else { i64::MAX }))
            }
            Err(e) => Err(e),
        }
    }
}
