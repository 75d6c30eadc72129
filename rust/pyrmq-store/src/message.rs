//! The stored-message record: RocketMQ message format V1, which is also the PULL answer body.
//!
//! All integers big-endian. Offsets assume IPv4 hosts; an IPv6 born host (sysflag bit 4) or
//! store host (bit 5) widens its address from 4 to 16 bytes and shifts every later field.
//!
//! | off | size | field                       | invariant                                    |
//! |-----|------|-----------------------------|----------------------------------------------|
//! |   0 |    4 | TOTALSIZE                   | = 88 + B + 1 + T + 2 + P (IPv4/IPv4)         |
//! |   4 |    4 | MAGICCODE                   | 0xDAA320A7                                   |
//! |   8 |    4 | BODYCRC                     | crc32(body) & 0x7FFFFFFF                     |
//! |  12 |    4 | QUEUEID                     |                                              |
//! |  16 |    4 | FLAG                        | user flag                                    |
//! |  20 |    8 | QUEUEOFFSET                 | unit index in the ConsumeQueue               |
//! |  28 |    8 | PHYSICALOFFSET              | = this record's CommitLog offset             |
//! |  36 |    4 | SYSFLAG                     | MessageSysFlag                               |
//! |  40 |    8 | BORNTIMESTAMP               | ms                                           |
//! |  48 |  4+4 | BORNHOST ip, port           |                                              |
//! |  56 |    8 | STORETIMESTAMP              | ms, never decreasing within one store        |
//! |  64 |  4+4 | STOREHOST ip, port          |                                              |
//! |  72 |    4 | RECONSUMETIMES              |                                              |
//! |  76 |    8 | PREPARED TRANSACTION OFFSET |                                              |
//! |  84 |    4 | BODYLEN B                   |                                              |
//! |  88 |    B | BODY                        |                                              |
//! |     |    1 | TOPICLEN T                  | signed byte: at most 127                     |
//! |     |    T | TOPIC                       |                                              |
//! |     |    2 | PROPERTIESLEN P             | signed: at most 32767                        |
//! |     |    P | PROPERTIES                  | name 0x01 value 0x02 ...                     |
//!
//! Two record kinds never reach readers, who find records only through ConsumeQueue units:
//! the *blank* record (magic 0xCBD43194) that fills the end of a segment, and the *fence*
//! (see [`crate::commit_log`]) that seals each append with a CRC of everything it wrote.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::error::{StoreError, StoreResult};

pub const MESSAGE_MAGIC_CODE: u32 = 0xDAA3_20A7;
pub const BLANK_MAGIC_CODE: u32 = 0xCBD4_3194;

pub const SYSFLAG_COMPRESSED: i32 = 0x1;
pub const SYSFLAG_TRANSACTION_MASK: i32 = 0xC;
pub const SYSFLAG_TRANSACTION_PREPARED: i32 = 0x4;
pub const SYSFLAG_TRANSACTION_ROLLBACK: i32 = 0xC;
pub const SYSFLAG_BORNHOST_V6: i32 = 0x10;
pub const SYSFLAG_STOREHOST_V6: i32 = 0x20;

pub const NAME_VALUE_SEPARATOR: u8 = 1;
pub const PROPERTY_SEPARATOR: u8 = 2;

pub const PROPERTY_KEYS: &str = "KEYS";
pub const PROPERTY_TAGS: &str = "TAGS";
pub const PROPERTY_UNIQ_KEY: &str = "UNIQ_CLIENT_MESSAGE_ID_KEYIDX";
pub const PROPERTY_UNIQ_KEY_SHORT: &str = "UNIQ_KEY";
pub const PROPERTY_DELAY: &str = "DELAY";
pub const PROPERTY_REAL_TOPIC: &str = "REAL_TOPIC";
pub const PROPERTY_REAL_QUEUE_ID: &str = "REAL_QID";
/// "false" on a message the broker stores itself (a delayed one falling due), as RocketMQ marks it.
pub const PROPERTY_WAIT: &str = "WAIT";
/// RocketMQ 5's timer messages: the delivery time in epoch milliseconds, or a delay from the
/// put in seconds or milliseconds.
pub const PROPERTY_TIMER_DELIVER_MS: &str = "TIMER_DELIVER_MS";
pub const PROPERTY_TIMER_DELAY_SEC: &str = "TIMER_DELAY_SEC";
pub const PROPERTY_TIMER_DELAY_MS: &str = "TIMER_DELAY_MS";

