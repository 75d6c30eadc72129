//! `MessageStore` pyclass: conversions around `pyrmq_store::MessageStore`.

use std::net::{SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use pyrmq_store::config::{parse_delay_levels, parse_delete_when, BrokerRole};
use pyrmq_store::message::{self, BatchItem, MessageInput};
use pyrmq_store::store::{normalize_host, PutEntry, PutOutcome, PutStatus};
use pyrmq_store::{FlushDiskType, GetRequest, MessageStore, StoreConfig, StoreError, TimeBoundary};

use crate::args::{text_of, Bound64, Field, QueueId, Text, Topic};
use crate::errors::{self, ConfigError};
use crate::gil;
use crate::message::PyStoredMessage;

/// The settings (StoreConfig field names) an open store changes.
const RETENTION_KEYS: [&str; 5] = [
    "file_reserved_time_hours",
    "delete_when",
    "disk_max_used_space_ratio",
    "disk_space_clean_forcibly_ratio",
    "disk_space_warning_level_ratio",
];

/// Copying a batch into its buffer releases the GIL above this many bytes.
const DETACHED_COPY_BYTES: usize = 64 * 1024;

fn config_from_dict(path: PathBuf, dict: Option<&Bound<'_, PyDict>>) -> PyResult<StoreConfig> {
    let mut c = StoreConfig {
        store_path_root_dir: path,
        ..StoreConfig::default()
    };
    if let Some(dict) = dict {
        apply_settings(&mut c, dict)?;
    }
    Ok(c)
}

/// Sets the fields `dict` names (StoreConfig field names) on `c`; a ConfigError names every
/// key that was unknown or had a bad value.
fn apply_settings(c: &mut StoreConfig, dict: &Bound<'_, PyDict>) -> PyResult<()> {
    let mut problems = Vec::new();
    for (k, v) in dict.iter() {
        let key: String = k.extract()?;
        let r: PyResult<()> = (|| {
            match key.as_str() {
                "store_path_root_dir" => {}
                "store_path_commit_log" => {
                    let s: String = v.extract()?;
                    c.store_path_commit_log = (!s.is_empty()).then(|| PathBuf::from(s));
                }
                "mapped_file_size_commit_log" => c.mapped_file_size_commit_log = v.extract()?,
                "mapped_file_size_consume_queue" => {
                    c.mapped_file_size_consume_queue = v.extract()?;
                }
                "flush_disk_type" => {
                    c.flush_disk_type =
                        FlushDiskType::parse(&v.extract::<String>()?).map_err(errors::to_py)?;
                }
                "broker_role" => {
                    c.broker_role =
                        BrokerRole::parse(&v.extract::<String>()?).map_err(errors::to_py)?;
                }
                "flush_interval_commit_log_ms" => c.flush_interval_commit_log_ms = v.extract()?,
                "flush_interval_consume_queue_ms" => {
                    c.flush_interval_consume_queue_ms = v.extract()?;
                }
                "sync_flush_timeout_ms" => c.sync_flush_timeout_ms = v.extract()?,
                "file_reserved_time_hours" => c.file_reserved_time_hours = v.extract()?,
                "delete_when" => {
                    let s: String = v.extract()?;
                    c.delete_when_hours = parse_delete_when(&s)
                        .map_err(|_| PyValueError::new_err(format!("bad delete_when {s:?}")))?;
                }
                "clean_resource_interval_ms" => c.clean_resource_interval_ms = v.extract()?,
                "disk_max_used_space_ratio" => c.disk_max_used_space_ratio = v.extract()?,
                "disk_space_clean_forcibly_ratio" => {
                    c.disk_space_clean_forcibly_ratio = v.extract()?;
                }
                "disk_space_warning_level_ratio" => {
                    c.disk_space_warning_level_ratio = v.extract()?;
                }
                "max_message_size" => c.max_message_size_bytes = v.extract()?,
                "max_transfer_bytes_on_message_in_memory" => {
                    c.max_transfer_bytes_on_message_in_memory = v.extract()?;
                }
                "max_transfer_count_on_message_in_memory" => {
                    c.max_transfer_count_on_message_in_memory = v.extract()?;
                }
                "max_transfer_bytes_on_message_in_disk" => {
                    c.max_transfer_bytes_on_message_in_disk = v.extract()?;
                }
                "max_transfer_count_on_message_in_disk" => {
                    c.max_transfer_count_on_message_in_disk = v.extract()?;
                }
                "access_message_in_memory_max_ratio" => {
                    c.access_message_in_memory_max_ratio = v.extract()?;
                }
                "message_index_enable" => c.message_index_enable = v.extract()?,
                "max_hash_slot_num" => c.max_hash_slot_num = v.extract()?,
                "max_index_num" => c.max_index_num = v.extract()?,
                "message_delay_level" => {
                    c.message_delay_level_ms =
                        parse_delay_levels(&v.extract::<String>()?).map_err(errors::to_py)?;
                }
                "check_crc_on_recover" => c.check_crc_on_recover = v.extract()?,
                "store_host" => {
                    let s: String = v.extract()?;
                    c.store_host = s.parse::<SocketAddrV4>().map_err(|_| {
                        PyValueError::new_err(format!("store_host must be ipv4:port, not {s:?}"))
                    })?;
                }
                "max_queue_nums_per_topic" => c.max_queue_nums_per_topic = v.extract()?,
                "background_services" => c.background_services = v.extract()?,
                other => {
                    return Err(PyValueError::new_err(format!(
                        "unknown store setting {other:?}"
                    )))
                }
            }
            Ok(())
        })();
        if let Err(e) = r {
            problems.push(format!("{key}: {e}"));
        }
    }
    if !problems.is_empty() {
        return Err(ConfigError::new_err(problems.join("; ")));
    }
    Ok(())
}

/// A put's born time: the caller's, else now.
fn born_or_now(born_timestamp_ms: Option<Field<i64>>) -> i64 {
    born_timestamp_ms.map_or_else(pyrmq_store::clock::now_ms, |b| b.0)
}

fn parse_host(s: Option<&str>) -> PyResult<SocketAddr> {
    match s {
        None => Ok(SocketAddr::from(([127, 0, 0, 1], 0))),
        Some(s) => s
            .parse::<SocketAddr>()
            .map(normalize_host)
            .map_err(|_| errors::illegal(format!("born_host must be ip:port, not {s:?}"))),
    }
}

fn check_property_text(s: &str, what: &str) -> PyResult<()> {
    if s.bytes()
        .any(|b| b == message::NAME_VALUE_SEPARATOR || b == message::PROPERTY_SEPARATOR)
    {
        return Err(errors::illegal(format!(
            "{what} {s:?} contains a \\x01 or \\x02 separator"
        )));
    }
    Ok(())
}

/// Encodes user properties plus TAGS and KEYS into the record's property string, in one buffer
/// straight from the Python strings.
fn encode_properties(
    properties: Option<&Bound<'_, PyAny>>,
    tags: Option<&str>,
    keys: Option<&Bound<'_, PyAny>>,
) -> PyResult<Vec<u8>> {
    // Room for a tag and a few keys without growing; a bigger dict grows it as it goes.
    let mut out: Vec<u8> = Vec::with_capacity(128);
    if let Some(p) = properties {
        if let Ok(s) = p.cast::<PyString>() {
            out.extend_from_slice(text_of(s, "the properties")?.as_bytes());
        } else if let Ok(d) = p.cast::<PyDict>() {
            for (k, v) in d.iter() {
                let (Ok(k), Ok(v)) = (k.cast::<PyString>(), v.cast::<PyString>()) else {
                    return Err(errors::illegal("property names and values must be str"));
                };
                let (k, v) = (
                    text_of(k, "a property name")?,
                    text_of(v, "a property value")?,
                );
                check_property_text(k, "property name")?;
                check_property_text(v, "property value")?;
                if k.is_empty() {
                    return Err(errors::illegal("property names must not be empty"));
                }
                message::push_property(&mut out, k, v);
            }
        } else {
            return Err(errors::illegal(
                "properties must be a dict or an encoded str",
            ));
        }
    }
    if let Some(t) = tags {
        check_property_text(t, "tags")?;
        message::push_property(&mut out, message::PROPERTY_TAGS, t);
    }
    if let Some(k) = keys {
        if let Ok(s) = k.cast::<PyString>() {
            let joined = text_of(s, "the keys")?;
            check_property_text(joined, "keys")?;
            message::push_property(&mut out, message::PROPERTY_KEYS, joined);
        } else {
            let not_keys = || errors::illegal("keys must be a str or a sequence of str");
            let mut joined = String::new();
            for part in k.try_iter().map_err(|_| not_keys())? {
                let part = part?;
                let part = part.cast::<PyString>().map_err(|_| not_keys())?;
                if !joined.is_empty() {
                    joined.push(' ');
                }
                joined.push_str(text_of(part, "a key")?);
            }
            check_property_text(&joined, "keys")?;
            message::push_property(&mut out, message::PROPERTY_KEYS, &joined);
        }
    }
    Ok(out)
}

static PUT_STATUS: PyOnceLock<Vec<Py<PyAny>>> = PyOnceLock::new();
static GET_STATUS: PyOnceLock<Vec<Py<PyAny>>> = PyOnceLock::new();

/// The `pyrmq.store.status` enum member for `value`, built once per process.
fn status_member(
    py: Python<'_>,
    cell: &PyOnceLock<Vec<Py<PyAny>>>,
    class: &str,
    value: u8,
) -> PyResult<Py<PyAny>> {
    let members = cell.get_or_try_init(py, || {
        let cls = py.import("pyrmq.store.status")?.getattr(class)?;
        let all: Vec<Py<PyAny>> = cls
            .try_iter()?
            .map(|m| m.map(Bound::unbind))
            .collect::<PyResult<_>>()?;
        Ok::<_, PyErr>(all)
    })?;
    members
        .get(value as usize)
        .map(|m| m.clone_ref(py))
        .ok_or_else(|| PyValueError::new_err(format!("no {class} with value {value}")))
}

/// A body as bytes: borrowed from an immutable `bytes`, else copied once from the buffer.
pub enum Body<'py> {
    Borrowed(Bound<'py, PyBytes>),
    Owned(Vec<u8>),
}

impl Body<'_> {
    pub fn extract<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Body<'py>> {
        if let Ok(b) = obj.cast::<PyBytes>() {
            return Ok(Body::Borrowed(b.clone()));
        }
        if let Ok(buf) = pyo3::buffer::PyBuffer::<u8>::get(obj) {
            return Ok(Body::Owned(buf.to_vec(obj.py())?));
        }
        // Any other buffer (array('i'), ctypes arrays, ...): its bytes, as bytes(obj) gives them.
        let view = pyo3::types::PyMemoryView::from(obj)
            .map_err(|_| errors::illegal("expected bytes or a buffer"))?;
        Ok(Body::Borrowed(
            view.call_method0(pyo3::intern!(obj.py(), "tobytes"))?
                .cast_into::<PyBytes>()?,
        ))
    }

    pub fn as_slice(&self) -> &[u8] {
        match self {
            Body::Borrowed(b) => b.as_bytes(),
            Body::Owned(v) => v,
        }
    }
}

