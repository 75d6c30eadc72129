//! `StoredMessage`: a decoded record, and the helpers that build Python values from records.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use pyrmq_store::message::{self, Record};
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::OnceLock;

use crate::args::{text_of, Field, Topic};

/// A message as stored: every field of the record, decoded.
///
/// Numbers, the topic and the body are decoded at once; the hosts, the message id and the
/// properties are read from the shared record buffer when asked for, so decoding a pull
/// batch allocates little more than one `bytes` per body.
#[pyclass(name = "StoredMessage", module = "pyrmq._core", frozen)]
pub struct PyStoredMessage {
    /// The buffer holding the record (a whole pull batch, shared by its messages).
    pub(crate) buf: Py<PyBytes>,
    pub(crate) props_start: usize,
    pub(crate) props_len: usize,
    #[pyo3(get)]
    pub(crate) topic: Py<PyString>,
    #[pyo3(get)]
    pub(crate) queue_id: i32,
    #[pyo3(get)]
    pub(crate) queue_offset: i64,
    #[pyo3(get)]
    pub(crate) phy_offset: i64,
    #[pyo3(get)]
    pub(crate) body: Py<PyBytes>,
    #[pyo3(get)]
    pub(crate) flag: i32,
    #[pyo3(get)]
    pub(crate) sys_flag: i32,
    #[pyo3(get)]
    pub(crate) born_timestamp_ms: i64,
    pub(crate) born_host: SocketAddr,
    #[pyo3(get)]
    pub(crate) store_timestamp_ms: i64,
    pub(crate) store_host: SocketAddr,
    #[pyo3(get)]
    pub(crate) reconsume_times: i32,
    #[pyo3(get)]
    pub(crate) prepared_transaction_offset: i64,
    #[pyo3(get)]
    pub(crate) body_crc: u32,
    #[pyo3(get)]
    pub(crate) store_size: u32,
}

impl PyStoredMessage {
    pub(crate) fn from_record(
        py: Python<'_>,
        buf: &Bound<'_, PyBytes>,
        rec: &Record<'_>,
        topic: Py<PyString>,
    ) -> Self {
        let base = buf.as_bytes().as_ptr() as usize;
        Self {
            buf: buf.clone().unbind(),
            props_start: rec.properties.as_ptr() as usize - base,
            props_len: rec.properties.len(),
            topic,
            queue_id: rec.queue_id,
            queue_offset: rec.queue_offset,
            phy_offset: rec.phy_offset,
            body: PyBytes::new(py, rec.body).unbind(),
            flag: rec.flag,
            sys_flag: rec.sys_flag,
            born_timestamp_ms: rec.born_timestamp_ms,
            born_host: rec.born_host,
            store_timestamp_ms: rec.store_timestamp_ms,
            store_host: rec.store_host,
            reconsume_times: rec.reconsume_times,
            prepared_transaction_offset: rec.prepared_transaction_offset,
            body_crc: rec.body_crc,
            store_size: rec.total_size,
        }
    }

    /// Decodes one record held in a buffer of its own.
    pub fn decode(py: Python<'_>, raw: &[u8]) -> PyResult<Self> {
        let buf = PyBytes::new(py, raw);
        let rec = message::decode(buf.as_bytes(), false)
            .map_err(|e| crate::errors::illegal(format!("not a stored message: {e}")))?;
        let topic = PyString::new(py, rec.topic).unbind();
        Ok(Self::from_record(py, &buf, &rec, topic))
    }

    /// A second handle on the same record.
    pub(crate) fn clone_ref(&self, py: Python<'_>) -> Self {
        Self {
            buf: self.buf.clone_ref(py),
            topic: self.topic.clone_ref(py),
            body: self.body.clone_ref(py),
            ..*self
        }
    }

    fn raw_properties<'a>(&self, buf: &'a Bound<'_, PyBytes>) -> &'a [u8] {
        &buf.as_bytes()[self.props_start..self.props_start + self.props_len]
    }

    pub(crate) fn prop(&self, py: Python<'_>, name: &str) -> Option<String> {
        let buf = self.buf.bind(py);
        message::property(self.raw_properties(buf), name).map(str::to_owned)
    }
}

