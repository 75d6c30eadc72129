//! `StoredMessage`: a decoded record, and the helpers that build Python values from records.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use pyrmq_store::message::{self, Record};

/// A message as stored: every field of the record, decoded.
#[pyclass(name = "StoredMessage", module = "pyrmq._core", frozen)]
pub struct PyStoredMessage {
    #[pyo3(get)]
    topic: String,
    #[pyo3(get)]
    queue_id: i32,
    #[pyo3(get)]
    queue_offset: i64,
    #[pyo3(get)]
    phy_offset: i64,
    #[pyo3(get)]
    body: Py<PyBytes>,
    #[pyo3(get)]
    flag: i32,
    #[pyo3(get)]
    sys_flag: i32,
    #[pyo3(get)]
    born_timestamp_ms: i64,
    #[pyo3(get)]
    born_host: String,
    #[pyo3(get)]
    store_timestamp_ms: i64,
    #[pyo3(get)]
    store_host: String,
    #[pyo3(get)]
    reconsume_times: i32,
    #[pyo3(get)]
    prepared_transaction_offset: i64,
    properties: Vec<(String, String)>,
    #[pyo3(get)]
    body_crc: u32,
    #[pyo3(get)]
    store_size: u32,
    #[pyo3(get)]
    msg_id: String,
}

impl PyStoredMessage {
    pub fn from_record(py: Python<'_>, rec: &Record<'_>) -> Self {
        Self {
            topic: rec.topic.to_owned(),
            queue_id: rec.queue_id,
            queue_offset: rec.queue_offset,
            phy_offset: rec.phy_offset,
            body: PyBytes::new(py, rec.body).unbind(),
            flag: rec.flag,
            sys_flag: rec.sys_flag,
            born_timestamp_ms: rec.born_timestamp_ms,
            born_host: rec.born_host.to_string(),
            store_timestamp_ms: rec.store_timestamp_ms,
            store_host: rec.store_host.to_string(),
            reconsume_times: rec.reconsume_times,
            prepared_transaction_offset: rec.prepared_transaction_offset,
            properties: message::iter_properties(rec.properties)
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            body_crc: rec.body_crc,
            store_size: rec.total_size,
            msg_id: rec.offset_msg_id(),
        }
    }

    pub fn decode(py: Python<'_>, raw: &[u8]) -> PyResult<Self> {
        let rec = message::decode(raw, false)
            .map_err(|e| crate::errors::illegal(format!("not a stored message: {e}")))?;
        Ok(Self::from_record(py, &rec))
    }

    fn prop(&self, name: &str) -> Option<String> {
        // The last occurrence wins, as when Java parses the property string into a map.
        self.properties
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }
}

#[pymethods]
impl PyStoredMessage {
    /// The message properties, as a new dict on each access.
    #[getter]
    fn properties<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in &self.properties {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    /// The `TAGS` property.
    #[getter]
    fn tags(&self) -> Option<String> {
        self.prop(message::PROPERTY_TAGS)
    }

    /// The `KEYS` property split on spaces.
    #[getter]
    fn keys(&self) -> Vec<String> {
        self.prop(message::PROPERTY_KEYS)
            .map(|k| {
                k.split(' ')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The producer's message id (`UNIQ_KEY`).
    #[getter]
    fn uniq_key(&self) -> Option<String> {
        self.prop(message::PROPERTY_UNIQ_KEY_SHORT)
    }

    fn __repr__(&self) -> String {
        format!(
            "StoredMessage(topic={:?}, queue_id={}, queue_offset={}, phy_offset={}, msg_id={:?})",
            self.topic, self.queue_id, self.queue_offset, self.phy_offset, self.msg_id
        )
    }
}

/// Decodes records laid end to end (a PULL body, or `GetResult.buffer`).
#[pyfunction]
pub fn decode_messages(
    py: Python<'_>,
    buffer: &Bound<'_, PyAny>,
) -> PyResult<Vec<PyStoredMessage>> {
    let owned = crate::store::Body::extract(buffer)?;
    decode_all(py, owned.as_slice())
}

pub fn decode_all(py: Python<'_>, buffer: &[u8]) -> PyResult<Vec<PyStoredMessage>> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < buffer.len() {
        let rec = message::decode(&buffer[pos..], false).map_err(|e| {
            crate::errors::illegal(format!("record at byte {pos} of the buffer: {e}"))
        })?;
        pos += rec.total_size as usize;
        out.push(PyStoredMessage::from_record(py, &rec));
    }
    Ok(out)
}

/// Java's `String.hashCode` of `s`: RocketMQ's tag code and index key hash.
#[pyfunction]
pub fn java_string_hash(s: &str) -> i32 {
    message::java_string_hash(s)
}

/// RocketMQ's topic rule, as the store applies it: 1..=127 characters of `[%|a-zA-Z0-9_-]`, and
/// (unless `internal`) not one of the broker's own topics. Raises `InvalidTopicError` or
/// `SystemTopicError`.
#[pyfunction]
#[pyo3(signature = (topic, internal=false))]
pub fn validate_topic(topic: &str, internal: bool) -> PyResult<()> {
    use pyrmq_store::StoreError;
    message::validate_topic(topic).map_err(|reason| {
        crate::errors::to_py(StoreError::InvalidTopic {
            topic: topic.to_owned(),
            reason,
        })
    })?;
    if !internal && message::is_system_topic(topic) {
        return Err(crate::errors::to_py(StoreError::SystemTopic(
            topic.to_owned(),
        )));
    }
    Ok(())
}
