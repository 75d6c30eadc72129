//! `MessageExt`: a message as a consumer receives it, built straight from a PULL body.
//!
//! A consumer touches a handful of fields of every message; wrapping each `StoredMessage` in
//! a Python object cost more than decoding it. This class carries the record, the broker it
//! came from and the topic to show, and answers the client API's field names itself.

use std::sync::atomic::{AtomicI32, Ordering};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyType};
use pyrmq_store::message;

use crate::compression;
use crate::message::PyStoredMessage;

const RETRY_PREFIX: &str = "%RETRY%";
/// Where a retried message keeps the topic it was first sent to.
const PROPERTY_RETRY_TOPIC: &str = "RETRY_TOPIC";
const SYSFLAG_COMPRESSED: i32 = 0x1;
/// Properties a Java consumer adds to each pulled message: the queue's offsets as the pull's
/// answer gave them (`PullAPIWrapper.processPullResult`).
const PROPERTY_MIN_OFFSET: &str = "MIN_OFFSET";
const PROPERTY_MAX_OFFSET: &str = "MAX_OFFSET";

/// A received message: every stored field, the producer's id, and the broker it came from.
///
/// A message redelivered from the group's retry topic shows its original topic; `stored`
/// gives the record as stored.
#[pyclass(name = "MessageExt", module = "pyrmq._core", frozen)]
pub struct PyMessageExt {
    m: PyStoredMessage,
    #[pyo3(get)]
    broker_name: Py<PyString>,
    #[pyo3(get)]
    topic: Py<PyString>,
    /// The topic it was pulled from, without the consumer's namespace.
    queue_topic: Py<PyString>,
    inflated: PyOnceLock<Py<PyBytes>>,
    /// Deliveries an orderly consumer repeated in memory, which the broker never counted.
    local_retries: AtomicI32,
    /// The queue's min and max offsets when it was pulled, shown as `MIN_OFFSET` and
    /// `MAX_OFFSET` properties.
    queue_offsets: Option<(i64, i64)>,
}

impl PyMessageExt {
    /// `namespace`: the consumer's, left out of the topic shown (as RocketMQ's clients show
    /// `TopicA` for `ns%TopicA`).
    fn new(
        py: Python<'_>,
        m: PyStoredMessage,
        broker_name: Py<PyString>,
        namespace: Option<&str>,
        queue_offsets: Option<(i64, i64)>,
    ) -> Self {
        let stored = m.topic.bind(py);
        let mut topic = match stored.to_str() {
            Ok(t) if t.starts_with(RETRY_PREFIX) => m
                .prop(py, PROPERTY_RETRY_TOPIC)
                .map_or_else(|| m.topic.clone_ref(py), |t| PyString::new(py, &t).unbind()),
            _ => m.topic.clone_ref(py),
        };
        let mut queue_topic = m.topic.clone_ref(py);
        if let Some(ns) = namespace.filter(|ns| !ns.is_empty()) {
            let without = |t: &Py<PyString>| {
                t.bind(py)
                    .to_str()
                    .ok()
                    .and_then(|t| without_namespace(t, ns))
                    .map(|bare| PyString::new(py, &bare).unbind())
            };
            if let Some(bare) = without(&topic) {
                topic = bare;
            }
            if let Some(bare) = without(&m.topic) {
                queue_topic = bare;
            }
        }
        Self {
            m,
            broker_name,
            topic,
            queue_topic,
            inflated: PyOnceLock::new(),
            local_retries: AtomicI32::new(0),
            queue_offsets,
        }
    }
}

/// `topic` without `ns` (kept through a retry or dead-letter prefix), or None when it is not
/// in that namespace.
fn without_namespace(topic: &str, ns: &str) -> Option<String> {
    let (prefix, bare) = ["%RETRY%", "%DLQ%"]
        .iter()
        .find_map(|p| topic.strip_prefix(p).map(|rest| (*p, rest)))
        .unwrap_or(("", topic));
    let name = bare.strip_prefix(ns)?.strip_prefix('%')?;
    Some(format!("{prefix}{name}"))
}