/// Bytes before the body with IPv4 born and store hosts.
pub const FIXED_LEN_V4: usize = 88;
pub const MAX_TOPIC_LEN: usize = 127;
pub const MAX_PROPERTIES_LEN: usize = i16::MAX as usize;

/// Bytes before the body, for the host families `sys_flag` names.
pub fn fixed_len(sys_flag: i32) -> usize {
    let mut fixed = FIXED_LEN_V4;
    if sys_flag & SYSFLAG_BORNHOST_V6 != 0 {
        fixed += 12;
    }
    if sys_flag & SYSFLAG_STOREHOST_V6 != 0 {
        fixed += 12;
    }
    fixed
}

/// Length of the record for the given variable parts.
pub fn record_len(body: usize, topic: usize, properties: usize, sys_flag: i32) -> usize {
    fixed_len(sys_flag) + body + 1 + topic + 2 + properties
}

pub fn body_crc(body: &[u8]) -> u32 {
    crc32fast::hash(body) & 0x7FFF_FFFF
}

/// [`body_crc`] with the CPU's CRC instructions looked up once, not for every body.
#[derive(Clone)]
pub struct BodyCrc(crc32fast::Hasher);

impl BodyCrc {
    pub fn new() -> Self {
        Self(crc32fast::Hasher::new())
    }

    pub fn of(&self, body: &[u8]) -> u32 {
        let mut h = self.0.clone();
        h.update(body);
        h.finalize() & 0x7FFF_FFFF
    }
}

impl Default for BodyCrc {
    fn default() -> Self {
        Self::new()
    }
}

/// Java's `String.hashCode`, which RocketMQ uses for tag codes and index keys.
pub fn java_string_hash(s: &str) -> i32 {
    if s.is_ascii() {
        // An ASCII byte is its own UTF-16 unit, and tags and keys nearly always are ASCII: fold
        // four at a time with the powers of 31, as index keys run to 40 bytes and more.
        let mut chunks = s.as_bytes().chunks_exact(4);
        let mut h = 0u32;
        for c in &mut chunks {
            h = h
                .wrapping_mul(923_521)
                .wrapping_add(u32::from(c[0]) * 29_791)
                .wrapping_add(u32::from(c[1]) * 961)
                .wrapping_add(u32::from(c[2]) * 31)
                .wrapping_add(u32::from(c[3]));
        }
        for &b in chunks.remainder() {
            h = h.wrapping_mul(31).wrapping_add(u32::from(b));
        }
        return h as i32;
    }
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// Tag code stored in the ConsumeQueue: the tag's hash, or 0 for an untagged message.
pub fn tags_code(tags: Option<&str>) -> i64 {
    match tags {
        Some(t) if !t.is_empty() => i64::from(java_string_hash(t)),
        _ => 0,
    }
}

/// A message as a producer hands it over; the store fills in the rest at append.
#[derive(Clone, Debug)]
pub struct MessageInput<'a> {
    pub topic: &'a str,
    pub queue_id: i32,
    pub flag: i32,
    pub body: &'a [u8],
    /// Encoded properties (`name\x01value\x02...`).
    pub properties: &'a [u8],
    pub sys_flag: i32,
    pub born_timestamp_ms: i64,
    pub born_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
}

/// Fields assigned under the put lock.
#[derive(Clone, Copy, Debug)]
pub struct Assigned {
    pub queue_offset: i64,
    pub phy_offset: i64,
    pub store_timestamp_ms: i64,
    pub store_host: SocketAddr,
}

/// The record's `SYSFLAG`: the caller's, with the host-family bits set from the hosts
/// themselves, whatever the caller claimed (they decide the record's layout).
pub fn stored_sys_flag(sys_flag: i32, born_host: &SocketAddr, store_host: &SocketAddr) -> i32 {
    let mut sys_flag = sys_flag & !(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6);
    if born_host.is_ipv6() {
        sys_flag |= SYSFLAG_BORNHOST_V6;
    }
    if store_host.is_ipv6() {
        sys_flag |= SYSFLAG_STOREHOST_V6;
    }
    sys_flag
}

