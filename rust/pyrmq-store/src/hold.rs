//! Held pulls (long polling), keyed by (topic, queue id) and woken by dispatch.
//!
//! A pull that found nothing is registered here with the queue offset it waits past and the tag
//! codes it accepts. Dispatch calls [`HoldTable::on_arrival`] under the put lock right after it
//! publishes a queue's new max offset; a matching pull moves to the ready list and an eventfd
//! becomes readable, so the event loop learns of it in one wakeup and answers exactly the pulls
//! listed. Registration reads the queue's max offset under the table lock after inserting, so
//! an arrival published while a pull is being parked is never lost (apache/rocketmq#7358): either
//! the registration sees the new max, or the arrival finds the pull in the table.

use std::os::fd::RawFd;
use std::sync::atomic::{fence, AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::queue_map::QueueMap;
use crate::wakeup::EventFd;

/// Why a held pull became ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum WakeReason {
    /// A matching message arrived.
    Arrival = 0,
    /// A message had arrived while the pull was being parked.
    AtPark = 1,
    /// The periodic re-check found the queue past the pull's offset.
    Check = 2,
}

struct Held {
    id: u64,
    queue_offset: u64,
    tags_codes: Option<Vec<i64>>,
}

impl Held {
    fn accepts(&self, max_offset: u64, tags: Option<&[i64]>) -> bool {
        if max_offset <= self.queue_offset {
            return false;
        }
        match (&self.tags_codes, tags) {
            (None, _) | (_, None) => true,
            (Some(want), Some(got)) => got.iter().any(|t| want.contains(t)),
        }
    }
}

pub struct HoldTable {
    held: Mutex<QueueMap<Vec<Held>>>,
    held_count: AtomicUsize,
    ready: Mutex<Vec<(u64, WakeReason)>>,
    fd: EventFd,
}

impl HoldTable {
    pub fn new() -> std::io::Result<Self> {
        Ok(Self {
            held: Mutex::new(QueueMap::default()),
            held_count: AtomicUsize::new(0),
            ready: Mutex::new(Vec::new()),
            fd: EventFd::new()?,
        })
    }

    pub fn fd(&self) -> RawFd {
        self.fd.raw()
    }

    pub fn held_count(&self) -> usize {
        self.held_count.load(Ordering::Acquire)
    }

    fn push_ready(&self, woken: impl IntoIterator<Item = (u64, WakeReason)>) {
        let mut ready = self.ready.lock();
        let was_empty = ready.is_empty();
        ready.extend(woken);
        if was_empty && !ready.is_empty() {
            self.fd.signal();
        }
    }

    /// Parks pull `id` until (topic, queue id) passes `queue_offset` with an accepted tag.
    /// `max_offset` reads the queue's current max offset; it is called under the table lock.
    pub fn hold(
        &self,
        id: u64,
        topic: &str,
        queue_id: i32,
        queue_offset: u64,
        tags_codes: Option<Vec<i64>>,
        max_offset: impl Fn() -> u64,
    ) {
        let mut held = self.held.lock();
        // Counted before the max offset is read, as dispatch publishes before it reads the
        // count (a SeqCst fence on each side): either this read sees the new max offset, or
        // that arrival sees the count and waits for the table lock held here.
        self.held_count.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if max_offset() > queue_offset {
            self.held_count.fetch_sub(1, Ordering::AcqRel);
            drop(held);
            self.push_ready([(id, WakeReason::AtPark)]);
            return;
        }
        held.get_or_insert_with(topic, queue_id, Vec::new)
            .push(Held {
                id,
                queue_offset,
                tags_codes,
            });
    }

    /// Called by dispatch after publishing (topic, queue id) up to `max_offset` with messages
    /// carrying `tags` (`None`: unknown, wake everyone past their offset).
    pub fn on_arrival(&self, topic: &str, queue_id: i32, max_offset: u64, tags: Option<&[i64]>) {
        // Pairs with the fence in `hold`: the max offset published before it is seen there.
        fence(Ordering::SeqCst);
        if self.held_count() == 0 {
            return;
        }
        let mut woken = Vec::new();
        {
            let mut held = self.held.lock();
            if let Some(list) = held.get_mut(topic, queue_id) {
                list.retain(|h| {
                    let wake = h.accepts(max_offset, tags);
                    if wake {
                        woken.push((h.id, WakeReason::Arrival));
                    }
                    !wake
                });
                if list.is_empty() {
                    held.remove(topic, queue_id);
                }
            }
        }
        if !woken.is_empty() {
            self.held_count.fetch_sub(woken.len(), Ordering::AcqRel);
            self.push_ready(woken);
        }
    }

    /// Removes pull `id`, held on (topic, queue id), whose time ran out; returns whether it was
    /// still held. Only its queue's pulls are looked at: pulls time out all the time, and a
    /// walk over every held pull under the lock that arrivals need made that quadratic.
    pub fn cancel(&self, topic: &str, queue_id: i32, id: u64) -> bool {
        let mut held = self.held.lock();
        let Some(list) = held.get_mut(topic, queue_id) else {
            return false;
        };
        let Some(pos) = list.iter().position(|h| h.id == id) else {
            return false;
        };
        list.swap_remove(pos);
        if list.is_empty() {
            held.remove(topic, queue_id);
        }
        drop(held);
        self.held_count.fetch_sub(1, Ordering::AcqRel);
        true
    }

