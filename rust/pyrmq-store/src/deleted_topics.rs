//! Topics deleted while their records stay in the CommitLog.
//!
//! Deleting a topic removes its ConsumeQueues at once, as RocketMQ's `deleteTopics` does, but
//! its records stay until retention removes their segments. Without a record of the deletion,
//! the next recovery would rebuild queues from them (RocketMQ's reput does). So each deletion
//! keeps the CommitLog offset it happened at, in `config/deletedTopics.json`: records of the
//! topic below it belong to the deleted topic and are not dispatched or found again, while a
//! topic created again under the same name starts afresh above it. An entry is dropped once
//! the CommitLog no longer holds anything below its offset.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::RwLock;

use crate::error::{StoreError, StoreResult};
use crate::state_file;

pub(crate) struct DeletedTopics {
    path: PathBuf,
    /// Topic -> the CommitLog offset at which it was deleted.
    topics: RwLock<HashMap<String, u64>>,
    /// Whether any topic is listed: recovery asks for every record, and usually none is.
    any: AtomicBool,
}

impl DeletedTopics {
    pub(crate) fn load(path: &Path) -> StoreResult<Self> {
        let mut topics = HashMap::new();
        if let Some(value) = state_file::read_json(path)? {
            let bad = |why: &str| StoreError::Config(format!("{}: {why}", path.display()));
            let table = value
                .get("deletedTopics")
                .and_then(serde_json::Value::as_object)
                .ok_or_else(|| bad("no deletedTopics object"))?;
            for (topic, at) in table {
                let at = at
                    .as_u64()
                    .ok_or_else(|| bad(&format!("offset of {topic:?} is not an integer")))?;
                topics.insert(topic.clone(), at);
            }
        }
        Ok(Self {
            path: path.to_owned(),
            any: AtomicBool::new(!topics.is_empty()),
            topics: RwLock::new(topics),
        })
    }

    /// Whether the record of `topic` at `phy` belongs to a deleted topic.
    pub(crate) fn covers(&self, topic: &str, phy: u64) -> bool {
        self.any.load(Ordering::Acquire)
            && self.topics.read().get(topic).is_some_and(|at| phy < *at)
    }

    /// Records that `topic` was deleted at CommitLog offset `at`, durably.
    pub(crate) fn record(&self, topic: &str, at: u64) -> StoreResult<()> {
        let mut topics = self.topics.write();
        let previous = topics.insert(topic.to_owned(), at);
        if let Err(e) = state_file::write_json(&self.path, &encode(&topics)) {
            match previous {
                Some(p) => topics.insert(topic.to_owned(), p),
                None => topics.remove(topic),
            };
            return Err(e);
        }
        self.any.store(true, Ordering::Release);
        Ok(())
    }

    /// Forgets deletions with nothing of theirs left below `min_phy` (the CommitLog's start).
    pub(crate) fn prune(&self, min_phy: u64) -> StoreResult<()> {
        if !self.any.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut topics = self.topics.write();
        let before = topics.len();
        topics.retain(|_, at| *at > min_phy);
        if topics.len() == before {
            return Ok(());
        }
        self.any.store(!topics.is_empty(), Ordering::Release);
        state_file::write_json(&self.path, &encode(&topics))
    }
}

fn encode(topics: &HashMap<String, u64>) -> serde_json::Value {
    let mut sorted: Vec<_> = topics.iter().collect();
    sorted.sort();
    let table: serde_json::Map<String, serde_json::Value> = sorted
        .into_iter()
        .map(|(topic, at)| (topic.clone(), (*at).into()))
        .collect();
    serde_json::json!({ "deletedTopics": table })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deletions_persist_and_are_pruned_once_their_records_are_gone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config").join("deletedTopics.json");
        let deleted = DeletedTopics::load(&path).unwrap();
        assert!(!deleted.covers("T", 0));
        deleted.record("T", 100).unwrap();
        deleted.record("U", 300).unwrap();
        assert!(deleted.covers("T", 99));
        assert!(!deleted.covers("T", 100));
        assert!(!deleted.covers("V", 0));

        let again = DeletedTopics::load(&path).unwrap();
        assert!(again.covers("U", 299));
        again.prune(100).unwrap();
        assert!(!again.covers("T", 0));
        assert!(again.covers("U", 299));
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            r#"{"deletedTopics":{"U":300}}"#
        );
        again.prune(300).unwrap();
        assert!(!again.covers("U", 0));
    }

    #[test]
    fn a_malformed_file_is_a_config_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("deletedTopics.json");
        for bad in [&b"["[..], b"{}", br#"{"deletedTopics":{"T":"x"}}"#] {
            std::fs::write(&path, bad).unwrap();
            assert!(matches!(
                DeletedTopics::load(&path),
                Err(StoreError::Config(_))
            ));
        }
    }
}