/// Writes one record into `out`, which must be exactly `record_len(..)` bytes.
pub fn encode_into(out: &mut [u8], msg: &MessageInput<'_>, crc: u32, at: &Assigned) {
    let sys_flag = stored_sys_flag(msg.sys_flag, &msg.born_host, &at.store_host);
    let total = out.len();
    let mut w = Writer { buf: out, pos: 0 };
    w.u32(total as u32);
    w.u32(MESSAGE_MAGIC_CODE);
    w.u32(crc);
    w.i32(msg.queue_id);
    w.i32(msg.flag);
    w.i64(at.queue_offset);
    w.i64(at.phy_offset);
    w.i32(sys_flag);
    w.i64(msg.born_timestamp_ms);
    w.host(&msg.born_host);
    w.i64(at.store_timestamp_ms);
    w.host(&at.store_host);
    w.i32(msg.reconsume_times);
    w.i64(msg.prepared_transaction_offset);
    w.u32(msg.body.len() as u32);
    w.bytes(msg.body);
    w.buf[w.pos] = msg.topic.len() as u8;
    w.pos += 1;
    w.bytes(msg.topic.as_bytes());
    w.buf[w.pos..w.pos + 2].copy_from_slice(&(msg.properties.len() as u16).to_be_bytes());
    w.pos += 2;
    w.bytes(msg.properties);
    debug_assert_eq!(w.pos, total, "record length mismatch");
}

/// Writes at `at` the record that differs from the one just before it (at `prev`, ending at
/// `at`) only in its body and offsets: the message fields, store time and host, topic and
/// properties are copied from it, still in cache, and the rest is patched in. A batch's
/// messages share all but their bodies ([`same_but_body`]), so this replaces field-by-field
/// encoding for all but the first. `crc` is the body's CRC; returns the record's length.
pub fn encode_after(
    buf: &mut [u8],
    prev: usize,
    at: usize,
    body: &[u8],
    crc: u32,
    queue_offset: i64,
    phy_offset: i64,
) -> usize {
    let (done, free) = buf.split_at_mut(at);
    let before = &done[prev..];
    let word = |i: usize| u32::from_be_bytes(before[i..i + 4].try_into().expect("4 bytes"));
    let fixed = fixed_len(word(36) as i32);
    let tail = &before[fixed + word(fixed - 4) as usize..];
    let total = fixed + body.len() + tail.len();
    let r = &mut free[..total];
    if fixed == FIXED_LEN_V4 {
        // A constant length, copied inline.
        r[..FIXED_LEN_V4].copy_from_slice(&before[..FIXED_LEN_V4]);
    } else {
        r[..fixed].copy_from_slice(&before[..fixed]);
    }
    r[0..4].copy_from_slice(&(total as u32).to_be_bytes());
    r[8..12].copy_from_slice(&crc.to_be_bytes());
    r[20..28].copy_from_slice(&queue_offset.to_be_bytes());
    r[28..36].copy_from_slice(&phy_offset.to_be_bytes());
    r[fixed - 4..fixed].copy_from_slice(&(body.len() as u32).to_be_bytes());
    let (r_body, r_tail) = r[fixed..].split_at_mut(body.len());
    r_body.copy_from_slice(body);
    r_tail.copy_from_slice(tail);
    total
}

/// Whether two messages encode to the same record but for their bodies (given the same store
/// time and host), so that [`encode_after`] applies.
pub fn same_but_body(a: &MessageInput<'_>, b: &MessageInput<'_>) -> bool {
    same_bytes(a.properties, b.properties)
        && same_bytes(a.topic.as_bytes(), b.topic.as_bytes())
        && a.queue_id == b.queue_id
        && a.flag == b.flag
        && a.sys_flag == b.sys_flag
        && a.born_timestamp_ms == b.born_timestamp_ms
        && a.reconsume_times == b.reconsume_times
        && a.prepared_transaction_offset == b.prepared_transaction_offset
        && a.born_host == b.born_host
}

/// Byte equality that skips the compare when both point at the same bytes, as the messages of
/// one batch share their topic and properties.
#[inline]
pub fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    (std::ptr::eq(a.as_ptr(), b.as_ptr()) && a.len() == b.len()) || a == b
}

struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl Writer<'_> {
    fn bytes(&mut self, b: &[u8]) {
        self.buf[self.pos..self.pos + b.len()].copy_from_slice(b);
        self.pos += b.len();
    }
    fn u32(&mut self, v: u32) {
        self.bytes(&v.to_be_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.bytes(&v.to_be_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.bytes(&v.to_be_bytes());
    }
    fn host(&mut self, addr: &SocketAddr) {
        match addr.ip() {
            IpAddr::V4(ip) => self.bytes(&ip.octets()),
            IpAddr::V6(ip) => self.bytes(&ip.octets()),
        }
        self.i32(i32::from(addr.port()));
    }
}

/// Why bytes are not a well-formed message record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    Truncated,
    BadMagic(u32),
    BadLength(String),
    BadCrc { stored: u32, computed: u32 },
    BadText(&'static str),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Truncated => f.write_str("record truncated"),
            Self::BadMagic(m) => write!(f, "bad magic code {m:#010x}"),
            Self::BadLength(why) => write!(f, "inconsistent lengths: {why}"),
            Self::BadCrc { stored, computed } => {
                write!(f, "body CRC {stored:#010x} != computed {computed:#010x}")
            }
            Self::BadText(what) => write!(f, "{what} is not valid UTF-8"),
        }
    }
}

/// A decoded record borrowing its variable parts from the underlying bytes.
#[derive(Clone, Debug)]
pub struct Record<'a> {
    pub total_size: u32,
    pub body_crc: u32,
    pub queue_id: i32,
    pub flag: i32,
    pub queue_offset: i64,
    pub phy_offset: i64,
    pub sys_flag: i32,
    pub born_timestamp_ms: i64,
    pub born_host: SocketAddr,
    pub store_timestamp_ms: i64,
    pub store_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub body: &'a [u8],
    pub topic: &'a str,
    pub properties: &'a [u8],
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n).ok_or(DecodeError::Truncated)?;
        let s = self.buf.get(self.pos..end).ok_or(DecodeError::Truncated)?;
        self.pos = end;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(self.u32()? as i32)
    }
    fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn host(&mut self, v6: bool) -> Result<SocketAddr, DecodeError> {
        let ip = if v6 {
            let b: [u8; 16] = self.take(16)?.try_into().expect("16 bytes");
            IpAddr::V6(Ipv6Addr::from(b))
        } else {
            let b: [u8; 4] = self.take(4)?.try_into().expect("4 bytes");
            IpAddr::V4(Ipv4Addr::from(b))
        };
        let port = self.i32()? as u16;
        Ok(SocketAddr::new(ip, port))
    }
}

/// Decodes the record at the start of `buf`. With `check_crc` the body CRC is verified.
pub fn decode(buf: &[u8], check_crc: bool) -> Result<Record<'_>, DecodeError> {
    let mut r = Reader { buf, pos: 0 };
    let total_size = r.u32()?;
    let magic = r.u32()?;
    if magic != MESSAGE_MAGIC_CODE {
        return Err(DecodeError::BadMagic(magic));
    }
    if (total_size as usize) < FIXED_LEN_V4 + 3 || total_size as usize > buf.len() {
        return Err(DecodeError::BadLength(format!(
            "total size {total_size} with {} bytes available",
            buf.len()
        )));
    }
    r.buf = &buf[..total_size as usize];
    let body_crc = r.u32()?;
    let queue_id = r.i32()?;
    let flag = r.i32()?;
    let queue_offset = r.i64()?;
    let phy_offset = r.i64()?;
    let sys_flag = r.i32()?;
    let born_timestamp_ms = r.i64()?;
    let born_host = r.host(sys_flag & SYSFLAG_BORNHOST_V6 != 0)?;
    let store_timestamp_ms = r.i64()?;
    let store_host = r.host(sys_flag & SYSFLAG_STOREHOST_V6 != 0)?;
    let reconsume_times = r.i32()?;
    let prepared_transaction_offset = r.i64()?;
    let body_len = r.u32()? as usize;
    let body = r.take(body_len)?;
    let topic_len = r.take(1)?[0];
    if topic_len > 127 {
        return Err(DecodeError::BadLength(format!(
            "topic length byte {topic_len}"
        )));
    }
    let topic = std::str::from_utf8(r.take(topic_len as usize)?)
        .map_err(|_| DecodeError::BadText("topic"))?;
    let props_len = u16::from_be_bytes(r.take(2)?.try_into().expect("2 bytes"));
    if props_len > i16::MAX as u16 {
        return Err(DecodeError::BadLength(format!(
            "properties length {props_len}"
        )));
    }
    let properties = r.take(props_len as usize)?;
    if r.pos != total_size as usize {
        return Err(DecodeError::BadLength(format!(
            "fields end at {} but total size is {total_size}",
            r.pos
        )));
    }
    if check_crc {
        let computed = self::body_crc(body);
        if computed != body_crc {
            return Err(DecodeError::BadCrc {
                stored: body_crc,
                computed,
            });
        }
    }
    Ok(Record {
        total_size,
        body_crc,
        queue_id,
        flag,
        queue_offset,
        phy_offset,
        sys_flag,
        born_timestamp_ms,
        born_host,
        store_timestamp_ms,
        store_host,
        reconsume_times,
        prepared_transaction_offset,
        body,
        topic,
        properties,
    })
}

