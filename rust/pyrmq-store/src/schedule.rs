//! Delayed messages: delivery from SCHEDULE_TOPIC_XXXX when they fall due.
//!
//! `put` parks a message with a `DELAY` level in queue `level - 1` of SCHEDULE_TOPIC_XXXX, its
//! unit's tag-code field holding the due time. One level has one delay, so each queue is in due
//! order: a pass delivers each queue from its offset up to the first unit not yet due, storing
//! the message again under its real topic and queue (`REAL_TOPIC`, `REAL_QID`) without its
//! `DELAY`, as RocketMQ's ScheduleMessageService does. Delivery is at least once: the offsets
//! are persisted (`config/delayOffset.json`) only up to records the CommitLog flush covered, so
//! a crash may deliver a message twice, never lose one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::error::{StoreError, StoreResult};
use crate::message::{
    self, MessageInput, MAX_PROPERTIES_LEN, PROPERTY_DELAY, PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC, PROPERTY_WAIT,
};
use crate::state_file;
use crate::store::{Inner, SCHEDULE_TOPIC};

/// What one pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pass {
    /// Messages stored again under their real topic.
    pub delivered: usize,
    /// Timer messages not yet due, parked again in a shorter level.
    pub parked_again: usize,
    /// Recalled timer messages dropped.
    pub recalled: usize,
    /// The earliest due time of a message left waiting, if any.
    pub next_due_ms: Option<i64>,
    /// A level stopped on an error worth retrying (a full disk, say): its message waits.
    pub failed: bool,
}

/// Each level's next queue offset to deliver, and the file that keeps them.
pub(crate) struct DelayOffsets {
    path: PathBuf,
    offsets: Mutex<BTreeMap<u32, u64>>,
    dirty: AtomicBool,
    /// Held for a whole pass: passes never overlap, so none delivers a message twice.
    pass: Mutex<()>,
    /// Held while the file is written: the periodic flush and an explicit one may persist at
    /// once, and would share the temporary file. Holds the number of the snapshot last
    /// written, so that an older one, persisted late, never replaces it.
    writing: Mutex<u64>,
    /// The last save failed (a full disk): deliveries wait for one that succeeds, so that a
    /// crash meanwhile delivers again only what the failed saves missed.
    unsaved: AtomicBool,
    /// Snapshots taken so far, numbered in the order of their contents.
    taken: AtomicU64,
    /// Messages and bytes delivered since the store opened: puts the broker never sees, which
    /// its statistics still count, as RocketMQ's store statistics count every put.
    delivered: AtomicU64,
    delivered_bytes: AtomicU64,
}

impl DelayOffsets {
    /// Reads `path` (RocketMQ's `{"offsetTable":{"1":5,...}}`); a missing file is no progress.
    pub(crate) fn load(path: &Path) -> StoreResult<Self> {
        let offsets = match state_file::read_json(path)? {
            Some(value) => parse(&value).map_err(|why| {
                StoreError::Config(format!("delay offsets {}: {why}", path.display()))
            })?,
            None => BTreeMap::new(),
        };
        Ok(Self {
            path: path.to_owned(),
            offsets: Mutex::new(offsets),
            dirty: AtomicBool::new(false),
            pass: Mutex::new(()),
            writing: Mutex::new(0),
            unsaved: AtomicBool::new(false),
            taken: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            delivered_bytes: AtomicU64::new(0),
        })
    }

    /// Messages and bytes delivered since the store opened.
    pub(crate) fn delivered(&self) -> (u64, u64) {
        (
            self.delivered.load(Ordering::Acquire),
            self.delivered_bytes.load(Ordering::Acquire),
        )
    }

    pub(crate) fn snapshot(&self) -> BTreeMap<u32, u64> {
        self.offsets.lock().clone()
    }