#[pymethods]
impl PyMessageExt {
    /// Wraps a stored message received from `broker_name`.
    #[classmethod]
    #[pyo3(signature = (stored, broker_name, namespace=None))]
    fn from_stored(
        _cls: &Bound<'_, PyType>,
        stored: &Bound<'_, PyStoredMessage>,
        broker_name: &Bound<'_, PyString>,
        namespace: Option<&str>,
    ) -> Self {
        let py = stored.py();
        Self::new(
            py,
            stored.get().clone_ref(py),
            broker_name.clone().unbind(),
            namespace,
            None,
        )
    }

    /// Wraps the messages of one pull.
    #[classmethod]
    #[pyo3(signature = (stored, broker_name, namespace=None))]
    fn from_batch(
        _cls: &Bound<'_, PyType>,
        stored: &Bound<'_, PyAny>,
        broker_name: &Bound<'_, PyString>,
        namespace: Option<&str>,
    ) -> PyResult<Vec<Self>> {
        let py = stored.py();
        stored
            .try_iter()?
            .map(|m| {
                let m = m?;
                let m = m.cast::<PyStoredMessage>()?;
                Ok(Self::new(
                    py,
                    m.get().clone_ref(py),
                    broker_name.clone().unbind(),
                    namespace,
                    None,
                ))
            })
            .collect()
    }

    /// The record as stored (its `topic` is where it is stored: a retry topic for a retry).
    #[getter]
    fn stored(&self, py: Python<'_>) -> PyStoredMessage {
        self.m.clone_ref(py)
    }

    /// The body, inflated if the producer compressed it (zlib, LZ4 or Zstandard);
    /// MessageBodyError if it does not inflate.
    #[getter]
    fn body(&self, py: Python<'_>) -> PyResult<Py<PyBytes>> {
        if self.m.sys_flag & SYSFLAG_COMPRESSED == 0 {
            return Ok(self.m.body.clone_ref(py));
        }
        self.inflated
            .get_or_try_init(py, || {
                let body = self.m.body.bind(py).as_bytes();
                let out = compression::inflate(py, body, self.m.sys_flag, usize::MAX)?;
                Ok::<_, PyErr>(PyBytes::new(py, &out).unbind())
            })
            .map(|b| b.clone_ref(py))
    }

    #[getter]
    fn tags(&self, py: Python<'_>) -> Option<String> {
        self.m.tags(py)
    }

    /// The keys, separated by spaces ("" if none), as the official client gives them.
    #[getter]
    fn keys(&self, py: Python<'_>) -> String {
        self.m.keys(py).join(" ")
    }

    /// The producer's message id (`UNIQ_KEY`), or the offset id when there is none.
    #[getter]
    fn id(&self, py: Python<'_>) -> String {
        self.m.uniq_key(py).unwrap_or_else(|| self.m.msg_id())
    }

    /// Same as `id`, under the official client's name.
    #[getter]
    fn msg_id(&self, py: Python<'_>) -> String {
        self.id(py)
    }

    /// Store host and CommitLog offset, in hex.
    #[getter]
    fn offset_msg_id(&self) -> String {
        self.m.msg_id()
    }

    #[getter]
    fn queue_id(&self) -> i32 {
        self.m.queue_id
    }

    #[getter]
    fn queue_offset(&self) -> i64 {
        self.m.queue_offset
    }