impl Record<'_> {
    pub fn property(&self, name: &str) -> Option<&str> {
        property(self.properties, name)
    }

    pub fn offset_msg_id(&self) -> String {
        offset_msg_id(&self.store_host, self.phy_offset)
    }
}

/// The `\x02`-separated segments of encoded properties, as `split` gives them (an empty one
/// after a trailing separator), found with memchr: every put scans its properties a few times.
fn segments(props: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(props);
    std::iter::from_fn(move || {
        let r = rest?;
        if let Some(i) = memchr::memchr(PROPERTY_SEPARATOR, r) {
            rest = Some(&r[i + 1..]);
            Some(&r[..i])
        } else {
            rest = None;
            Some(r)
        }
    })
}

/// Iterates over `(name, value)` pairs, accepting a trailing separator or none and skipping
/// empty segments; a pair splits on its first `\x01`. Pairs that are not UTF-8 are skipped.
pub fn iter_properties(props: &[u8]) -> impl Iterator<Item = (&str, &str)> {
    segments(props)
        .filter(|s| !s.is_empty())
        .filter_map(|pair| {
            let sep = memchr::memchr(NAME_VALUE_SEPARATOR, pair)?;
            let name = std::str::from_utf8(&pair[..sep]).ok()?;
            let value = std::str::from_utf8(&pair[sep + 1..]).ok()?;
            Some((name, value))
        })
}

/// The value of `pair` if it is named `name` (`name\x01value`); names are compared as bytes.
fn value_if_named<'a>(pair: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    pair.strip_prefix(name)?
        .strip_prefix(&[NAME_VALUE_SEPARATOR])
}

/// Whether a pair may ask for a delay: one named `DELAY`, or starting `TIMER_` (the cheap
/// test, on every put, before the delay and timer properties are read).
pub fn may_ask_for_delay(props: &[u8]) -> bool {
    segments(props).any(|pair| {
        pair.starts_with(b"TIMER_") || value_if_named(pair, PROPERTY_DELAY.as_bytes()).is_some()
    })
}

/// Whether a pair is named one of `names` (values unchecked): the cheap test before lookups.
pub fn has_any_property(props: &[u8], names: &[&str]) -> bool {
    // A pair's name ends at its first separator, so a name holding one is never there.
    let names = names
        .iter()
        .map(|n| n.as_bytes())
        .filter(|n| !n.contains(&NAME_VALUE_SEPARATOR));
    segments(props).any(|pair| names.clone().any(|n| value_if_named(pair, n).is_some()))
}

/// The value of the last pair named `name` whose value is UTF-8, as [`iter_properties`] would
/// find it; names are compared as bytes, so only the values found are checked. A name given
/// twice means its last value, as in a map built from the pairs (RocketMQ's decoder, and the
/// one clients read): tag codes and index keys then agree with what readers see.
pub fn property<'a>(props: &'a [u8], name: &str) -> Option<&'a str> {
    let name = name.as_bytes();
    if name.contains(&NAME_VALUE_SEPARATOR) {
        return None; // a pair's name ends at its first separator
    }
    segments(props)
        .filter_map(|pair| std::str::from_utf8(value_if_named(pair, name)?).ok())
        .last()
}