    /// Replaces every level's offset: a slave keeps its master's, so that it goes on from
    /// there if it is made a master. Waits for a pass in progress.
    pub(crate) fn replace(&self, new: BTreeMap<u32, u64>) {
        let _pass = self.pass.lock();
        let mut offsets = self.offsets.lock();
        if *offsets != new {
            *offsets = new;
            self.dirty.store(true, Ordering::Release);
        }
    }

    fn get(&self, level: u32) -> u64 {
        self.offsets.lock().get(&level).copied().unwrap_or(0)
    }

    fn set(&self, level: u32, offset: u64) {
        let mut offsets = self.offsets.lock();
        if offsets.insert(level, offset) != Some(offset) {
            self.dirty.store(true, Ordering::Release);
        }
    }

    /// Takes the offsets to persist, numbered, if they changed: call before the CommitLog
    /// flush that must cover the records they count, then [`Self::persist`] them.
    pub(crate) fn take_changed(&self) -> Option<(u64, BTreeMap<u32, u64>)> {
        if !self.dirty.swap(false, Ordering::AcqRel) {
            return None;
        }
        let offsets = self.offsets.lock();
        let number = self.taken.fetch_add(1, Ordering::AcqRel) + 1;
        Some((number, offsets.clone()))
    }

    /// Writes snapshot `number` to the file (through a temporary file, synced, then renamed),
    /// unless a later one is there already: two flushes may persist out of order. On failure
    /// the offsets are marked changed again.
    pub(crate) fn persist(&self, number: u64, offsets: &BTreeMap<u32, u64>) -> StoreResult<()> {
        let mut written = self.writing.lock();
        if *written > number {
            return Ok(());
        }
        let result = state_file::write_json(&self.path, &encode(offsets));
        match result {
            Ok(()) => *written = number,
            Err(_) => self.dirty.store(true, Ordering::Release),
        }
        self.unsaved.store(result.is_err(), Ordering::Release);
        result
    }
}

fn parse(value: &serde_json::Value) -> Result<BTreeMap<u32, u64>, String> {
    let document = value
        .as_object()
        .ok_or_else(|| "not a JSON object".to_owned())?;
    let Some(table) = document.get("offsetTable") else {
        return Ok(BTreeMap::new());
    };
    let table = table
        .as_object()
        .ok_or_else(|| "offsetTable is not an object".to_owned())?;
    let mut out = BTreeMap::new();
    for (level, offset) in table {
        let level = level
            .parse::<u32>()
            .map_err(|_| format!("level {level:?} is not a number"))?;
        let offset = offset
            .as_u64()
            .ok_or_else(|| format!("offset of level {level} is not a non-negative integer"))?;
        out.insert(level, offset);
    }
    Ok(out)
}

fn encode(offsets: &BTreeMap<u32, u64>) -> serde_json::Value {
    let table: serde_json::Map<String, serde_json::Value> = offsets
        .iter()
        .map(|(level, offset)| (level.to_string(), (*offset).into()))
        .collect();
    serde_json::json!({ "offsetTable": table })
}

/// Whether a put that failed this way may succeed later, so the message should wait.
fn retryable(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::DiskFull(_) | StoreError::Closed | StoreError::Io { .. }
    )
}

