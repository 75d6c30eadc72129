//! Arrival events: the store's signal to the broker's event loop.
//!
//! Dispatch records, per (topic, queue id), the newest max offset and the tag codes that arrived
//! since the last drain, and makes an eventfd readable when the first event of a batch lands. An
//! asyncio loop watches the fd (`add_reader`) and drains every pending event in one call, so a
//! burst of appends costs one wakeup, and no arrival is lost between a drain and the next park:
//! an event recorded after a drain keeps the fd readable.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use parking_lot::Mutex;

use crate::queue_map::QueueMap;

/// Distinct tag codes kept per queue between drains; beyond this the event says "any tag".
const MAX_TAG_CODES: usize = 16;

/// A non-blocking eventfd: readable from the first `signal` until `clear`.
pub struct EventFd(OwnedFd);

impl EventFd {
    pub fn new() -> std::io::Result<Self> {
        // SAFETY: eventfd has no memory preconditions; the result is checked before use.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(raw) }))
    }

    pub fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd.
        let n = unsafe { libc::write(self.raw(), (&raw const one).cast(), 8) };
        if n != 8 {
            log::warn!("eventfd write failed: {}", std::io::Error::last_os_error());
        }
    }

    pub fn clear(&self) {
        let mut buf: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live u64; EAGAIN (not signalled) is fine.
        unsafe { libc::read(self.raw(), (&raw mut buf).cast(), 8) };
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arrival {
    pub topic: String,
    pub queue_id: i32,
    /// Next free queue offset after the arrivals.
    pub max_offset: u64,
    /// Tag codes of the arrived messages, or `None` when too many differ to list.
    pub tags_codes: Option<Vec<i64>>,
}

pub struct Arrivals {
    pending: Mutex<QueueMap<Arrival>>,
    fd: EventFd,
}

impl Arrivals {
    pub fn new() -> std::io::Result<Self> {
        Ok(Self {
            pending: Mutex::new(QueueMap::default()),
            fd: EventFd::new()?,
        })
    }

    pub fn fd(&self) -> RawFd {
        self.fd.raw()
    }

    /// Records that messages with `tags_codes` arrived in (topic, queue id) up to `max_offset`.
    pub fn notify(&self, topic: &str, queue_id: i32, max_offset: u64, tags_codes: &[i64]) {
        let mut pending = self.pending.lock();
        let was_empty = pending.is_empty();
        let entry = pending.get_or_insert_with(topic, queue_id, || Arrival {
            topic: topic.to_owned(),
            queue_id,
            max_offset,
            tags_codes: Some(Vec::new()),
        });
        entry.max_offset = entry.max_offset.max(max_offset);
        if let Some(codes) = entry.tags_codes.as_mut() {
            for code in tags_codes {
                if !codes.contains(code) {
                    codes.push(*code);
                }
            }
            if codes.len() > MAX_TAG_CODES {
                entry.tags_codes = None;
            }
        }
        if was_empty {
            self.fd.signal();
        }
    }

    /// Takes every pending event and clears the fd's readiness.
    pub fn drain(&self) -> Vec<Arrival> {
        let mut pending = self.pending.lock();
        self.fd.clear();
        pending.drain().map(|(_, _, v)| v).collect()
    }
}