/// What [`property`] gives for each of `names`, found in one pass over the pairs.
pub fn properties_named<'a, const N: usize>(
    props: &'a [u8],
    names: [&str; N],
) -> [Option<&'a str>; N] {
    let mut found = [None; N];
    // A pair's name ends at its first separator, so a name holding one is never there.
    let possible = names.map(|n| !n.as_bytes().contains(&NAME_VALUE_SEPARATOR));
    for pair in segments(props) {
        for ((slot, name), possible) in found.iter_mut().zip(names).zip(possible) {
            if !possible {
                continue;
            }
            if let Some(v) = value_if_named(pair, name.as_bytes()) {
                if let Ok(v) = std::str::from_utf8(v) {
                    *slot = Some(v);
                }
            }
        }
    }
    found
}

pub fn properties_map(props: &[u8]) -> HashMap<String, String> {
    iter_properties(props)
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
        .collect()
}

/// The properties without the pairs named one of `names`, every other pair kept byte for
/// byte (one that is not UTF-8 too), in order.
pub fn without_properties(props: &[u8], names: &[&str]) -> Vec<u8> {
    let mut out = Vec::with_capacity(props.len());
    for pair in segments(props).filter(|s| !s.is_empty()) {
        if names
            .iter()
            .any(|n| value_if_named(pair, n.as_bytes()).is_some())
        {
            continue;
        }
        if !out.is_empty() {
            out.push(PROPERTY_SEPARATOR);
        }
        out.extend_from_slice(pair);
    }
    out
}

/// Encodes pairs as `name\x01value\x02` with no separator after the last pair (Java 4.9.7).
pub fn encode_properties<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in pairs {
        push_property(&mut out, name, value);
    }
    out
}

/// Appends `name\x01value` to encoded properties, after a separator unless they are empty or
/// already end with one (a producer's encoded string may).
#[inline]
pub fn push_property(out: &mut Vec<u8>, name: &str, value: &str) {
    if out.last().is_some_and(|&b| b != PROPERTY_SEPARATOR) {
        out.push(PROPERTY_SEPARATOR);
    }
    out.extend_from_slice(name.as_bytes());
    out.push(NAME_VALUE_SEPARATOR);
    out.extend_from_slice(value.as_bytes());
}

/// Uppercase hex of store ip ‖ port (i32) ‖ commit-log offset (i64).
pub fn offset_msg_id(store_host: &SocketAddr, phy_offset: i64) -> String {
    let mut s = String::with_capacity(56);
    push_offset_msg_id(&mut s, store_host, phy_offset);
    s
}

/// Appends `bytes` to `out` as uppercase hex, the spelling of RocketMQ's message ids.
pub fn push_hex_upper(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.reserve(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xF)]));
    }
}

/// Appends the offset message id of `phy_offset` to `out` (a batch answer joins many).
pub fn push_offset_msg_id(out: &mut String, store_host: &SocketAddr, phy_offset: i64) {
    let mut raw = [0u8; 28];
    let n = match store_host.ip() {
        IpAddr::V4(ip) => {
            raw[..4].copy_from_slice(&ip.octets());
            4
        }
        IpAddr::V6(ip) => {
            raw[..16].copy_from_slice(&ip.octets());
            16
        }
    };
    raw[n..n + 4].copy_from_slice(&i32::from(store_host.port()).to_be_bytes());
    raw[n + 4..n + 12].copy_from_slice(&phy_offset.to_be_bytes());
    push_hex_upper(out, &raw[..n + 12]);
}

pub fn decode_offset_msg_id(id: &str) -> Option<(SocketAddr, i64)> {
    let hex = id.trim();
    if !(hex.len() == 32 || hex.len() == 56) || !hex.is_ascii() {
        return None;
    }
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
        .collect::<Option<_>>()?;
    let ip_len = bytes.len() - 12;
    let ip = if ip_len == 4 {
        IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(&bytes[..4]).ok()?))
    } else {
        IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&bytes[..16]).ok()?))
    };
    let port = i32::from_be_bytes(bytes[ip_len..ip_len + 4].try_into().ok()?);
    let offset = i64::from_be_bytes(bytes[ip_len + 4..].try_into().ok()?);
    Some((SocketAddr::new(ip, port as u16), offset))
}