/// Delivers every message of every level due at `now_ms`.
pub(crate) fn deliver_due(inner: &Inner, offsets: &DelayOffsets, now_ms: i64) -> Pass {
    let _pass = offsets.pass.lock();
    let delays = &inner.config.message_delay_level_ms;
    let mut pass = Pass::default();
    if offsets.unsaved.load(Ordering::Acquire) {
        pass.failed = true;
        return pass;
    }
    // Recalls of messages due a shortest level ago and more: no later park can be theirs.
    let shortest = delays.iter().min().map_or(0, |d| *d as i64);
    inner.recalls.mark_due(
        now_ms.saturating_sub(shortest),
        inner.commit_log.max_offset(),
    );
    for (i, delay) in delays.iter().enumerate() {
        let level = i as u32 + 1;
        let Some(q) = inner.queue(SCHEDULE_TOPIC, i as i32) else {
            continue;
        };
        // Progress outside the queue's range (retention, a lost file) restarts at its edge.
        let end = q.max_offset();
        let mut offset = offsets.get(level).clamp(q.min_offset(), end);
        // Only units there when the pass began: a timer message delivered early is parked
        // again, maybe in this very level, and must wait for a later pass.
        while offset < end {
            let Some(unit) = q.unit(offset) else {
                break;
            };
            // A due time further off than the level's delay means the clock went back: due now.
            let due = if unit.tags_code > now_ms.saturating_add(*delay as i64) {
                now_ms
            } else {
                unit.tags_code
            };
            if due > now_ms {
                pass.next_due_ms = Some(pass.next_due_ms.map_or(due, |d| d.min(due)));
                break;
            }
            match deliver(inner, unit.phy_offset, now_ms) {
                Ok(Delivery::Stored(wrote)) => {
                    pass.delivered += 1;
                    offsets.delivered.fetch_add(1, Ordering::AcqRel);
                    offsets.delivered_bytes.fetch_add(wrote, Ordering::AcqRel);
                }
                Ok(Delivery::ParkedAgain) => pass.parked_again += 1,
                Ok(Delivery::Recalled) => pass.recalled += 1,
                Ok(Delivery::Gone) => {}
                Err(e) if retryable(&e) => {
                    log::warn!("delay level {level}: delivering offset {offset} failed: {e}");
                    pass.failed = true;
                    break;
                }
                Err(e) => log::error!(
                    "delay level {level}: the message at queue offset {offset} cannot be \
                     delivered and is skipped: {e}"
                ),
            }
            offset += 1;
        }
        offsets.set(level, offset);
    }
    if inner.recalls.len() > 0 {
        inner.recalls.purge_delivered(lowest_parked(inner, offsets));
    }
    pass
}

/// The lowest CommitLog offset of a record some delay level has yet to deliver; `u64::MAX`
/// when every level has delivered all it holds.
fn lowest_parked(inner: &Inner, offsets: &DelayOffsets) -> u64 {
    let mut lowest = u64::MAX;
    for level in 0..inner.config.message_delay_level_ms.len() {
        let Some(q) = inner.queue(SCHEDULE_TOPIC, level as i32) else {
            continue;
        };
        let next = offsets.get(level as u32 + 1).max(q.min_offset());
        if next < q.max_offset() {
            // A unit that cannot be read holds everything up.
            lowest = lowest.min(q.unit(next).map_or(0, |unit| unit.phy_offset));
        }
    }
    lowest
}

/// What became of a parked record that fell due.
enum Delivery {
    /// Stored under its real topic and queue: the bytes written.
    Stored(u64),
    /// A timer message not yet due: parked again, in a shorter level.
    ParkedAgain,
    /// A recalled timer message: dropped.
    Recalled,
    /// No such record any more (retention removed it).
    Gone,
}