/// Reconsume times, prepared transaction offset and body length end the fixed fields.
const RECONSUME_TIMES_FROM_END_OF_FIXED: usize = 4 + 8 + 4;

#[pymethods]
impl PyStoredMessage {
    /// The message properties, as a new dict on each access.
    #[getter]
    pub(crate) fn properties<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let buf = self.buf.bind(py);
        for (k, v) in message::iter_properties(self.raw_properties(buf)) {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    /// `ip:port` of the producer.
    #[getter]
    pub(crate) fn born_host(&self) -> String {
        self.born_host.to_string()
    }

    /// `ip:port` of the broker that stored the message.
    #[getter]
    pub(crate) fn store_host(&self) -> String {
        self.store_host.to_string()
    }

    /// Offset message id: store host and CommitLog offset, in hex.
    #[getter]
    pub(crate) fn msg_id(&self) -> String {
        message::offset_msg_id(&self.store_host, self.phy_offset)
    }

    /// The `TAGS` property.
    #[getter]
    pub(crate) fn tags(&self, py: Python<'_>) -> Option<String> {
        self.prop(py, message::PROPERTY_TAGS)
    }

    /// The `KEYS` property split on spaces.
    #[getter]
    pub(crate) fn keys(&self, py: Python<'_>) -> Vec<String> {
        self.prop(py, message::PROPERTY_KEYS)
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
    pub(crate) fn uniq_key(&self, py: Python<'_>) -> Option<String> {
        self.prop(py, message::PROPERTY_UNIQ_KEY_SHORT)
    }

    /// One property, or None.
    fn property(&self, py: Python<'_>, name: &str) -> Option<String> {
        self.prop(py, name)
    }

    /// The record byte for byte as stored, copied out of its buffer; with `reconsume_times`,
    /// that field set to it (what a broker serves a message again with).
    #[pyo3(signature = (reconsume_times=None))]
    fn record<'py>(
        &self,
        py: Python<'py>,
        reconsume_times: Option<i32>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let buf = self.buf.bind(py).as_bytes();
        // Properties close the record.
        let end = self.props_start + self.props_len;
        let raw = &buf[end - self.store_size as usize..end];
        match reconsume_times {
            Some(times) if times != self.reconsume_times => {
                let at = message::fixed_len(self.sys_flag) - RECONSUME_TIMES_FROM_END_OF_FIXED;
                PyBytes::new_with(py, raw.len(), |out| {
                    out.copy_from_slice(raw);
                    out[at..at + 4].copy_from_slice(&times.to_be_bytes());
                    Ok(())
                })
            }
            _ => Ok(PyBytes::new(py, raw)),
        }
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "StoredMessage(topic={:?}, queue_id={}, queue_offset={}, phy_offset={}, msg_id={:?})",
            self.topic.bind(py).to_string(),
            self.queue_id,
            self.queue_offset,
            self.phy_offset,
            self.msg_id()
        )
    }
}

/// Decodes records laid end to end (a PULL body, or `GetResult.buffer`).
#[pyfunction]
pub fn decode_messages(
    py: Python<'_>,
    buffer: &Bound<'_, PyAny>,
) -> PyResult<Vec<PyStoredMessage>> {
    if let Ok(bytes) = buffer.cast::<PyBytes>() {
        return decode_all(py, bytes);
    }
    let owned = crate::store::Body::extract(buffer)?;
    decode_all(py, &PyBytes::new(py, owned.as_slice()))
}

pub fn decode_all(py: Python<'_>, buf: &Bound<'_, PyBytes>) -> PyResult<Vec<PyStoredMessage>> {
    let buffer = buf.as_bytes();
    let mut out = Vec::new();
    let mut pos = 0usize;
    // A batch usually holds one topic: share its str.
    let mut last_topic: Option<(&str, Py<PyString>)> = None;
    while pos < buffer.len() {
        let rec = message::decode(&buffer[pos..], false).map_err(|e| {
            crate::errors::illegal(format!("record at byte {pos} of the buffer: {e}"))
        })?;
        pos += rec.total_size as usize;
        let topic = match &last_topic {
            Some((name, s)) if *name == rec.topic => s.clone_ref(py),
            _ => {
                let s = PyString::new(py, rec.topic).unbind();
                last_topic = Some((rec.topic, s.clone_ref(py)));
                s
            }
        };
        out.push(PyStoredMessage::from_record(py, buf, &rec, topic));
    }
    Ok(out)
}