/// Checks RocketMQ's topic rule: 1..=127 characters of `[%|a-zA-Z0-9_-]`.
pub fn validate_topic(topic: &str) -> Result<(), &'static str> {
    if topic.is_empty() {
        return Err("topic is empty");
    }
    if topic.len() > MAX_TOPIC_LEN {
        return Err("topic is longer than 127 characters");
    }
    if !topic
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'%' | b'|' | b'_' | b'-'))
    {
        return Err("topic may only contain characters of [%|a-zA-Z0-9_-]");
    }
    Ok(())
}

/// The topic checks of a put: RocketMQ's name rule, and (unless `internal`) not a topic only
/// the broker writes.
pub fn check_topic(topic: &str, internal: bool) -> StoreResult<()> {
    validate_topic(topic).map_err(|reason| StoreError::InvalidTopic {
        topic: topic.to_owned(),
        reason,
    })?;
    if !internal && is_send_forbidden(topic) {
        return Err(StoreError::SystemTopic(topic.to_owned()));
    }
    Ok(())
}

/// Topics only the broker writes, RocketMQ's not-allowed-send set. Its other system topics
/// take producers' messages: clients send trace data to `RMQ_SYS_TRACE_TOPIC`, and RocketMQ's
/// benchmark tool to `BenchmarkTest`.
pub fn is_send_forbidden(topic: &str) -> bool {
    const BROKER_ONLY: &[&str] = &[
        "SCHEDULE_TOPIC_XXXX",
        "SCHEDULE_TOPIC_XXXX_V2",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        crate::recall::RECALL_TOPIC,
    ];
    BROKER_ONLY.contains(&topic)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample<'a>(topic: &'a str, body: &'a [u8], props: &'a [u8]) -> MessageInput<'a> {
        MessageInput {
            topic,
            queue_id: 3,
            flag: 7,
            body,
            properties: props,
            sys_flag: 0,
            born_timestamp_ms: 1_700_000_000_000,
            born_host: "10.0.0.1:5555".parse().unwrap(),
            reconsume_times: 2,
            prepared_transaction_offset: 0,
        }
    }

    #[test]
    fn encoded_record_matches_the_documented_layout() {
        let props = encode_properties([("TAGS", "TagA"), ("KEYS", "k1 k2")]);
        let msg = sample("TopicTest", b"Hello RocketMQ", &props);
        let len = record_len(msg.body.len(), msg.topic.len(), props.len(), 0);
        let mut buf = vec![0u8; len];
        let at = Assigned {
            queue_offset: 5,
            phy_offset: 0x87,
            store_timestamp_ms: 1_700_000_000_123,
            store_host: "127.0.0.1:30911".parse().unwrap(),
        };
        encode_into(&mut buf, &msg, body_crc(msg.body), &at);
        assert_eq!(
            u32::from_be_bytes(buf[0..4].try_into().unwrap()) as usize,
            len
        );
        assert_eq!(&buf[4..8], &MESSAGE_MAGIC_CODE.to_be_bytes());
        assert_eq!(&buf[48..52], &[10, 0, 0, 1]);
        assert_eq!(&buf[64..68], &[127, 0, 0, 1]);
        let rec = decode(&buf, true).unwrap();
        assert_eq!(rec.queue_offset, 5);
        assert_eq!(rec.phy_offset, 0x87);
        assert_eq!(rec.body, b"Hello RocketMQ");
        assert_eq!(rec.topic, "TopicTest");
        assert_eq!(rec.property("KEYS"), Some("k1 k2"));
        assert_eq!(rec.offset_msg_id(), "7F000001000078BF0000000000000087");
    }

    #[test]
    fn flipped_body_byte_fails_the_crc() {
        let msg = sample("T", b"payload", b"");
        let mut buf = vec![0u8; record_len(7, 1, 0, 0)];
        let at = Assigned {
            queue_offset: 0,
            phy_offset: 0,
            store_timestamp_ms: 1,
            store_host: "127.0.0.1:1".parse().unwrap(),
        };
        encode_into(&mut buf, &msg, body_crc(msg.body), &at);
        buf[90] ^= 0x40;
        assert!(matches!(
            decode(&buf, true),
            Err(DecodeError::BadCrc { .. })
        ));
        assert!(decode(&buf, false).is_ok());
    }

    #[test]
    fn java_hash_matches_known_values() {
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("TagA"), 2_598_919);
        assert_eq!(java_string_hash("hello"), 99_162_322);
        // Non-BMP characters hash as two UTF-16 units.
        assert_eq!(java_string_hash("😀"), 1_772_899);
    }

    #[test]
    fn properties_accept_both_trailing_forms() {
        let a = properties_map(b"A\x011\x02B\x012\x02");
        let b = properties_map(b"A\x011\x02B\x012");
        assert_eq!(a, b);
        assert_eq!(property(b"X\x01a\x01b", "X"), Some("a\x01b"));
    }

    #[test]
    fn offset_msg_id_round_trips() {
        let host: SocketAddr = "127.0.0.1:30911".parse().unwrap();
        let id = offset_msg_id(&host, 0x87);
        assert_eq!(decode_offset_msg_id(&id), Some((host, 0x87)));
        assert_eq!(decode_offset_msg_id("zz"), None);
        let v6: SocketAddr = "[2001:db8::ff]:10911".parse().unwrap();
        let id = offset_msg_id(&v6, -2);
        assert_eq!(id.len(), 56);
        assert_eq!(&id[..32], "20010DB80000000000000000000000FF");
        assert_eq!(&id[32..40], "00002A9F");
        assert_eq!(&id[40..], "FFFFFFFFFFFFFFFE");
    }

    #[test]
    fn topic_rules() {
        assert!(validate_topic("Topic_A-1|%x").is_ok());
        assert!(validate_topic("").is_err());
        assert!(validate_topic("a b").is_err());
        assert!(validate_topic(&"x".repeat(128)).is_err());
        assert!(validate_topic(&"x".repeat(127)).is_ok());
        assert!(is_send_forbidden("SCHEDULE_TOPIC_XXXX"));
        assert!(is_send_forbidden("RMQ_SYS_TRANS_HALF_TOPIC"));
        for open in [
            "%RETRY%g",
            "%DLQ%g",
            "RMQ_SYS_TRACE_TOPIC",
            "BenchmarkTest",
            "TBW102",
        ] {
            assert!(!is_send_forbidden(open), "{open}");
        }
    }
}