    /// The queue it was pulled from: (stored topic, broker, queue id), the topic without the
    /// consumer's namespace.
    #[getter]
    fn message_queue<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        py.import("pyrmq.client.message")?
            .getattr("MessageQueue")?
            .call1((
                self.queue_topic.bind(py),
                self.broker_name.bind(py),
                self.m.queue_id,
            ))
    }

    /// Deliveries before this one: the broker's count, plus the retries a consumer made in
    /// memory (orderly ones, and a send-back that failed).
    #[getter]
    fn reconsume_times(&self) -> i32 {
        self.m
            .reconsume_times
            .saturating_add(self.local_retries.load(Ordering::Relaxed))
    }

    /// Counts a retry a consumer makes in memory; returns the new `reconsume_times`.
    fn count_local_retry(&self) -> i32 {
        let local = self
            .local_retries
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        self.m.reconsume_times.saturating_add(local)
    }

    #[getter]
    fn store_size(&self) -> u32 {
        self.m.store_size
    }

    #[getter]
    fn born_timestamp(&self) -> i64 {
        self.m.born_timestamp_ms
    }

    #[getter]
    fn store_timestamp(&self) -> i64 {
        self.m.store_timestamp_ms
    }

    #[getter]
    fn born_host(&self) -> String {
        self.m.born_host()
    }

    #[getter]
    fn store_host(&self) -> String {
        self.m.store_host()
    }

    #[getter]
    fn commit_log_offset(&self) -> i64 {
        self.m.phy_offset
    }

    #[getter]
    fn prepared_transaction_offset(&self) -> i64 {
        self.m.prepared_transaction_offset
    }

    #[getter]
    fn flag(&self) -> i32 {
        self.m.flag
    }

    /// The record's sys flag (compression, transaction type, host kinds).
    #[getter]
    fn sys_flag(&self) -> i32 {
        self.m.sys_flag
    }

    #[getter]
    fn delay_time_level(&self, py: Python<'_>) -> i64 {
        self.m
            .prop(py, message::PROPERTY_DELAY)
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Every property, as a new dict on each access.
    #[getter]
    fn properties<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = self.m.properties(py)?;
        if let Some((min, max)) = self.queue_offsets {
            d.set_item(PROPERTY_MIN_OFFSET, min.to_string())?;
            d.set_item(PROPERTY_MAX_OFFSET, max.to_string())?;
        }
        Ok(d)
    }

    /// One property (a `str` or `bytes` name), or None.
    fn get_property(&self, py: Python<'_>, prop: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
        let name = match prop.cast::<PyBytes>() {
            Ok(b) => String::from_utf8_lossy(b.as_bytes()).into_owned(),
            Err(_) => prop.extract::<String>()?,
        };
        if let Some((min, max)) = self.queue_offsets {
            match name.as_str() {
                PROPERTY_MIN_OFFSET => return Ok(Some(min.to_string())),
                PROPERTY_MAX_OFFSET => return Ok(Some(max.to_string())),
                _ => {}
            }
        }
        Ok(self.m.prop(py, &name))
    }

    fn __getitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
        self.get_property(py, key)
    }

    fn __str__(&self, py: Python<'_>) -> PyResult<String> {
        let body = self.body(py)?;
        Ok(String::from_utf8_lossy(body.bind(py).as_bytes()).into_owned())
    }

    fn __bytes__(&self, py: Python<'_>) -> PyResult<Py<PyBytes>> {
        self.body(py)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let body = self.body(py)?;
        Ok(format!(
            "MessageExt(topic={}, id={}, tags={}, queue={}:{}@{}, body=<{} bytes>)",
            self.topic.bind(py).repr()?,
            PyString::new(py, &self.id(py)).repr()?,
            self.tags(py).map_or_else(
                || Ok("None".to_owned()),
                |t| PyString::new(py, &t).repr().map(|r| r.to_string())
            )?,
            self.broker_name.bind(py),
            self.m.queue_id,
            self.m.queue_offset,
            body.bind(py).as_bytes().len()
        ))
    }
}

/// Decodes a PULL body from `broker_name` into a list of received messages; with the
/// answer's `min_offset` and `max_offset`, each shows them as properties, as Java's consumers
/// add them.
///
/// The messages are kept out of the cycle collector: they refer only to strings and bytes,
/// so no cycle can pass through one, and a consumer with a backlog holds thousands in flight
/// that every collection would otherwise traverse (and promote, until full collections).
#[pyfunction]
#[pyo3(signature = (buffer, broker_name, namespace=None, min_offset=None, max_offset=None))]
pub fn decode_received<'py>(
    py: Python<'py>,
    buffer: &Bound<'py, PyAny>,
    broker_name: &Bound<'py, PyString>,
    namespace: Option<&str>,
    min_offset: Option<i64>,
    max_offset: Option<i64>,
) -> PyResult<Bound<'py, PyList>> {
    let stored = crate::message::decode_messages(py, buffer)?;
    let queue_offsets = min_offset.zip(max_offset);
    let mut received = Vec::with_capacity(stored.len());
    for m in stored {
        let ext = PyMessageExt::new(
            py,
            m,
            broker_name.clone().unbind(),
            namespace,
            queue_offsets,
        );
        let msg = Bound::new(py, ext)?;
        // SAFETY: `msg` is a live object of a GC type, tracked since its allocation;
        // untracking only takes it off the collector's lists (its dealloc copes with that).
        unsafe { pyo3::ffi::PyObject_GC_UnTrack(msg.as_ptr().cast()) };
        received.push(msg);
    }
    PyList::new(py, received)
}