/// The result of an append.
#[pyclass(name = "PutResult", module = "pyrmq._core", frozen)]
pub struct PyPutResult {
    status: u8,
    /// As the store returned them: split into lists only when asked.
    entries: Vec<PutEntry>,
    #[pyo3(get)]
    store_timestamp_ms: i64,
    #[pyo3(get)]
    wrote_bytes: u64,
    /// CommitLog offset just past the group: durable once the flushed offset reaches it.
    #[pyo3(get)]
    end_offset: u64,
    host: SocketAddr,
}

impl PyMessageStore {
    /// The store, for queries that would answer from a closed store's stale state.
    fn live(&self) -> PyResult<&MessageStore> {
        self.store.check_usable().map_err(errors::to_py)?;
        Ok(&self.store)
    }
}

#[pymethods]
impl PyPutResult {
    /// A `PutStatus`: PUT_OK, or FLUSH_DISK_TIMEOUT (stored, fsync late).
    #[getter]
    fn status(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        status_member(py, &PUT_STATUS, "PutStatus", self.status)
    }
    #[getter]
    fn count(&self) -> usize {
        self.entries.len()
    }
    #[getter]
    fn phy_offsets(&self) -> Vec<i64> {
        self.entries.iter().map(|e| e.phy_offset).collect()
    }
    #[getter]
    fn queue_offsets(&self) -> Vec<i64> {
        self.entries.iter().map(|e| e.queue_offset).collect()
    }
    #[getter]
    fn queue_ids(&self) -> Vec<i32> {
        self.entries.iter().map(|e| e.queue_id).collect()
    }
    #[getter]
    fn phy_offset(&self) -> i64 {
        self.entries[0].phy_offset
    }
    #[getter]
    fn queue_offset(&self) -> i64 {
        self.entries[0].queue_offset
    }
    #[getter]
    fn queue_id(&self) -> i32 {
        self.entries[0].queue_id
    }
    #[getter]
    fn store_host(&self) -> String {
        self.host.to_string()
    }
    /// Offset message ids (store host + CommitLog offset), one per message.
    #[getter]
    fn msg_ids(&self) -> Vec<String> {
        self.entries
            .iter()
            .map(|e| message::offset_msg_id(&self.host, e.phy_offset))
            .collect()
    }
    /// The offset message ids joined by commas, as the answer to a batch send carries them.
    #[getter]
    fn msg_ids_joined(&self) -> String {
        let mut out = String::with_capacity(self.entries.len() * 57);
        for (i, e) in self.entries.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            message::push_offset_msg_id(&mut out, &self.host, e.phy_offset);
        }
        out
    }
    #[getter]
    fn msg_id(&self) -> String {
        message::offset_msg_id(&self.host, self.entries[0].phy_offset)
    }
    fn __repr__(&self) -> String {
        format!(
            "PutResult(status={}, count={}, phy_offset={}, queue_offset={})",
            if self.status == 0 {
                "PUT_OK"
            } else {
                "FLUSH_DISK_TIMEOUT"
            },
            self.entries.len(),
            self.entries[0].phy_offset,
            self.entries[0].queue_offset
        )
    }
}