/// One message of a client batch body (SEND_BATCH_MESSAGE, or SEND_MESSAGE with batch=1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchItem<'a> {
    pub flag: i32,
    pub body: &'a [u8],
    pub properties: &'a [u8],
}

/// Splits a client batch body: per message `totalSize i32 | magic i32 | bodyCRC i32 | flag i32 |
/// bodyLen i32 | body | propertiesLen i16 | properties`, big-endian, end to end.
pub fn decode_client_batch(buf: &[u8]) -> Result<Vec<BatchItem<'_>>, DecodeError> {
    let mut items = Vec::new();
    let mut pos = 0usize;
    while pos < buf.len() {
        let mut r = Reader { buf, pos };
        let total = r.u32()? as usize;
        if total < 22 || pos + total > buf.len() {
            return Err(DecodeError::BadLength(format!(
                "batch item of {total} bytes at {pos}"
            )));
        }
        r.buf = &buf[..pos + total];
        let _magic = r.u32()?;
        let _crc = r.u32()?;
        let flag = r.i32()?;
        let body_len = r.u32()? as usize;
        let body = r.take(body_len)?;
        let props_len = u16::from_be_bytes(r.take(2)?.try_into().expect("2 bytes")) as usize;
        let properties = r.take(props_len)?;
        if r.pos != pos + total {
            return Err(DecodeError::BadLength(format!(
                "batch item at {pos} declares {total} bytes"
            )));
        }
        items.push(BatchItem {
            flag,
            body,
            properties,
        });
        pos += total;
    }
    if items.is_empty() {
        return Err(DecodeError::Truncated);
    }
    Ok(items)
}

/// Encodes messages in the client batch format (the inverse of [`decode_client_batch`]).
pub fn encode_client_batch(items: &[BatchItem<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for it in items {
        let total = 20 + it.body.len() + 2 + it.properties.len();
        out.extend_from_slice(&(total as u32).to_be_bytes());
        out.extend_from_slice(&0u32.to_be_bytes());
        out.extend_from_slice(&0u32.to_be_bytes());
        out.extend_from_slice(&it.flag.to_be_bytes());
        out.extend_from_slice(&(it.body.len() as u32).to_be_bytes());
        out.extend_from_slice(it.body);
        out.extend_from_slice(&(it.properties.len() as u16).to_be_bytes());
        out.extend_from_slice(it.properties);
    }
    out
}