/// Java's `String.hashCode` of `s`: RocketMQ's tag code and index key hash.
#[pyfunction]
pub fn java_string_hash(s: &str) -> i32 {
    message::java_string_hash(s)
}

/// The store host (`ip:port`) and CommitLog offset an offset message id names, as
/// `VIEW_MESSAGE_BY_ID` needs them. Raises `ValueError` for anything else, a producer's
/// `UNIQ_KEY` included.
#[pyfunction]
pub fn decode_offset_msg_id(msg_id: &str) -> PyResult<(String, i64)> {
    message::decode_offset_msg_id(msg_id)
        .map(|(host, offset)| (host.to_string(), offset))
        .ok_or_else(|| {
            pyo3::exceptions::PyValueError::new_err(format!(
                "{msg_id:?} is not an offset message id (32 or 56 hex digits: store host, port, \
                 CommitLog offset)"
            ))
        })
}

/// RocketMQ's topic rule, as the store applies it: 1..=127 characters of `[%|a-zA-Z0-9_-]`, and
/// (unless `internal`) not a topic only the broker writes. Raises `InvalidTopicError` or
/// `SystemTopicError`.
#[pyfunction]
#[pyo3(signature = (topic, internal=false))]
pub fn validate_topic(topic: Topic<'_>, internal: bool) -> PyResult<()> {
    message::check_topic(&topic, internal).map_err(crate::errors::to_py)
}

/// The encoded properties of each message of a client batch `body` that names a timer
/// (`TIMER_...`), for the broker's timer checks; none for a body that is not a batch, which
/// the store refuses when it is put.
#[pyfunction]
pub fn batch_timer_properties(body: &[u8]) -> Vec<String> {
    let Ok(items) = message::decode_client_batch(body) else {
        return Vec::new();
    };
    items
        .iter()
        .filter(|item| item.properties.windows(6).any(|w| w == b"TIMER_"))
        .map(|item| String::from_utf8_lossy(item.properties).into_owned())
        .collect()
}

/// One message checked the way RocketMQ's client checks it before sending (a non-empty body
/// of at most `max_size` bytes; property names non-empty; names and values free of the two
/// separators; encoded properties within their 2-byte length; in a batch, no delay level):
/// its body, its flag and its encoded properties.
fn checked_message<'py>(
    item: &Bound<'py, PyAny>,
    topic: &str,
    max_size: usize,
    in_batch: bool,
) -> PyResult<(Bound<'py, PyBytes>, i32, Vec<u8>)> {
    use crate::errors::{MessageTooLargeError, PropertiesTooLargeError};
    let py = item.py();
    let body = item
        .getattr(pyo3::intern!(py, "body"))?
        .cast_into::<PyBytes>()?;
    let body_len = body.as_bytes().len();
    if body_len == 0 {
        return Err(crate::errors::illegal(format!(
            "the body of a message to {topic} is empty"
        )));
    }
    if body_len > max_size {
        return Err(MessageTooLargeError::new_err(format!(
            "the body of a message to {topic} is {body_len} bytes, above the limit of \
             {max_size}"
        )));
    }
    let Field(flag) = item.getattr(pyo3::intern!(py, "flag"))?.extract()?;
    let mut props = Vec::new();
    let dict = item.getattr(pyo3::intern!(py, "properties"))?;
    for (k, v) in dict.cast::<PyDict>()?.iter() {
        let name = text_of(k.cast::<PyString>()?, "a property name")?;
        let value = text_of(v.cast::<PyString>()?, "a property value")?;
        let bad = |s: &str| s.bytes().any(|b| b == 1 || b == 2);
        if name.is_empty() || bad(name) || bad(value) {
            return Err(crate::errors::illegal(format!(
                "property {name:?} of a message to {topic}: names must be non-empty and \
                 names and values must not contain \\x01 or \\x02"
            )));
        }
        if in_batch && name == message::PROPERTY_DELAY {
            return Err(crate::errors::illegal(format!(
                "a batch to {topic} must not carry a delay level"
            )));
        }
        if !props.is_empty() {
            props.push(message::PROPERTY_SEPARATOR);
        }
        props.extend_from_slice(name.as_bytes());
        props.push(message::NAME_VALUE_SEPARATOR);
        props.extend_from_slice(value.as_bytes());
    }
    if props.len() > i16::MAX as usize {
        return Err(PropertiesTooLargeError::new_err(format!(
            "the properties of a message to {topic} are {} bytes encoded, above {}",
            props.len(),
            i16::MAX
        )));
    }
    Ok((body, flag, props))
}

