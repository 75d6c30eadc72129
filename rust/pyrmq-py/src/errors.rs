//! Rust errors -> the Python exceptions defined in `pyrmq.errors`: one exhaustive match per
//! error type.

use pyo3::prelude::*;
use pyrmq_remoting::DecodeError;
use pyrmq_store::StoreError;

pyo3::import_exception!(pyrmq.errors, ConfigError);
pyo3::import_exception!(pyrmq.errors, StoreClosedError);
pyo3::import_exception!(pyrmq.errors, CorruptRecordError);
pyo3::import_exception!(pyrmq.errors, DiskFullError);
pyo3::import_exception!(pyrmq.errors, StoreIOError);
pyo3::import_exception!(pyrmq.errors, MessageIllegalError);
pyo3::import_exception!(pyrmq.errors, InvalidTopicError);
pyo3::import_exception!(pyrmq.errors, MessageTooLargeError);
pyo3::import_exception!(pyrmq.errors, PropertiesTooLargeError);
pyo3::import_exception!(pyrmq.errors, InvalidQueueIdError);
pyo3::import_exception!(pyrmq.errors, SystemTopicError);
pyo3::import_exception!(pyrmq.errors, FrameDecodeError);
pyo3::import_exception!(pyrmq.errors, StoreReadOnlyError);
pyo3::import_exception!(pyrmq.errors, ReplicationError);
pyo3::import_exception!(pyrmq.errors, MessageBodyError);

// Taken by value so that it plugs into `map_err` directly.
#[allow(clippy::needless_pass_by_value)]
pub fn to_py(err: StoreError) -> PyErr {
    let msg = err.to_string();
    match err {
        StoreError::InvalidTopic { .. } => InvalidTopicError::new_err(msg),
        StoreError::SystemTopic(_) => SystemTopicError::new_err(msg),
        StoreError::MessageTooLarge { .. } | StoreError::GroupTooLarge { .. } => {
            MessageTooLargeError::new_err(msg)
        }
        StoreError::PropertiesTooLarge { .. } => PropertiesTooLargeError::new_err(msg),
        StoreError::InvalidQueueId { .. } => InvalidQueueIdError::new_err(msg),
        StoreError::IllegalMessage(_) => MessageIllegalError::new_err(msg),
        StoreError::Corrupt { phy_offset, .. } => Python::attach(|py| {
            let e = CorruptRecordError::new_err(msg);
            if let Err(set) = e.value(py).setattr("phy_offset", phy_offset) {
                return set;
            }
            e
        }),
        StoreError::DiskFull(_) => DiskFullError::new_err(msg),
        StoreError::Closed | StoreError::Forked => StoreClosedError::new_err(msg),
        StoreError::Locked(_) | StoreError::Io { .. } => StoreIOError::new_err(msg),
        StoreError::Config(_) => ConfigError::new_err(msg),
        StoreError::ReadOnly => StoreReadOnlyError::new_err(msg),
        StoreError::Replication { .. } => ReplicationError::new_err(msg),
    }
}

/// A bad argument from Python: nothing was written.
pub fn illegal(msg: impl Into<String>) -> PyErr {
    MessageIllegalError::new_err(msg.into())
}

/// A malformed frame: the connection has lost its framing.
// Taken by value so that it plugs into `map_err` directly.
#[allow(clippy::needless_pass_by_value)]
pub fn frame_decode_to_py(err: DecodeError) -> PyErr {
    let msg = err.to_string();
    match err {
        DecodeError::FrameTooLarge { .. }
        | DecodeError::FrameTooShort { .. }
        | DecodeError::HeaderLengthExceedsFrame { .. }
        | DecodeError::UnknownSerializeType(_)
        | DecodeError::Json(_)
        | DecodeError::Binary(_) => FrameDecodeError::new_err(msg),
    }
}
