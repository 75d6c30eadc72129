//! Recalled timer messages (RocketMQ 5's RecallMessage).
//!
//! A recall is a marker record in `rmq_sys_wheel_timer` queue 0, the topic where RocketMQ's
//! timer keeps its delete markers: `TIMER_DEL_UNIQKEY` names the message as
//! `{real topic}+{UNIQ_KEY}` and `TIMER_DELIVER_MS` its due time. The store keeps the keys of
//! its markers in a set, and the schedule drops a parked timer message whose key is in it
//! rather than deliver it. A key leaves the set when its message is dropped, or when a pass of
//! the schedule has caught up past its due time plus the shortest delay level (no parked
//! record can be that message then: each park of it falls due by then). Reopening reads the
//! set back from the marker queue, so a crash that rolls the schedule's progress back meets
//! its markers again.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};

use foldhash::HashMap;
use parking_lot::Mutex;

use crate::message;

/// Where recall markers are stored.
pub const RECALL_TOPIC: &str = "rmq_sys_wheel_timer";
/// The recalled message's key, `{real topic}+{UNIQ_KEY}`, in a marker.
pub const PROPERTY_TIMER_DEL_UNIQKEY: &str = "TIMER_DEL_UNIQKEY";
/// RocketMQ's tag on recall markers.
pub const RECALL_TAG: &str = "_RECALL_TAG_";

/// The key RocketMQ's timer names a message by.
pub fn delete_key(topic: &str, uniq_key: &str) -> String {
    format!("{topic}+{uniq_key}")
}

#[derive(Default)]
struct Keys {
    due: HashMap<String, i64>,
    by_due: BTreeSet<(i64, String)>,
}

/// The recalled messages the schedule has yet to meet.
#[derive(Default)]
pub(crate) struct Recalls {
    keys: Mutex<Keys>,
    /// How many keys there are, read without the lock on every delivery.
    len: AtomicUsize,
}

impl Recalls {
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Adds `key`, due at `due_ms`; false if it was there already (its due time is kept).
    pub(crate) fn insert(&self, key: &str, due_ms: i64) -> bool {
        let mut keys = self.keys.lock();
        if keys.due.contains_key(key) {
            return false;
        }
        keys.due.insert(key.to_owned(), due_ms);
        keys.by_due.insert((due_ms, key.to_owned()));
        self.len.store(keys.due.len(), Ordering::Release);
        true
    }

    /// Removes `key`; true if it was there.
    pub(crate) fn remove(&self, key: &str) -> bool {
        if self.len() == 0 {
            return false;
        }
        let mut keys = self.keys.lock();
        let Some(due) = keys.due.remove(key) else {
            return false;
        };
        keys.by_due.remove(&(due, key.to_owned()));
        self.len.store(keys.due.len(), Ordering::Release);
        true
    }

    /// Whether the parked record with `properties`, bound for `real_topic`, is a recalled
    /// timer message; its key is removed if so.
    pub(crate) fn take(&self, real_topic: &str, properties: &[u8]) -> bool {
        if self.len() == 0
            || message::property(properties, message::PROPERTY_TIMER_DELIVER_MS).is_none()
        {
            return false;
        }
        match message::property(properties, message::PROPERTY_UNIQ_KEY_SHORT) {
            Some(uniq) => self.remove(&delete_key(real_topic, uniq)),
            None => false,
        }
    }

    /// Removes the keys due before `ms`; returns how many.
    pub(crate) fn purge_due_before(&self, ms: i64) -> usize {
        if self.len() == 0 {
            return 0;
        }
        let mut keys = self.keys.lock();
        let mut purged = 0;
        while let Some((due, _)) = keys.by_due.first() {
            if *due >= ms {
                break;
            }
            let (_, key) = keys.by_due.pop_first().expect("first exists");
            keys.due.remove(&key);
            purged += 1;
        }
        self.len.store(keys.due.len(), Ordering::Release);
        purged
    }

    /// The key and due time of a marker record's properties, if it is one.
    pub(crate) fn marker(properties: &[u8]) -> Option<(&str, i64)> {
        let key = message::property(properties, PROPERTY_TIMER_DEL_UNIQKEY)?;
        let due = message::property(properties, message::PROPERTY_TIMER_DELIVER_MS)?
            .trim()
            .parse()
            .ok()?;
        Some((key, due))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (k, v) in pairs {
            message::push_property(&mut out, k, v);
        }
        out
    }

    #[test]
    fn a_recalled_timer_message_is_taken_once() {
        let recalls = Recalls::default();
        assert!(recalls.insert(&delete_key("T", "U1"), 1_000));
        assert!(!recalls.insert(&delete_key("T", "U1"), 2_000));
        assert_eq!(recalls.len(), 1);
        let timer = props(&[("UNIQ_KEY", "U1"), ("TIMER_DELIVER_MS", "1000")]);
        // Another topic's message with that id, and a delay-level message, are not it.
        assert!(!recalls.take("Other", &timer));
        assert!(!recalls.take("T", &props(&[("UNIQ_KEY", "U1"), ("DELAY", "3")])));
        assert!(recalls.take("T", &timer));
        assert!(!recalls.take("T", &timer));
        assert_eq!(recalls.len(), 0);
    }

    #[test]
    fn purging_removes_only_keys_due_before() {
        let recalls = Recalls::default();
        for (i, due) in [30, 10, 20, 10].iter().enumerate() {
            recalls.insert(&delete_key("T", &i.to_string()), *due);
        }
        assert_eq!(recalls.purge_due_before(10), 0);
        assert_eq!(recalls.purge_due_before(21), 3);
        assert_eq!(recalls.len(), 1);
        assert!(recalls.remove(&delete_key("T", "0")));
        assert_eq!(recalls.purge_due_before(i64::MAX), 0);
    }

    #[test]
    fn a_marker_names_its_key_and_due_time() {
        let marker = props(&[
            ("TAGS", RECALL_TAG),
            (PROPERTY_TIMER_DEL_UNIQKEY, "T+U1"),
            ("TIMER_DELIVER_MS", "1234"),
        ]);
        assert_eq!(Recalls::marker(&marker), Some(("T+U1", 1234)));
        assert_eq!(Recalls::marker(&props(&[("TIMER_DELIVER_MS", "1")])), None);
        assert_eq!(
            Recalls::marker(&props(&[(PROPERTY_TIMER_DEL_UNIQKEY, "k")])),
            None
        );
    }
}
