//! Recalled timer messages (RocketMQ 5's RecallMessage).
//!
//! A recall is a marker record in `rmq_sys_wheel_timer` queue 0, the topic where RocketMQ's
//! timer keeps its delete markers: `TIMER_DEL_UNIQKEY` names the message as
//! `{real topic}+{UNIQ_KEY}` and `TIMER_DELIVER_MS` its due time. The store keeps its markers
//! in a set, and the schedule drops every parked timer message with that key and that due time
//! rather than deliver it: duplicates of it too (a producer's retry), and copies a crash made it
//! park twice, but not the same message sent again for another time.
//!
//! A key leaves the set once no parked record can be its message any more. Each park of a
//! timer message happens in a pass that began before it was due, so once a pass begins after
//! the due time (by a shortest level, for sends that read their clock just before), every
//! parked copy lies below the CommitLog's end then: the key's horizon. When every delay level
//! has delivered past its horizon, the key goes. Reopening reads the set back from the marker
//! queue, so a crash that rolls the schedule's progress back meets its markers again.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

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

/// The recalled messages whose copies may still be parked.
#[derive(Default)]
pub(crate) struct Recalls {
    /// (due ms, key) -> its horizon: the CommitLog's end when a pass began past the due time.
    keys: Mutex<BTreeMap<(i64, String), Option<u64>>>,
    /// How many keys there are, read without the lock on every delivery.
    len: AtomicUsize,
}

impl Recalls {
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Adds `key`, due at `due_ms`; false if it was there already.
    pub(crate) fn insert(&self, key: &str, due_ms: i64) -> bool {
        let mut keys = self.keys.lock();
        let added = keys.insert((due_ms, key.to_owned()), None).is_none();
        self.len.store(keys.len(), Ordering::Release);
        added
    }

    /// Removes `key` due at `due_ms`; true if it was there.
    pub(crate) fn remove(&self, key: &str, due_ms: i64) -> bool {
        let mut keys = self.keys.lock();
        let removed = keys.remove(&(due_ms, key.to_owned())).is_some();
        self.len.store(keys.len(), Ordering::Release);
        removed
    }

    /// Whether the parked record with `properties`, bound for `real_topic`, is a recalled
    /// timer message: its key and its `TIMER_DELIVER_MS` are a marker's.
    pub(crate) fn matches(&self, real_topic: &str, properties: &[u8]) -> bool {
        if self.len() == 0 {
            return false;
        }
        let Some(due) = message::property(properties, message::PROPERTY_TIMER_DELIVER_MS)
            .and_then(|v| v.trim().parse::<i64>().ok())
        else {
            return false;
        };
        let Some(uniq) = message::property(properties, message::PROPERTY_UNIQ_KEY_SHORT) else {
            return false;
        };
        self.keys
            .lock()
            .contains_key(&(due, delete_key(real_topic, uniq)))
    }

    /// Gives the keys due at or before `ms` that have none the horizon `end`.
    pub(crate) fn mark_due(&self, ms: i64, end: u64) {
        if self.len() == 0 {
            return;
        }
        let mut keys = self.keys.lock();
        for (_, horizon) in keys.range_mut(..(ms.saturating_add(1), String::new())) {
            horizon.get_or_insert(end);
        }
    }

    /// Removes the keys whose horizon every delay level has delivered past (`delivered`:
    /// the lowest CommitLog offset of a record still parked); returns how many.
    pub(crate) fn purge_delivered(&self, delivered: u64) -> usize {
        if self.len() == 0 {
            return 0;
        }
        let mut keys = self.keys.lock();
        let mut purged = 0;
        // Horizons grow with due times: the first key not past its horizon ends the purge.
        while let Some((_, Some(horizon))) = keys.first_key_value() {
            if *horizon > delivered {
                break;
            }
            keys.pop_first();
            purged += 1;
        }
        self.len.store(keys.len(), Ordering::Release);
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
    fn a_recall_matches_its_key_at_its_due_time_only() {
        let recalls = Recalls::default();
        assert!(recalls.insert(&delete_key("T", "U1"), 1_000));
        assert!(!recalls.insert(&delete_key("T", "U1"), 1_000));
        assert_eq!(recalls.len(), 1);
        let timer = props(&[("UNIQ_KEY", "U1"), ("TIMER_DELIVER_MS", "1000")]);
        assert!(recalls.matches("T", &timer));
        // Every copy matches: the key stays.
        assert!(recalls.matches("T", &timer));
        // Another topic's message with that id, the message sent again for another time, and
        // a delay-level message are not it.
        assert!(!recalls.matches("Other", &timer));
        let later = props(&[("UNIQ_KEY", "U1"), ("TIMER_DELIVER_MS", "2000")]);
        assert!(!recalls.matches("T", &later));
        assert!(!recalls.matches("T", &props(&[("UNIQ_KEY", "U1"), ("DELAY", "3")])));
        assert!(recalls.remove(&delete_key("T", "U1"), 1_000));
        assert!(!recalls.matches("T", &timer));
    }

    #[test]
    fn keys_go_once_the_schedule_delivered_past_their_horizon() {
        let recalls = Recalls::default();
        for (i, due) in [30, 10, 20, 40].iter().enumerate() {
            recalls.insert(&delete_key("T", &i.to_string()), *due);
        }
        // Without a horizon nothing goes, however far delivery got.
        assert_eq!(recalls.purge_delivered(u64::MAX), 0);
        recalls.mark_due(20, 500);
        recalls.mark_due(30, 900);
        // The later horizon does not move the earlier ones.
        recalls.mark_due(40, 100);
        assert_eq!(recalls.purge_delivered(499), 0);
        assert_eq!(recalls.purge_delivered(500), 2);
        assert_eq!(recalls.purge_delivered(899), 0);
        // Due 40 was marked with 100, but its turn comes after 30's.
        assert_eq!(recalls.purge_delivered(900), 2);
        assert_eq!(recalls.len(), 0);
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