impl From<PutOutcome> for PyPutResult {
    fn from(o: PutOutcome) -> Self {
        Self {
            status: match o.status {
                PutStatus::PutOk => 0,
                PutStatus::FlushDiskTimeout => 1,
            },
            entries: o.entries,
            store_timestamp_ms: o.store_timestamp_ms,
            wrote_bytes: o.wrote_bytes,
            end_offset: o.end_offset,
            host: o.store_host,
        }
    }
}

/// Messages read from one queue: their records end to end in one buffer.
#[pyclass(name = "GetResult", module = "pyrmq._core", frozen)]
pub struct PyGetResult {
    status: u8,
    #[pyo3(get)]
    next_begin_offset: u64,
    #[pyo3(get)]
    min_offset: u64,
    #[pyo3(get)]
    max_offset: u64,
    /// The records, end to end: exactly a PULL_MESSAGE answer body.
    #[pyo3(get)]
    buffer: Py<PyBytes>,
    #[pyo3(get)]
    queue_offsets: Vec<u64>,
    #[pyo3(get)]
    phy_offsets: Vec<u64>,
    #[pyo3(get)]
    sizes: Vec<u32>,
    #[pyo3(get)]
    corrupt_offsets: Vec<u64>,
    #[pyo3(get)]
    in_disk: bool,
}

#[pymethods]
impl PyGetResult {
    /// A `GetMessageStatus`.
    #[getter]
    fn status(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        status_member(py, &GET_STATUS, "GetMessageStatus", self.status)
    }
    /// One read-only memoryview per record, sharing the buffer.
    fn views<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let whole = pyo3::types::PyMemoryView::from(self.buffer.bind(py).as_any())?;
        let mut at = 0usize;
        self.sizes
            .iter()
            .map(|size| {
                let end = at + *size as usize;
                let slice = slice(py, at, end)?;
                at = end;
                whole.get_item(slice)
            })
            .collect()
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let status = self.status(py)?;
        Ok(format!(
            "GetResult(status={}, messages={}, next_begin_offset={})",
            status.bind(py).getattr("name")?,
            self.sizes.len(),
            self.next_begin_offset
        ))
    }
    #[getter]
    fn message_count(&self) -> usize {
        self.sizes.len()
    }
    /// Decodes every record of the buffer.
    fn messages(&self, py: Python<'_>) -> PyResult<Vec<PyStoredMessage>> {
        crate::message::decode_all(py, self.buffer.bind(py))
    }
    fn __len__(&self) -> usize {
        self.sizes.len()
    }
}