/// Stores the parked record at `phy` again under its real topic and queue.
fn deliver(inner: &Inner, phy: u64, now_ms: i64) -> StoreResult<Delivery> {
    let Some(raw) = inner.look(phy)? else {
        return Ok(Delivery::Gone);
    };
    let rec = message::decode(&raw, false).map_err(|e| StoreError::Corrupt {
        phy_offset: phy,
        reason: e.to_string(),
    })?;
    let (Some(topic), Some(queue_id)) = (
        message::property(rec.properties, PROPERTY_REAL_TOPIC),
        message::property(rec.properties, PROPERTY_REAL_QUEUE_ID)
            .and_then(|q| q.trim().parse::<i32>().ok()),
    ) else {
        return Err(StoreError::IllegalMessage(format!(
            "the delayed record at offset {phy} names no real topic and queue"
        )));
    };
    if inner.recalls.matches(topic, rec.properties) {
        return Ok(Delivery::Recalled);
    }
    let mut properties =
        message::without_properties(rec.properties, &[PROPERTY_DELAY, PROPERTY_WAIT]);
    let kept = properties.len();
    message::push_property(&mut properties, PROPERTY_WAIT, "false");
    // A record parked at the size limit has no room for the flag, and it was acknowledged:
    // delivering it matters more than marking it.
    if properties.len() > MAX_PROPERTIES_LEN {
        properties.truncate(kept);
    }
    let input = MessageInput {
        topic,
        queue_id,
        flag: rec.flag,
        body: rec.body,
        properties: &properties,
        sys_flag: rec.sys_flag,
        born_timestamp_ms: rec.born_timestamp_ms,
        born_host: rec.born_host,
        reconsume_times: rec.reconsume_times,
        prepared_transaction_offset: rec.prepared_transaction_offset,
    };
    let early = crate::store::timer_due(&properties, now_ms).is_some_and(|due| due > now_ms);
    let wrote = inner.put_internal(&[input], now_ms)?.wrote_bytes;
    Ok(if early {
        Delivery::ParkedAgain
    } else {
        Delivery::Stored(wrote)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_round_trip_through_their_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config").join("delayOffset.json");
        let offsets = DelayOffsets::load(&path).unwrap();
        assert!(offsets.take_changed().is_none());
        offsets.set(1, 5);
        offsets.set(18, 2);
        let (number, changed) = offsets.take_changed().unwrap();
        offsets.persist(number, &changed).unwrap();
        assert!(offsets.take_changed().is_none());
        let again = DelayOffsets::load(&path).unwrap();
        assert_eq!(again.snapshot(), BTreeMap::from([(1, 5), (18, 2)]));
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            r#"{"offsetTable":{"1":5,"18":2}}"#
        );
    }

    #[test]
    fn offsets_replaced_by_a_masters_are_persisted_once() {
        let dir = tempfile::tempdir().unwrap();
        let offsets = DelayOffsets::load(&dir.path().join("delayOffset.json")).unwrap();
        offsets.set(1, 5);
        offsets.take_changed().unwrap();
        let masters = BTreeMap::from([(1, 9), (2, 4)]);
        offsets.replace(masters.clone());
        assert_eq!(offsets.take_changed().unwrap().1, masters);
        offsets.replace(masters.clone());
        assert!(offsets.take_changed().is_none());
        assert_eq!(offsets.get(2), 4);
    }

    #[test]
    fn persists_from_two_threads_at_once_all_succeed() {
        let dir = tempfile::tempdir().unwrap();
        let offsets = DelayOffsets::load(&dir.path().join("delayOffset.json")).unwrap();
        std::thread::scope(|scope| {
            for level in 1..=2 {
                let offsets = &offsets;
                scope.spawn(move || {
                    for i in 0..200 {
                        let table = BTreeMap::from([(level, i)]);
                        offsets
                            .persist(u64::from(level) * 1000 + i, &table)
                            .unwrap();
                    }
                });
            }
        });
    }

    #[test]
    fn a_snapshot_persisted_late_never_replaces_a_newer_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("delayOffset.json");
        let offsets = DelayOffsets::load(&path).unwrap();
        offsets.set(1, 5);
        let older = offsets.take_changed().unwrap();
        offsets.set(1, 9);
        let newer = offsets.take_changed().unwrap();
        assert!(newer.0 > older.0);
        offsets.persist(newer.0, &newer.1).unwrap();
        offsets.persist(older.0, &older.1).unwrap();
        let again = DelayOffsets::load(&path).unwrap();
        assert_eq!(again.snapshot(), BTreeMap::from([(1, 9)]));
    }

    #[test]
    fn a_malformed_file_is_a_config_error() {
        for bad in [
            &b"{"[..],
            br#"{"offsetTable":[]}"#,
            br#"{"offsetTable":{"x":1}}"#,
            br#"{"offsetTable":{"1":-1}}"#,
            b"[]",
            br#""x""#,
            b"5",
        ] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("delayOffset.json");
            std::fs::write(&path, bad).unwrap();
            assert!(matches!(
                DelayOffsets::load(&path),
                Err(StoreError::Config(_))
            ));
        }
    }
}