    /// The periodic re-check: wakes every pull whose queue is past its offset.
    pub fn check(&self, max_offset: impl Fn(&str, i32) -> u64) {
        let mut woken = Vec::new();
        {
            let mut held = self.held.lock();
            held.retain(|topic, queue_id, list| {
                let max = max_offset(topic, queue_id);
                list.retain(|h| {
                    let wake = max > h.queue_offset;
                    if wake {
                        woken.push((h.id, WakeReason::Check));
                    }
                    !wake
                });
                !list.is_empty()
            });
        }
        if !woken.is_empty() {
            self.held_count.fetch_sub(woken.len(), Ordering::AcqRel);
            self.push_ready(woken);
        }
    }

    /// Takes the pulls ready to be answered and clears the fd's readiness.
    pub fn drain_ready(&self) -> Vec<(u64, WakeReason)> {
        let mut ready = self.ready.lock();
        if ready.is_empty() {
            // The fd is signalled exactly while the list is non-empty (both change under this
            // lock), so there is nothing to clear: the broker drains after every append.
            return Vec::new();
        }
        self.fd.clear();
        std::mem::take(&mut *ready)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pull_parked_while_its_queue_moves_is_never_left_asleep() {
        use std::sync::atomic::AtomicU64;
        use std::sync::mpsc;
        let t = HoldTable::new().unwrap();
        let max = AtomicU64::new(5);
        let (t, max) = (&t, &max);
        std::thread::scope(|s| {
            // The put lands between the parking pull's read of the max offset and its
            // registration: it publishes 6 and reports the arrival meanwhile.
            t.hold(1, "T", 0, 5, None, || {
                let seen = max.load(Ordering::Acquire);
                let (done, finished) = mpsc::channel();
                s.spawn(move || {
                    max.fetch_max(6, Ordering::AcqRel);
                    t.on_arrival("T", 0, 6, None);
                    let _ = done.send(());
                });
                // An arrival that sees the pull coming waits for the table; give one that
                // does not the time to pass it by.
                let _ = finished.recv_timeout(std::time::Duration::from_millis(50));
                seen
            });
        });
        assert_eq!(t.held_count(), 0);
        assert_eq!(t.drain_ready(), vec![(1, WakeReason::Arrival)]);
    }

    #[test]
    fn arrival_wakes_only_matching_pulls_past_their_offset() {
        let t = HoldTable::new().unwrap();
        t.hold(1, "T", 0, 5, None, || 5);
        t.hold(2, "T", 0, 5, Some(vec![7]), || 5);
        t.hold(3, "T", 0, 9, None, || 5);
        t.hold(4, "T", 1, 5, None, || 5);
        assert_eq!(t.held_count(), 4);
        t.on_arrival("T", 0, 6, Some(&[8]));
        assert_eq!(t.drain_ready(), vec![(1, WakeReason::Arrival)]);
        t.on_arrival("T", 0, 7, Some(&[7]));
        assert_eq!(t.drain_ready(), vec![(2, WakeReason::Arrival)]);
        assert_eq!(t.held_count(), 2);
        assert!(!t.cancel("T", 1, 3));
        assert!(t.cancel("T", 0, 3));
        assert!(!t.cancel("T", 0, 3));
        t.check(|_, q| if q == 1 { 6 } else { 0 });
        assert_eq!(t.drain_ready(), vec![(4, WakeReason::Check)]);
        assert_eq!(t.held_count(), 0);
    }

    fn readable(fd: RawFd) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: polls one live pollfd without waiting.
        unsafe { libc::poll(&raw mut p, 1, 0) == 1 }
    }

    #[test]
    fn the_fd_is_readable_exactly_while_pulls_are_ready() {
        let t = HoldTable::new().unwrap();
        assert!(t.drain_ready().is_empty());
        assert!(!readable(t.fd()));
        t.hold(1, "T", 0, 5, None, || 5);
        t.hold(2, "T", 1, 5, None, || 5);
        t.on_arrival("T", 0, 6, None);
        assert!(readable(t.fd()));
        t.on_arrival("T", 1, 6, None);
        assert_eq!(t.drain_ready().len(), 2);
        assert!(!readable(t.fd()));
        // An empty drain leaves a later signal intact.
        assert!(t.drain_ready().is_empty());
        t.hold(3, "T", 0, 6, None, || 6);
        t.on_arrival("T", 0, 7, None);
        assert!(readable(t.fd()));
        assert_eq!(t.drain_ready(), vec![(3, WakeReason::Arrival)]);
        assert!(!readable(t.fd()));
    }

    #[test]
    fn a_message_published_before_parking_wakes_at_once() {
        let t = HoldTable::new().unwrap();
        t.hold(9, "T", 0, 3, Some(vec![1]), || 4);
        assert_eq!(t.drain_ready(), vec![(9, WakeReason::AtPark)]);
        assert_eq!(t.held_count(), 0);
    }
}