/// `slice(start, stop)`. pyo3's `PySlice::new` leaks its bounds: it hands `PySlice_New` new
/// ints, which that function does not take over, so every view of an offset past the small-int
/// cache leaked one.
fn slice(py: Python<'_>, start: usize, stop: usize) -> PyResult<Bound<'_, PyAny>> {
    let (start, stop) = (start.into_pyobject(py)?, stop.into_pyobject(py)?);
    // SAFETY: both bounds are live ints we own for the call; PySlice_New takes references of
    // its own and returns a new reference, or null with an exception set.
    unsafe {
        let raw = pyo3::ffi::PySlice_New(start.as_ptr(), stop.as_ptr(), std::ptr::null_mut());
        Bound::from_owned_ptr_or_err(py, raw)
    }
}

/// Parses a subscription expression into tag codes; `None` means every message.
/// Appends without the GIL; `wait_for_flush=False` is [`MessageStore::put_nowait`].
fn put(
    py: Python<'_>,
    store: &MessageStore,
    inputs: &[MessageInput<'_>],
    internal: bool,
    wait_for_flush: bool,
) -> PyResult<PyPutResult> {
    if wait_for_flush {
        gil::run(py, || store.put(inputs, internal)).map(Into::into)
    } else {
        gil::run(py, || store.put_nowait(inputs, internal)).map(Into::into)
    }
}

/// A count or offset argument: negative is a `ValueError` naming `name`; one past what `T`
/// holds saturates, as these are upper bounds or offsets past any queue's end.
fn limit<T: TryFrom<i64> + Bounded>(name: &str, value: i64) -> PyResult<T> {
    if value < 0 {
        return Err(PyValueError::new_err(format!(
            "{name} must not be negative, got {value}"
        )));
    }
    Ok(T::try_from(value).unwrap_or(T::MAX))
}

trait Bounded {
    const MAX: Self;
}

impl Bounded for u32 {
    const MAX: Self = u32::MAX;
}

impl Bounded for u64 {
    const MAX: Self = u64::MAX;
}

impl Bounded for usize {
    const MAX: Self = usize::MAX;
}

fn tag_codes(tags: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<i64>>> {
    let Some(t) = tags else { return Ok(None) };
    let names: Vec<String> = if let Ok(s) = t.cast::<PyString>() {
        // As RocketMQ: "*" means every tag only as the whole expression; within one it is a tag.
        let s = text_of(s, "the tags")?.trim();
        let names: Vec<String> = s
            .split("||")
            .map(|p| p.trim().to_owned())
            .filter(|p| !p.is_empty())
            .collect();
        if names.is_empty() || s == "*" {
            return Ok(None);
        }
        names
    } else {
        t.extract()
            .map_err(|_| errors::illegal("tags must be a str or a sequence of str"))?
    };
    Ok(Some(
        names.iter().map(|n| message::tags_code(Some(n))).collect(),
    ))
}

#[pyclass(name = "MessageStore", module = "pyrmq._core", subclass, frozen)]
pub struct PyMessageStore {
    store: Arc<MessageStore>,
}

/// Stores open in this process, for [`close_open_stores`].
static OPEN_STORES: Mutex<Vec<Weak<MessageStore>>> = Mutex::new(Vec::new());

fn open_stores() -> std::sync::MutexGuard<'static, Vec<Weak<MessageStore>>> {
    OPEN_STORES.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Closes every store still open: registered with `atexit`, so that it runs while the store's
/// threads can still take the GIL to log. Once the interpreter finalizes they cannot, and a
/// close then would wait for them for good.
#[pyfunction]
#[pyo3(name = "_close_open_stores")]
pub(crate) fn close_open_stores(py: Python<'_>) {
    let stores: Vec<Arc<MessageStore>> = std::mem::take(&mut *open_stores())
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    for store in stores {
        if let Err(e) = py.detach(|| store.close()) {
            log::error!("closing a store at exit: {e}");
        }
    }
}

impl Drop for PyMessageStore {
    /// A store collected unclosed is closed with the GIL released: its threads may be waiting
    /// for the GIL to log, and closing waits for them.
    fn drop(&mut self) {
        if self.store.is_closed() {
            return;
        }
        let store = &self.store;
        Python::attach(|py| {
            if let Err(e) = py.detach(|| store.close()) {
                log::error!("closing a store that was not closed: {e}");
            }
        });
    }
}

#[pymethods]
impl PyMessageStore {
    /// Opens the store rooted at `path`; `config` maps StoreConfig field names to values.
    #[new]
    #[pyo3(signature = (path, config=None))]
    fn new(py: Python<'_>, path: PathBuf, config: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let config = config_from_dict(path, config)?;
        let store = Arc::new(gil::run(py, move || MessageStore::open(config))?);
        let mut open = open_stores();
        open.retain(|w| w.strong_count() > 0);
        open.push(Arc::downgrade(&store));
        Ok(Self { store })
    }

    #[pyo3(
        signature = (topic, body, *, queue_id=QueueId(0), tags=None, keys=None, properties=None,
            flag=Field(0), sys_flag=Field(0), born_timestamp_ms=None, born_host=None,
            reconsume_times=Field(0), prepared_transaction_offset=Field(0), internal=false,
            wait_for_flush=true),
        text_signature = "($self, topic, body, *, queue_id=0, tags=None, keys=None, \
            properties=None, flag=0, sys_flag=0, born_timestamp_ms=None, \
            born_host=None, reconsume_times=0, prepared_transaction_offset=0, \
            internal=False, wait_for_flush=True)"
    )]
    fn put(
        &self,
        py: Python<'_>,
        topic: Topic<'_>,
        body: &Bound<'_, PyAny>,
        queue_id: QueueId,
        tags: Option<Text<'_>>,
        keys: Option<&Bound<'_, PyAny>>,
        properties: Option<&Bound<'_, PyAny>>,
        flag: Field<i32>,
        sys_flag: Field<i32>,
        born_timestamp_ms: Option<Field<i64>>,
        born_host: Option<Text<'_>>,
        reconsume_times: Field<i32>,
        prepared_transaction_offset: Field<i64>,
        internal: bool,
        wait_for_flush: bool,
    ) -> PyResult<PyPutResult> {
        let body = Body::extract(body)?;
        let props = encode_properties(properties, tags.as_deref(), keys)?;
        let input = MessageInput {
            topic: &topic,
            queue_id: queue_id.0,
            flag: flag.0,
            body: body.as_slice(),
            properties: &props,
            sys_flag: sys_flag.0,
            born_timestamp_ms: born_or_now(born_timestamp_ms),
            born_host: parse_host(born_host.as_deref())?,
            reconsume_times: reconsume_times.0,
            prepared_transaction_offset: prepared_transaction_offset.0,
        };
        put(
            py,
            &self.store,
            std::slice::from_ref(&input),
            internal,
            wait_for_flush,
        )
    }

    /// Appends `bodies` to one queue as one group, all sharing tags, keys and properties.
    #[pyo3(
        signature = (topic, bodies, *, queue_id=QueueId(0), tags=None, keys=None, properties=None,
            flag=Field(0), sys_flag=Field(0), born_timestamp_ms=None, born_host=None,
            internal=false, wait_for_flush=true),
        text_signature = "($self, topic, bodies, *, queue_id=0, tags=None, keys=None, \
            properties=None, flag=0, sys_flag=0, born_timestamp_ms=None, \
            born_host=None, internal=False, wait_for_flush=True)"
    )]
    fn put_batch(
        &self,
        py: Python<'_>,
        topic: Topic<'_>,
        bodies: &Bound<'_, PyAny>,
        queue_id: QueueId,
        tags: Option<Text<'_>>,
        keys: Option<&Bound<'_, PyAny>>,
        properties: Option<&Bound<'_, PyAny>>,
        flag: Field<i32>,
        sys_flag: Field<i32>,
        born_timestamp_ms: Option<Field<i64>>,
        born_host: Option<Text<'_>>,
        internal: bool,
        wait_for_flush: bool,
    ) -> PyResult<PyPutResult> {
        let props = encode_properties(properties, tags.as_deref(), keys)?;
        let born_host = parse_host(born_host.as_deref())?;
        let born = born_or_now(born_timestamp_ms);
        let owned: Vec<Body<'_>> = if let Ok(list) = bodies.cast::<PyList>() {
            let mut owned = Vec::with_capacity(list.len());
            for b in list.iter() {
                owned.push(Body::extract(&b)?);
            }
            owned
        } else {
            bodies
                .try_iter()?
                .map(|b| Body::extract(&b?))
                .collect::<PyResult<_>>()?
        };
        if owned.is_empty() {
            return Err(errors::illegal("put_batch needs at least one body"));
        }
        let inputs: Vec<MessageInput<'_>> = owned
            .iter()
            .map(|b| MessageInput {
                topic: &topic,
                queue_id: queue_id.0,
                flag: flag.0,
                body: b.as_slice(),
                properties: &props,
                sys_flag: sys_flag.0,
                born_timestamp_ms: born,
                born_host,
                reconsume_times: 0,
                prepared_transaction_offset: 0,
            })
            .collect();
        put(py, &self.store, &inputs, internal, wait_for_flush)
    }

    /// Appends a client batch body (RocketMQ's SEND_BATCH_MESSAGE encoding) to one queue;
    /// `batch_properties` (the request's encoded properties) follow each message's own.
    #[pyo3(
        signature = (topic, batch_body, *, queue_id=QueueId(0), sys_flag=Field(0),
            born_timestamp_ms=None, born_host=None, reconsume_times=Field(0), internal=false,
            wait_for_flush=true, batch_properties=None),
        text_signature = "($self, topic, batch_body, *, queue_id=0, sys_flag=0, \
            born_timestamp_ms=None, born_host=None, reconsume_times=0, \
            internal=False, wait_for_flush=True, batch_properties=None)"
    )]
    fn put_encoded_batch(
        &self,
        py: Python<'_>,
        topic: Topic<'_>,
        batch_body: &Bound<'_, PyAny>,
        queue_id: QueueId,
        sys_flag: Field<i32>,
        born_timestamp_ms: Option<Field<i64>>,
        born_host: Option<Text<'_>>,
        reconsume_times: Field<i32>,
        internal: bool,
        wait_for_flush: bool,
        batch_properties: Option<Text<'_>>,
    ) -> PyResult<PyPutResult> {
        let batch_body = Body::extract(batch_body)?;
        // RocketMQ's checks of a client batch: no larger than one message may be, and never
        // part of a transaction (its halves and ends are single messages).
        let max = self.store.config().max_message_size_bytes;
        if batch_body.as_slice().len() as u64 > u64::from(max) {
            return Err(errors::to_py(StoreError::MessageTooLarge {
                size_bytes: batch_body.as_slice().len() as u64,
                max_bytes: u64::from(max),
            }));
        }
        if sys_flag.0 & message::SYSFLAG_TRANSACTION_MASK != 0 {
            return Err(errors::illegal(
                "a batch cannot be a transaction's message: its sys_flag has transaction bits",
            ));
        }
        let items = message::decode_client_batch(batch_body.as_slice())
            .map_err(|e| errors::illegal(format!("malformed batch body: {e}")))?;
        let born_host = parse_host(born_host.as_deref())?;
        let born = born_or_now(born_timestamp_ms);
        // As RocketMQ's batch encoder: the request's properties after each message's own,
        // joined by a separator unless the message's end with one.
        let extra = batch_properties.as_deref().unwrap_or("").as_bytes();
        let merged: Vec<Vec<u8>> = if extra.is_empty() {
            Vec::new()
        } else {
            items
                .iter()
                .map(|it| {
                    let own = it.properties;
                    let mut out = Vec::with_capacity(own.len() + 1 + extra.len());
                    out.extend_from_slice(own);
                    if !own.is_empty() && own.last() != Some(&message::PROPERTY_SEPARATOR) {
                        out.push(message::PROPERTY_SEPARATOR);
                    }
                    out.extend_from_slice(extra);
                    out
                })
                .collect()
        };
        let inputs: Vec<MessageInput<'_>> = items
            .iter()
            .enumerate()
            .map(|(i, it): (usize, &BatchItem<'_>)| MessageInput {
                topic: &topic,
                queue_id: queue_id.0,
                flag: it.flag,
                body: it.body,
                properties: merged.get(i).map_or(it.properties, Vec::as_slice),
                sys_flag: sys_flag.0,
                born_timestamp_ms: born,
                born_host,
                reconsume_times: reconsume_times.0,
                prepared_transaction_offset: 0,
            })
            .collect();
        put(py, &self.store, &inputs, internal, wait_for_flush)
    }

    /// Reads up to `max_count` messages (or `max_bytes`) from `queue_offset` on, keeping those
    /// whose tag matches `tags` ("*", "TagA || TagB", or a list of tags).
    #[pyo3(
        signature = (topic, queue_id, queue_offset, *, max_count=Bound64(32), max_bytes=None,
            tags=None),
        text_signature = "($self, topic, queue_id, queue_offset, *, max_count=32, \
            max_bytes=None, tags=None)"
    )]
    fn get(
        &self,
        py: Python<'_>,
        topic: Topic<'_>,
        queue_id: QueueId,
        queue_offset: Bound64,
        max_count: Bound64,
        max_bytes: Option<Bound64>,
        tags: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyGetResult> {
        let codes = tag_codes(tags)?;
        let store = &self.store;
        let req = GetRequest {
            topic: &topic,
            queue_id: queue_id.0,
            queue_offset: queue_offset.0,
            max_count: limit("max_count", max_count.0)?,
            max_bytes: max_bytes.map(|b| limit("max_bytes", b.0)).transpose()?,
            tags_codes: codes.as_deref(),
        };
        let out = gil::run(py, || store.get(&req))?;
        let total = out.total_bytes;
        let fill = |buf: &mut [u8]| {
            let mut at = 0;
            for r in &out.records {
                let b = r.bytes();
                buf[at..at + b.len()].copy_from_slice(b);
                at += b.len();
            }
        };
        let buffer = PyBytes::new_with(py, total, |buf| {
            if total > DETACHED_COPY_BYTES {
                py.detach(|| fill(buf));
            } else {
                fill(buf);
            }
            Ok(())
        })?;
        Ok(PyGetResult {
            status: out.status as u8,
            next_begin_offset: out.next_begin_offset,
            min_offset: out.min_offset,
            max_offset: out.max_offset,
            buffer: buffer.unbind(),
            queue_offsets: out.records.iter().map(|r| r.queue_offset).collect(),
            phy_offsets: out.records.iter().map(|r| r.phy_offset).collect(),
            sizes: out.records.iter().map(|r| r.size).collect(),
            corrupt_offsets: out.corrupt_offsets,
            in_disk: out.in_disk,
        })
    }

    /// The message whose record starts at `phy_offset`, or None.
    fn look_message_by_offset(
        &self,
        py: Python<'_>,
        phy_offset: Bound64,
    ) -> PyResult<Option<PyStoredMessage>> {
        let Ok(phy_offset) = u64::try_from(phy_offset.0) else {
            return Ok(None);
        };
        let store = &self.store;
        let raw = gil::run(py, || store.look_message_by_offset(phy_offset))?;
        raw.map(|r| PyStoredMessage::decode(py, &r)).transpose()
    }

    /// The stored record at `phy_offset`, byte for byte as the CommitLog holds it, or None.
    fn look_record<'py>(
        &self,
        py: Python<'py>,
        phy_offset: Bound64,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let Ok(phy_offset) = u64::try_from(phy_offset.0) else {
            return Ok(None);
        };
        let store = &self.store;
        let raw = gil::run(py, || store.look_message_by_offset(phy_offset))?;
        Ok(raw.map(|r| PyBytes::new(py, &r)))
    }

    /// Published CommitLog bytes from `from_offset` for a slave: whole append groups of about
    /// `max_bytes` (at least one), or a segment's closing blank alone; or, where this log is
    /// damaged, the damaged bytes and what ends them. Returns the bytes, the offset after them
    /// and how many of the first are damaged; None when nothing is published past
    /// `from_offset`.
    fn read_replica<'py>(
        &self,
        py: Python<'py>,
        from_offset: u64,
        max_bytes: usize,
    ) -> PyResult<Option<(Bound<'py, PyBytes>, u64, usize)>> {
        let store = &self.store;
        let chunk = gil::run(py, || store.read_replica(from_offset, max_bytes))?;
        Ok(chunk.map(|c| (PyBytes::new(py, &c.data), c.next, c.damaged)))
    }

    /// Writes bytes a master's `read_replica` gave for `from_offset` into a slave's store
    /// and dispatches their records (none of the first `damaged`); returns the new end of the
    /// CommitLog.
    #[pyo3(signature = (from_offset, data, damaged=0))]
    fn append_replica(
        &self,
        py: Python<'_>,
        from_offset: u64,
        data: &[u8],
        damaged: usize,
    ) -> PyResult<u64> {
        let store = &self.store;
        gil::run(py, || store.append_replica(from_offset, data, damaged))
    }

    /// The message named by an offset message id, or None.
    fn view_message_by_id(
        &self,
        py: Python<'_>,
        msg_id: Text<'_>,
    ) -> PyResult<Option<PyStoredMessage>> {
        let store = &self.store;
        let raw = gil::run(py, || store.view_message_by_id(&msg_id))?;
        raw.map(|r| PyStoredMessage::decode(py, &r)).transpose()
    }

    /// The newest `max_count` messages of `topic` with `key` among their KEYS or as UNIQ_KEY,
    /// oldest first (RocketMQ's order).
    #[pyo3(
        signature = (topic, key, *, max_count=Bound64(32), begin_ms=Bound64(0), end_ms=None),
        text_signature = "($self, topic, key, *, max_count=32, begin_ms=0, end_ms=None)"
    )]
    fn query_message(
        &self,
        py: Python<'_>,
        topic: Topic<'_>,
        key: Text<'_>,
        max_count: Bound64,
        begin_ms: Bound64,
        end_ms: Option<Bound64>,
    ) -> PyResult<Vec<PyStoredMessage>> {
        let store = &self.store;
        let max_count = limit("max_count", max_count.0)?;
        let end_ms = end_ms.map_or(i64::MAX, |e| e.0);
        let raws = gil::run(py, || {
            store.query_message(&topic, &key, max_count, begin_ms.0, end_ms)
        })?;
        raws.iter()
            .map(|r| PyStoredMessage::decode(py, r))
            .collect()
    }

    /// The smallest queue offset still stored.
    fn min_offset(&self, topic: Topic<'_>, queue_id: QueueId) -> PyResult<u64> {
        Ok(self.live()?.min_offset(&topic, queue_id.0))
    }

    /// The next free queue offset.
    fn max_offset(&self, topic: Topic<'_>, queue_id: QueueId) -> PyResult<u64> {
        Ok(self.live()?.max_offset(&topic, queue_id.0))
    }

    /// The queue offset at `boundary` ("lower" or "upper") of `timestamp_ms`.
    #[pyo3(signature = (topic, queue_id, timestamp_ms, *, boundary="lower"))]
    fn offset_for_time(
        &self,
        py: Python<'_>,
        topic: Topic<'_>,
        queue_id: QueueId,
        timestamp_ms: Bound64,
        boundary: &str,
    ) -> PyResult<u64> {
        let boundary = match boundary {
            "lower" => TimeBoundary::Lower,
            "upper" => TimeBoundary::Upper,
            other => {
                return Err(PyValueError::new_err(format!(
                    "boundary must be \"lower\" or \"upper\", got {other:?}"
                )))
            }
        };
        let store = self.live()?;
        Ok(py.detach(|| store.offset_for_time(&topic, queue_id.0, timestamp_ms.0, boundary)))
    }

    /// Store time of the oldest message still in the queue.
    fn earliest_store_time(&self, topic: Topic<'_>, queue_id: QueueId) -> PyResult<Option<i64>> {
        Ok(self.live()?.earliest_store_time(&topic, queue_id.0))
    }

    /// Whether the message at `queue_offset` lies further behind the CommitLog's end than the
    /// share of memory the page cache likely keeps (False when there is none).
    fn offset_in_disk(
        &self,
        topic: Topic<'_>,
        queue_id: QueueId,
        queue_offset: Bound64,
    ) -> PyResult<bool> {
        let store = self.live()?;
        Ok(u64::try_from(queue_offset.0)
            .is_ok_and(|offset| store.offset_in_disk(&topic, queue_id.0, offset)))
    }

    /// Store time of the message at `queue_offset`.
    fn store_time(
        &self,
        topic: Topic<'_>,
        queue_id: QueueId,
        queue_offset: Bound64,
    ) -> PyResult<Option<i64>> {
        let store = self.live()?;
        Ok(u64::try_from(queue_offset.0)
            .ok()
            .and_then(|offset| store.store_time(&topic, queue_id.0, offset)))
    }

    /// First CommitLog offset still on disk.
    #[getter]
    fn min_phy_offset(&self) -> u64 {
        self.store.min_phy_offset()
    }

    /// End of the CommitLog's written data.
    #[getter]
    fn max_phy_offset(&self) -> u64 {
        self.store.max_phy_offset()
    }

    /// CommitLog offset up to which data is durable.
    #[getter]
    fn flushed_phy_offset(&self) -> u64 {
        self.store.flushed_phy_offset()
    }

    /// A file descriptor that becomes readable after a flush that may have made a
    /// `wait_for_flush=False` put durable (see `drain_flushed`).
    fn flushed_fd(&self) -> i32 {
        self.store.flushed_fd()
    }

    /// Clears `flushed_fd`, then returns the flushed CommitLog offset.
    fn drain_flushed(&self) -> u64 {
        self.store.drain_flushed()
    }

    /// Every (topic, queue id) with a ConsumeQueue.
    fn queue_ids(&self) -> PyResult<Vec<(String, i32)>> {
        Ok(self.live()?.queue_ids())
    }

    /// Counts units of a ConsumeQueue range passing a tag filter (the scan loop, in Rust).
    #[pyo3(signature = (topic, queue_id, start_offset, max_units, tags=None))]
    fn scan_consume_queue(
        &self,
        py: Python<'_>,
        topic: Topic<'_>,
        queue_id: QueueId,
        start_offset: Bound64,
        max_units: Bound64,
        tags: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let codes = tag_codes(tags)?;
        let start_offset = limit("start_offset", start_offset.0)?;
        let max_units = limit("max_units", max_units.0)?;
        let store = self.live()?;
        Ok(py.detach(|| {
            store
                .scan_consume_queue(
                    &topic,
                    queue_id.0,
                    start_offset,
                    max_units,
                    codes.as_deref(),
                )
                .0
        }))
    }

    /// Raw units `(queue_offset, phy_offset, size, tags_code)` from `start_offset`.
    fn consume_queue_units(
        &self,
        topic: Topic<'_>,
        queue_id: QueueId,
        start_offset: Bound64,
        max_units: Bound64,
    ) -> PyResult<Vec<(u64, u64, u32, i64)>> {
        let start_offset = limit("start_offset", start_offset.0)?;
        let max_units = limit("max_units", max_units.0)?;
        Ok(self
            .live()?
            .consume_queue_units(&topic, queue_id.0, start_offset, max_units)
            .into_iter()
            .map(|u| (u.queue_offset, u.phy_offset, u.size, u.tags_code))
            .collect())
    }

    /// Flushes everything and advances the checkpoint; returns the flushed CommitLog offset.
    fn flush(&self, py: Python<'_>) -> PyResult<u64> {
        let store = &self.store;
        gil::run(py, || store.flush())
    }

    /// Runs retention as of `now_ms`; returns the number of CommitLog segments deleted.
    #[pyo3(signature = (now_ms=None, *, force=false))]
    fn delete_expired_files(
        &self,
        py: Python<'_>,
        now_ms: Option<Bound64>,
        force: bool,
    ) -> PyResult<usize> {
        let store = &self.store;
        let now = now_ms.map_or_else(pyrmq_store::clock::now_ms, |n| n.0);
        gil::run(py, || store.delete_expired_files(now, force))
    }

    /// Delivers the delayed messages due at `now_ms` (default: now) to their real topics;
    /// returns how many. The schedule service does this by itself while background services
    /// run.
    #[pyo3(signature = (now_ms=None))]
    fn deliver_due(&self, py: Python<'_>, now_ms: Option<Bound64>) -> PyResult<usize> {
        let store = &self.store;
        let now = now_ms.map_or_else(pyrmq_store::clock::now_ms, |n| n.0);
        gil::run(py, || store.deliver_due(now).map(|pass| pass.delivered))
    }

    /// Deletes the topic's ConsumeQueues; returns how many there were. Its messages are no
    /// longer readable or found by key, and a later put starts again at queue offset 0.
    fn delete_topic(&self, py: Python<'_>, topic: Topic<'_>) -> PyResult<usize> {
        let store = &self.store;
        gil::run(py, || store.delete_topic(&topic))
    }

    /// Recalls the timer message `uniq_key` of `topic`, due at `due_ms`: stores a marker, and
    /// the schedule drops that message instead of delivering it.
    #[pyo3(signature = (topic, uniq_key, due_ms, *, producer_group=None, born_host=None,
        wait_for_flush=true))]
    #[allow(clippy::too_many_arguments)]
    fn recall(
        &self,
        py: Python<'_>,
        topic: Topic<'_>,
        uniq_key: Text<'_>,
        due_ms: Field<i64>,
        producer_group: Option<Text<'_>>,
        born_host: Option<Text<'_>>,
        wait_for_flush: bool,
    ) -> PyResult<PyPutResult> {
        let store = &self.store;
        let host = parse_host(born_host.as_deref())?;
        let group = producer_group.as_deref().unwrap_or("");
        gil::run(py, || {
            store.recall(&topic, &uniq_key, due_ms.0, group, host, wait_for_flush)
        })
        .map(Into::into)
    }

    /// How many recalled timer messages the schedule has yet to meet.
    fn pending_recalls(&self) -> usize {
        self.store.pending_recalls()
    }

    /// Each delay level's next queue offset in SCHEDULE_TOPIC_XXXX.
    fn delay_offsets(&self) -> std::collections::BTreeMap<u32, u64> {
        self.store.delay_offsets()
    }

    /// Takes a master's delay offsets in place of this store's (a slave's copy).
    fn copy_delay_offsets(&self, offsets: std::collections::BTreeMap<u32, u64>) {
        self.store.copy_delay_offsets(offsets);
    }

    /// (messages, bytes) of delayed messages delivered since the store opened.
    fn delayed_deliveries(&self) -> (u64, u64) {
        self.store.delayed_deliveries()
    }

    /// The retention settings in force, by StoreConfig field name.
    fn retention<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let r = self.store.retention();
        let out = PyDict::new(py);
        out.set_item("file_reserved_time_hours", r.file_reserved_time_hours)?;
        let hours: Vec<String> = r
            .delete_when_hours
            .iter()
            .map(|h| format!("{h:02}"))
            .collect();
        out.set_item("delete_when", hours.join(";"))?;
        out.set_item("disk_max_used_space_ratio", r.disk_max_used_space_ratio)?;
        out.set_item(
            "disk_space_clean_forcibly_ratio",
            r.disk_space_clean_forcibly_ratio,
        )?;
        out.set_item(
            "disk_space_warning_level_ratio",
            r.disk_space_warning_level_ratio,
        )?;
        Ok(out)
    }

    /// Changes retention settings (StoreConfig field names, RETENTION_FIELDS) of the open
    /// store; the others keep their values. Raises ConfigError for any other key or a bad
    /// value, and then changes nothing.
    fn set_retention(&self, settings: &Bound<'_, PyDict>) -> PyResult<()> {
        for key in settings.keys() {
            let key: String = key.extract()?;
            if !RETENTION_KEYS.contains(&key.as_str()) {
                return Err(ConfigError::new_err(format!(
                    "{key} cannot change while the store is open; only retention settings can"
                )));
            }
        }
        let mut c = self.store.config().clone();
        c.set_retention(self.store.retention());
        apply_settings(&mut c, settings)?;
        self.store
            .set_retention(c.retention())
            .map_err(errors::to_py)
    }

    /// Re-reads disk usage; returns the used fraction of the store's fullest file system.
    fn check_disk(&self) -> Option<f64> {
        self.store.check_disk()
    }

    /// Whether writes are refused because the disk is fuller than the warning level.
    #[getter]
    fn is_disk_full(&self) -> bool {
        self.store.is_disk_full()
    }

    /// A file descriptor that becomes readable when messages arrive (see `drain_arrivals`).
    fn wakeup_fd(&self) -> i32 {
        self.store.arrivals_fd()
    }

    /// Pending arrivals: `(topic, queue_id, max_offset, tags_codes or None)` per queue.
    fn drain_arrivals(&self) -> Vec<(String, i32, u64, Option<Vec<i64>>)> {
        self.store
            .drain_arrivals()
            .into_iter()
            .map(|a| (a.topic, a.queue_id, a.max_offset, a.tags_codes))
            .collect()
    }

    /// Parks pull `pull_id` until (topic, queue id) passes `queue_offset` with a message whose
    /// tag matches `tags` ("*", "TagA || TagB" or a list); the wakeup is matched in Rust.
    #[pyo3(signature = (pull_id, topic, queue_id, queue_offset, tags=None))]
    fn hold_pull(
        &self,
        pull_id: u64,
        topic: Topic<'_>,
        queue_id: QueueId,
        queue_offset: u64,
        tags: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let codes = tag_codes(tags)?;
        // Nothing would ever wake a pull parked on a closed store.
        self.live()?
            .hold_pull(pull_id, &topic, queue_id.0, queue_offset, codes);
        Ok(())
    }

    /// Removes held pull `pull_id`, parked on (topic, queue id), whose time ran out; False if
    /// it was woken already.
    fn cancel_held_pull(&self, pull_id: u64, topic: Topic<'_>, queue_id: QueueId) -> bool {
        self.store.cancel_held_pull(&topic, queue_id.0, pull_id)
    }

    /// Wakes held pulls whose queue moved past their offset (the periodic re-check).
    fn check_held_pulls(&self, py: Python<'_>) {
        let store = &self.store;
        py.detach(|| store.check_held_pulls());
    }

    /// Held pulls ready to answer: `(pull_id, reason)`, reason 0 = arrival, 1 = a message
    /// arrived while parking, 2 = periodic re-check.
    fn drain_ready_pulls(&self) -> Vec<(u64, u8)> {
        self.store
            .drain_ready_pulls()
            .into_iter()
            .map(|(id, why)| (id, why as u8))
            .collect()
    }

    /// A file descriptor that becomes readable when held pulls are ready.
    fn held_pulls_fd(&self) -> i32 {
        self.store.held_pulls_fd()
    }

    /// Pulls currently held.
    #[getter]
    fn held_pull_count(&self) -> usize {
        self.store.held_pull_count()
    }

    /// What the last open found: records re-dispatched, torn bytes removed, corrupt ranges.
    #[getter]
    fn recovery<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let r = &self.store.recovery;
        let d = PyDict::new(py);
        d.set_item("records", r.records)?;
        d.set_item("groups", r.groups)?;
        d.set_item("end_offset", r.end_offset)?;
        d.set_item("truncated_bytes", r.truncated_bytes)?;
        d.set_item("corrupt_ranges", r.corrupt_ranges.clone())?;
        Ok(d)
    }

    /// Whether `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.store.is_closed()
    }

    /// Flushes everything and marks the shutdown clean. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let store = &self.store;
        gil::run(py, || store.close())
    }
}
