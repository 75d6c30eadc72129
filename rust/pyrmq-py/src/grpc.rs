//! `GrpcTransport`: the broker's gRPC listener (`pyrmq-grpc`), its events as tuples for the event
//! loop that handles the calls.

use std::collections::HashSet;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use pyo3::IntoPyObjectExt;
use pyrmq_grpc::{ClientAuth, Config, Event, Tls, TlsError, Transport};

use crate::errors::ConfigError;

/// What [`PyGrpcTransport::take_events`] returns, by the first item of each tuple.
const START: u8 = 0;
const MESSAGE: u8 = 1;
const HALF_CLOSE: u8 = 2;
const CANCEL: u8 = 3;
const DONE: u8 = 4;

#[pyclass(name = "GrpcTransport", module = "pyrmq._core", frozen)]
pub struct PyGrpcTransport {
    inner: Transport,
}

#[pymethods]
impl PyGrpcTransport {
    #[new]
    #[pyo3(signature = (
        host, port, *, service, client_streaming, max_message_bytes, tls_cert=None, tls_key=None,
        tls_client_auth="none", tls_trust=None, tls_plain_too=false,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        host: &str,
        port: u16,
        service: String,
        client_streaming: HashSet<String>,
        max_message_bytes: usize,
        tls_cert: Option<&[u8]>,
        tls_key: Option<&[u8]>,
        tls_client_auth: &str,
        tls_trust: Option<&[u8]>,
        tls_plain_too: bool,
    ) -> PyResult<Self> {
        let tls = match (tls_cert, tls_key) {
            (Some(cert), Some(key)) => {
                let auth = match tls_client_auth {
                    "none" => ClientAuth::None,
                    "optional" => ClientAuth::Optional,
                    "require" => ClientAuth::Require,
                    other => {
                        return Err(ConfigError::new_err(format!(
                            "client auth {other:?} is not none, optional or require"
                        )))
                    }
                };
                Some(Tls::new(cert, key, auth, tls_trust, tls_plain_too).map_err(config_error)?)
            }
            (None, None) => None,
            _ => return Err(ConfigError::new_err("TLS needs a certificate and its key")),
        };
        let config = Config {
            service,
            client_streaming,
            max_message_bytes,
            tls,
        };
        let host = host.to_owned();
        let inner = py.detach(move || Transport::bind(&host, port, config))?;
        Ok(PyGrpcTransport { inner })
    }

    #[getter]
    fn port(&self) -> u16 {
        self.inner.port()
    }

    fn fileno(&self) -> i32 {
        self.inner.fd()
    }

    fn take_events<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        self.inner
            .take_events()
            .into_iter()
            .map(|event| event_tuple(py, event))
            .collect()
    }

    /// Sends messages of the call's answer, written together.
    // PyO3 extracts a list argument as a Vec.
    #[allow(clippy::needless_pass_by_value)]
    fn send(&self, call: u64, messages: Vec<Bound<'_, PyBytes>>) -> bool {
        self.inner
            .send(call, messages.iter().map(PyBytesMethods::as_bytes))
    }

    fn reply(&self, call: u64, message: &[u8]) -> bool {
        self.inner.reply(call, message)
    }

    #[pyo3(signature = (call, code, message, *, notify=false))]
    fn finish(&self, call: u64, code: u32, message: &str, notify: bool) -> bool {
        self.inner.finish(call, code, message, notify)
    }

    fn consumed(&self, call: u64) {
        self.inner.consumed(call);
    }

    fn close(&self, py: Python<'_>) {
        py.detach(|| self.inner.close());
    }
}

/// A self-signed certificate for ``names`` and its key, in PEM (RocketMQ's TLS test mode).
#[pyfunction]
pub fn self_signed_certificate(py: Python<'_>, names: Vec<String>) -> PyResult<(String, String)> {
    py.detach(|| pyrmq_grpc::self_signed(names))
        .map_err(config_error)
}

// PyO3's map_err takes the error by value.
#[allow(clippy::needless_pass_by_value)]
fn config_error(e: TlsError) -> PyErr {
    ConfigError::new_err(format!("TLS: {e}"))
}

fn event_tuple(py: Python<'_>, event: Event) -> PyResult<Bound<'_, PyTuple>> {
    match event {
        Event::Start {
            call,
            method,
            metadata,
            peer,
            timeout,
            request,
        } => {
            let timeout = timeout.map(|t| t.as_secs_f64());
            let request = request.map(|r| PyBytes::new(py, &r));
            PyTuple::new(
                py,
                [
                    START.into_bound_py_any(py)?,
                    call.into_bound_py_any(py)?,
                    method.into_bound_py_any(py)?,
                    metadata.into_bound_py_any(py)?,
                    peer.into_bound_py_any(py)?,
                    timeout.into_bound_py_any(py)?,
                    request.into_bound_py_any(py)?,
                ],
            )
        }
        Event::Message { call, message } => {
            (MESSAGE, call, PyBytes::new(py, &message)).into_pyobject(py)
        }
        Event::HalfClose { call } => (HALF_CLOSE, call).into_pyobject(py),
        Event::Cancel { call } => (CANCEL, call).into_pyobject(py),
        Event::Done { call } => (DONE, call).into_pyobject(py),
    }
}