/// What a ProcessQueue needs of a pulled batch, in one pass instead of a property read per
/// message: `(first queue offset, last queue offset, whether each offset follows the one
/// before, total store size)`. None for an empty list or one holding anything but
/// `MessageExt`.
#[pyfunction]
pub fn received_extent(msgs: &Bound<'_, PyList>) -> Option<(i64, i64, bool, u64)> {
    let mut extent: Option<(i64, i64, bool, u64)> = None;
    for item in msgs.iter() {
        let m = &item.cast::<PyMessageExt>().ok()?.get().m;
        extent = Some(match extent {
            None => (
                m.queue_offset,
                m.queue_offset,
                true,
                u64::from(m.store_size),
            ),
            Some((first, last, consecutive, size)) => (
                first,
                m.queue_offset,
                consecutive && last.checked_add(1) == Some(m.queue_offset),
                size + u64::from(m.store_size),
            ),
        });
    }
    extent
}

/// Distinct values with how often each occurs, in first-seen order.
type Counts = Vec<(i64, u32)>;

/// Adds one occurrence of `value` to `counts`. A batch holds few distinct millisecond
/// timestamps, mostly in order, so a scan from the newest finds one at once.
fn count_into(counts: &mut Counts, value: i64) {
    match counts.iter_mut().rev().find(|(v, _)| *v == value) {
        Some((_, n)) => *n += 1,
        None => counts.push((value, 1)),
    }
}

/// What latency accounting needs of a received batch, in one pass instead of three attribute
/// reads per message: `(born timestamps, store timestamps, body bytes)`, each timestamp list
/// holding `(ms, messages)` per distinct value in first-seen order, and body bytes counted
/// inflated. None for an empty list or one holding anything but `MessageExt`.
#[pyfunction]
pub fn received_times(msgs: &Bound<'_, PyList>) -> PyResult<Option<(Counts, Counts, u64)>> {
    let py = msgs.py();
    let mut borns = Vec::new();
    let mut stores = Vec::new();
    let mut bytes = 0u64;
    for item in msgs.iter() {
        let Ok(ext) = item.cast::<PyMessageExt>() else {
            return Ok(None);
        };
        let ext = ext.get();
        let m = &ext.m;
        count_into(&mut borns, m.born_timestamp_ms);
        count_into(&mut stores, m.store_timestamp_ms);
        let body_len = if m.sys_flag & SYSFLAG_COMPRESSED == 0 {
            m.body.bind(py).as_bytes().len()
        } else {
            ext.body(py)?.bind(py).as_bytes().len()
        };
        bytes += body_len as u64;
    }
    Ok((!borns.is_empty()).then_some((borns, stores, bytes)))
}

#[cfg(test)]
mod tests {
    use super::without_namespace;

    #[test]
    fn a_topic_loses_its_namespace_and_keeps_its_prefix() {
        assert_eq!(
            without_namespace("ns%TopicA", "ns").as_deref(),
            Some("TopicA")
        );
        assert_eq!(
            without_namespace("%RETRY%ns%GID", "ns").as_deref(),
            Some("%RETRY%GID")
        );
        assert_eq!(
            without_namespace("%DLQ%ns%GID", "ns").as_deref(),
            Some("%DLQ%GID")
        );
        assert_eq!(without_namespace("nsx%TopicA", "ns"), None);
        assert_eq!(without_namespace("TopicA", "ns"), None);
        assert_eq!(without_namespace("ns", "ns"), None);
    }
}