/// Checks one message object (`body` bytes, `flag` int, `properties` dict of str) as
/// [`encode_batch`] checks each of its messages, delay level allowed, and returns its
/// properties encoded (`name\x01value`, joined by `\x02`).
#[pyfunction]
pub fn encode_message(
    py: Python<'_>,
    message: &Bound<'_, PyAny>,
    topic: Topic<'_>,
    max_size: usize,
) -> PyResult<Py<PyString>> {
    let (_, _, props) = checked_message(message, &topic, max_size, false)?;
    // Built from str keys and values and ASCII separators, so always UTF-8.
    let text = std::str::from_utf8(&props).map_err(|e| {
        crate::errors::illegal(format!("properties of a message to {}: {e}", &*topic))
    })?;
    Ok(PyString::new(py, text).unbind())
}

/// Encodes a batch body (SEND_BATCH_MESSAGE) from message objects with `body` (bytes),
/// `flag` (int) and `properties` (dict of str), each checked as [`encode_message`] checks
/// one, plus no delay level, and the whole body at most `max_size` bytes.
#[pyfunction]
pub fn encode_batch(
    py: Python<'_>,
    messages: &Bound<'_, PyAny>,
    topic: Topic<'_>,
    max_size: usize,
) -> PyResult<Py<PyBytes>> {
    let topic: &str = &topic;
    // Bodies are borrowed, not copied, until the one final encode.
    let mut parts = Vec::new();
    let mut total = 0usize;
    for item in messages.try_iter()? {
        let (body, flag, props) = checked_message(&item?, topic, max_size, true)?;
        total += 20 + body.as_bytes().len() + 2 + props.len();
        if total > max_size {
            return Err(crate::errors::MessageTooLargeError::new_err(format!(
                "the batch to {topic} is {total} bytes or more, above the limit of {max_size}"
            )));
        }
        parts.push((body, flag, props));
    }
    let items: Vec<message::BatchItem<'_>> = parts
        .iter()
        .map(|(body, flag, props)| message::BatchItem {
            flag: *flag,
            body: body.as_bytes(),
            properties: props,
        })
        .collect();
    Ok(PyBytes::new(py, &message::encode_client_batch(&items)).unbind())
}

/// The 16-bit counter that ends every producer message id of this process. It starts at a
/// random value (RandomState's keys are random per process), so that even two processes whose
/// ids share everything else do not begin with the same ids.
fn id_counter() -> &'static AtomicU16 {
    static COUNTER: OnceLock<AtomicU16> = OnceLock::new();
    COUNTER.get_or_init(|| AtomicU16::new(RandomState::new().build_hasher().finish() as u16))
}

/// `count` producer message ids (`UNIQ_KEY`): `head` (the id's bytes before the counter) in
/// uppercase hex, then the next `count` values of the process-wide counter, which wraps.
#[pyfunction]
pub fn message_ids<'py>(
    py: Python<'py>,
    head: &[u8],
    count: usize,
) -> PyResult<Bound<'py, PyList>> {
    // No 4 MiB batch holds more messages than this.
    const MOST: usize = 1 << 22;
    if count > MOST {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "count must be at most {MOST}, got {count}"
        )));
    }
    // Reserves the counter values at once; a batch above 65,536 wraps as the counter does.
    let first = id_counter().fetch_add(count as u16, Ordering::Relaxed);
    let mut prefix = String::with_capacity(head.len() * 2);
    message::push_hex_upper(&mut prefix, head);
    let mut id = String::with_capacity(prefix.len() + 4);
    PyList::new(
        py,
        (0..count).map(|i| {
            id.clear();
            id.push_str(&prefix);
            message::push_hex_upper(&mut id, &first.wrapping_add(i as u16).to_be_bytes());
            PyString::new(py, &id)
        }),
    )
}
