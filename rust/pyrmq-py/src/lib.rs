//! `pyrmq._core`: the Python binding of the pyrmq store, remoting codec and gRPC transport.
//! Conversion, error mapping and GIL handling only; the logic lives in `pyrmq-store`,
//! `pyrmq-remoting` and `pyrmq-grpc`.

// Python keyword signatures mirror RocketMQ's message fields; they are long by nature.
#![allow(clippy::too_many_arguments)]
// A panic in the binding is a bug: fail loudly in review, not at run time.
#![deny(clippy::unwrap_used, clippy::expect_used)]

use pyo3::prelude::*;

mod args;
mod compression;
mod errors;
mod gil;
mod grpc;
mod message;
mod received;
mod remoting;
mod store;

/// How this extension was optimized: "release" (opt-level 3 without debug assertions), "debug"
/// (debug assertions on), or "opt-level N" for any other profile.
#[pyfunction]
fn build_profile() -> String {
    let opt = env!("PYRMQ_OPT_LEVEL");
    if cfg!(debug_assertions) {
        "debug".to_owned()
    } else if opt == "3" {
        "release".to_owned()
    } else {
        format!("opt-level {opt}")
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Rust's `log` records go to Python's `logging`, under the `pyrmq_store` logger names.
    let _ = pyo3_log::try_init();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<store::PyMessageStore>()?;
    m.add_class::<store::PyPutResult>()?;
    m.add_class::<store::PyGetResult>()?;
    m.add_class::<message::PyStoredMessage>()?;
    m.add_class::<received::PyMessageExt>()?;
    m.add_class::<grpc::PyGrpcTransport>()?;
    m.add_function(wrap_pyfunction!(grpc::self_signed_certificate, m)?)?;
    m.add_function(wrap_pyfunction!(compression::compress_body, m)?)?;
    m.add_function(wrap_pyfunction!(compression::inflate_body, m)?)?;
    m.add_function(wrap_pyfunction!(message::decode_messages, m)?)?;
    m.add_function(wrap_pyfunction!(received::decode_received, m)?)?;
    m.add_function(wrap_pyfunction!(received::received_extent, m)?)?;
    m.add_function(wrap_pyfunction!(received::received_times, m)?)?;
    m.add_function(wrap_pyfunction!(message::encode_batch, m)?)?;
    m.add_function(wrap_pyfunction!(message::encode_message, m)?)?;
    m.add_function(wrap_pyfunction!(message::java_string_hash, m)?)?;
    m.add_function(wrap_pyfunction!(message::decode_offset_msg_id, m)?)?;
    m.add_function(wrap_pyfunction!(message::message_ids, m)?)?;
    m.add_function(wrap_pyfunction!(message::validate_topic, m)?)?;
    m.add_function(wrap_pyfunction!(message::batch_timer_properties, m)?)?;
    m.add_function(wrap_pyfunction!(remoting::decode_frames, m)?)?;
    m.add_function(wrap_pyfunction!(remoting::encode_command, m)?)?;
    m.add_function(wrap_pyfunction!(build_profile, m)?)?;
    let close_at_exit = wrap_pyfunction!(store::close_open_stores, m)?;
    m.py()
        .import("atexit")?
        .call_method1("register", (close_at_exit,))?;
    Ok(())
}
