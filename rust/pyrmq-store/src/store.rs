//! `MessageStore`: the CommitLog, its ConsumeQueues and key index, recovery and retention.
//!
//! Lock order (never take an earlier lock while holding a later one):
//! 0. a delayed-delivery pass
//! 1. the CommitLog put lock
//! 2. the queue table (`queues`)
//! 3. a MappedFileQueue's segment list
//! 4. the index mutex, the arrivals mutex, the delay offsets
//!
//! See LOCKING.md for the reasoning.

use std::collections::HashSet;
use std::fs::File;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use smallvec::SmallVec;

use crate::checkpoint::{Checkpoint, CheckpointFile};
use crate::clock;
use crate::commit_log::{CommitLog, RecoveryReport, ReplicaChunk, FENCE_LEN};
use crate::config::{BrokerRole, FlushDiskType, Retention, StoreConfig};
use crate::consume_queue::{ConsumeQueue, CqUnit};
use crate::deleted_topics::DeletedTopics;
use crate::error::{StoreError, StoreResult};
use crate::fork;
use crate::hold::{HoldTable, WakeReason};
use crate::index::IndexService;
use crate::mapped_file::MappedFile;
use crate::mapped_file_queue::MappedFileQueue;
use crate::message::{
    self, Assigned, MessageInput, MAX_PROPERTIES_LEN, PROPERTY_DELAY, PROPERTY_KEYS,
    PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC, PROPERTY_TAGS, PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELIVER_MS, PROPERTY_UNIQ_KEY_SHORT,
    SYSFLAG_TRANSACTION_MASK, SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK,
};
use crate::queue_map::QueueMap;
use crate::recall::{self, Recalls, RECALL_TOPIC};
use crate::schedule::{self, DelayOffsets, Pass};
use crate::services::Services;
use crate::wakeup::{Arrival, Arrivals};

pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";

/// One queue a replicated frame writes to: its units from `first`, and their tag codes.
struct ReplicaSlot {
    queue: Arc<ConsumeQueue>,
    first: u64,
    fresh: bool,
    units: Vec<(u64, u32, i64)>,
    tags: SmallVec<[i64; 8]>,
}

/// Outcome of an append that stored its messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutStatus {
    PutOk,
    /// Stored and visible, but the fsync did not finish within `sync_flush_timeout_ms`.
    FlushDiskTimeout,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PutEntry {
    pub queue_id: i32,
    pub queue_offset: i64,
    pub phy_offset: i64,
    pub size: u32,
}

#[derive(Clone, Debug)]
pub struct PutOutcome {
    pub status: PutStatus,
    pub entries: Vec<PutEntry>,
    pub store_timestamp_ms: i64,
    pub wrote_bytes: u64,
    /// CommitLog offset just past the group: it is durable once the flushed offset reaches it.
    pub end_offset: u64,
    pub store_host: SocketAddr,
}

/// Which end of a run of equal store times `offset_for_time` answers with: RocketMQ 5's
/// `BoundaryType` (`LOWER` is the answer of RocketMQ 4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TimeBoundary {
    #[default]
    Lower,
    Upper,
}

/// RocketMQ's `GetMessageStatus`, in its declaration order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum GetMessageStatus {
    Found = 0,
    NoMatchedMessage = 1,
    MessageWasRemoving = 2,
    OffsetFoundNull = 3,
    OffsetOverflowBadly = 4,
    OffsetOverflowOne = 5,
    OffsetTooSmall = 6,
    NoMatchedLogicQueue = 7,
    NoMessageInQueue = 8,
}

/// A found record: its bytes stay in the segment, which this handle keeps mapped.
#[derive(Clone)]
pub struct FoundRecord {
    pub file: Arc<MappedFile>,
    pub rel: u64,
    pub size: u32,
    pub queue_offset: u64,
    pub phy_offset: u64,
}

impl FoundRecord {
    pub fn bytes(&self) -> &[u8] {
        self.file.slice(self.rel, self.size as usize)
    }
}

pub struct GetOutcome {
    pub status: GetMessageStatus,
    pub next_begin_offset: u64,
    pub min_offset: u64,
    pub max_offset: u64,
    pub records: Vec<FoundRecord>,
    /// Queue offsets whose records failed their checks; skipped, never returned.
    pub corrupt_offsets: Vec<u64>,
    pub total_bytes: usize,
    /// The last unit examined lies where the page cache has likely dropped its record
    /// (RocketMQ's suggestPullingFromSlave): a broker with slaveReadEnable sends the reader on.
    pub in_disk: bool,
}

/// A read request against one queue.
pub struct GetRequest<'a> {
    pub topic: &'a str,
    pub queue_id: i32,
    /// Signed as on the wire: a negative offset is below every queue's minimum.
    pub queue_offset: i64,
    pub max_count: u32,
    pub max_bytes: Option<u32>,
    /// Tag codes to keep; `None` keeps every message.
    pub tags_codes: Option<&'a [i64]>,
}

/// The machine's physical memory, from `sysconf`; 0 if unknown.
fn physical_memory_bytes() -> u64 {
    // SAFETY: sysconf reads system constants and has no preconditions.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    u64::try_from(pages).unwrap_or(0) * u64::try_from(page).unwrap_or(0)
}

pub(crate) struct Inner {
    pub(crate) config: StoreConfig,
    pub(crate) commit_log: CommitLog,
    queues: RwLock<QueueMap<Arc<ConsumeQueue>>>,
    index: Option<IndexService>,
    checkpoint: CheckpointFile,
    arrivals: Arrivals,
    hold: HoldTable,
    /// Progress of delayed-message delivery, per delay level.
    delays: DelayOffsets,
    /// Timer messages recalled and not yet dropped.
    pub(crate) recalls: Recalls,
    /// Deleted topics whose records the CommitLog still holds.
    deleted: DeletedTopics,
    /// CommitLog offset up to which every record's units and index entries are written.
    dispatched: AtomicU64,
    /// The first record whose index entries could not be written (a full disk), or
    /// `u64::MAX`: checkpoints claim the index durable only below it, so the next open
    /// indexes that record and those after it again.
    index_behind: AtomicU64,
    /// Records below this offset have their index entries on disk (the checkpoint's word);
    /// `None` without a checkpoint, when recovery asks the index itself.
    index_durable: Option<u64>,
    /// How far behind the end of the CommitLog a record may lie and still count as in the
    /// page cache (RocketMQ's `accessMessageInMemoryMaxRatio` of the machine's memory).
    in_memory_bytes: u64,
    /// What the store keeps: `config`'s retention settings, or what replaced them since.
    retention: RwLock<Retention>,
    closed: AtomicBool,
    /// The fork generation the store was opened in (see [`crate::fork`]).
    fork_generation: u64,
    pub(crate) disk_full: AtomicBool,
    abort_path: PathBuf,
    /// Held (flock) while open: the root's `lock` file and the CommitLog's directory.
    /// Released by `close` so the store can be reopened.
    lock_file: parking_lot::Mutex<Vec<File>>,
    /// Held through a retention pass.
    cleaning: parking_lot::Mutex<()>,
}

pub struct MessageStore {
    inner: Arc<Inner>,
    services: parking_lot::Mutex<Option<Services>>,
    /// Held through `close`: a second caller returns only once the first has finished.
    closing: parking_lot::Mutex<()>,
    pub recovery: RecoveryReport,
}

impl MessageStore {
    /// Opens (creating if needed) the store under `config.store_path_root_dir`, recovering from
    /// an abnormal stop if there was one.
    pub fn open(config: StoreConfig) -> StoreResult<Self> {
        config.validate()?;
        let root = config.store_path_root_dir.clone();
        std::fs::create_dir_all(&root)
            .map_err(|e| StoreError::io("creating store root", &root, e))?;
        let lock_path = root.join("lock");
        let lock_file = File::options()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&lock_path)
            .map_err(|e| StoreError::io("opening", &lock_path, e))?;
        if lock_file.try_lock().is_err() {
            return Err(StoreError::Locked(root));
        }
        // The CommitLog's directory is locked too, wherever it is, so that two stores with
        // different roots never append to one log (one naming the other's default directory as
        // its storePathCommitLog).
        let dir = config.commit_log_dir();
        std::fs::create_dir_all(&dir).map_err(|e| StoreError::io("creating directory", &dir, e))?;
        let dir_lock = File::open(&dir).map_err(|e| StoreError::io("opening", &dir, e))?;
        if dir_lock.try_lock().is_err() {
            return Err(StoreError::Locked(dir));
        }
        let locks = vec![lock_file, dir_lock];
        let abort_path = root.join("abort");
        let abnormal = abort_path.exists();
        let checkpoint = CheckpointFile::new(&root);
        let loaded = checkpoint.load();

        let cl_files = MappedFileQueue::load(
            &config.commit_log_dir(),
            config.mapped_file_size_commit_log,
            // Under SYNC_FLUSH appends go through the file and each is fsynced: see `Written`.
            if config.flush_disk_type == FlushDiskType::Sync {
                crate::mapped_file::Allocation::Written
            } else {
                crate::mapped_file::Allocation::OnDemand
            },
        )?;
        let commit_log = CommitLog::load(cl_files)
            .map_err(|e| StoreError::io("creating eventfd for", &root, e))?;
        commit_log.check_fenced(loaded.ours)?;
        let files_end = commit_log
            .files()
            .last()
            .map_or(0, |f| f.file_from_offset() + f.file_size());
        // Durable data past every segment means these are not the segments the checkpoint was
        // written for (another storePathCommitLog, a disk not mounted): recovering would cut
        // every queue down to them.
        if let Some(cp) = loaded
            .checkpoint
            .filter(|cp| cp.commit_log_flushed > files_end)
        {
            return Err(StoreError::Config(format!(
                "the checkpoint has the CommitLog durable up to offset {}, but the segments in {} \
                 end at {files_end}: is that the store's CommitLog directory? Removing {} opens \
                 the store with the segments there",
                cp.commit_log_flushed,
                config.commit_log_dir().display(),
                root.join("checkpoint").display()
            )));
        }
        let deleted = DeletedTopics::load(&root.join("config").join("deletedTopics.json"))?;
        deleted.prune(commit_log.min_offset())?;
        let mut queues = load_queues(&config)?;
        drop_deleted_queues(&mut queues, &deleted, &config)?;
        // A unit past every segment is damage; cut before the queues' end decides where
        // recovery starts, so that the records of the units it hides are dispatched again.
        for q in queues.values() {
            q.truncate_beyond(files_end)?;
        }
        let mut loaded = loaded;
        // A queue with a file missing is written again from the end of its units before the
        // gap: the checkpoint says so before the files past the gap go, so that an open cut
        // short (a crash, a full disk) leaves the work to the next one.
        let rebuild_from = queues.values().filter_map(|q| q.rebuild_from()).min();
        if let Some(from) = rebuild_from {
            if let Some(cp) = loaded.checkpoint.as_mut() {
                if from < cp.logics_flushed {
                    cp.logics_flushed = from;
                    checkpoint.store(cp)?;
                }
            }
            for q in queues.values() {
                q.remove_past_gap()?;
            }
        }
        let index = if config.message_index_enable {
            let mut index = IndexService::load(
                &config.index_dir(),
                config.max_hash_slot_num,
                config.max_index_num,
            )?;
            // The checkpoint forgets the dropped files' records before the files go, so that a
            // crash before they are indexed again still has them indexed at the next open.
            if let (Some(from), Some(cp)) = (index.dropped_from(), loaded.checkpoint.as_mut()) {
                if from < cp.index_flushed {
                    cp.index_flushed = from;
                    checkpoint.store(cp)?;
                }
            }
            index.discard_dropped()?;
            Some(index)
        } else {
            None
        };
        // An index with no entries (its directory removed to rebuild it, as with RocketMQ)
        // holds nothing the checkpoint counts: whatever recovery dispatches is indexed again.
        let index_durable = loaded.checkpoint.map(|cp| cp.index_flushed).filter(|_| {
            index
                .as_ref()
                .is_none_or(|i| i.last_indexed_phy().is_some())
        });
        let arrivals =
            Arrivals::new().map_err(|e| StoreError::io("creating eventfd for", &root, e))?;
        let delays = DelayOffsets::load(&root.join("config").join("delayOffset.json"))?;
        let in_memory_bytes =
            physical_memory_bytes() / 100 * u64::from(config.access_message_in_memory_max_ratio);
        let retention = RwLock::new(config.retention());
        let inner = Inner {
            config,
            commit_log,
            queues: RwLock::new(queues),
            index,
            checkpoint,
            arrivals,
            hold: HoldTable::new().map_err(|e| StoreError::io("creating eventfd for", &root, e))?,
            delays,
            recalls: Recalls::default(),
            deleted,
            dispatched: AtomicU64::new(0),
            index_behind: AtomicU64::new(u64::MAX),
            index_durable,
            in_memory_bytes,
            retention,
            closed: AtomicBool::new(false),
            fork_generation: fork::generation(),
            disk_full: AtomicBool::new(false),
            abort_path,
            lock_file: parking_lot::Mutex::new(locks),
            cleaning: parking_lot::Mutex::new(()),
        };
        // As RocketMQ's reput service does, dispatch again from the end of the furthest queue
        // when that lies before the checkpoint: ConsumeQueues removed while the store was
        // closed are rebuilt from the CommitLog. Records of index files dropped at load (another
        // geometry) are indexed again too: the checkpoint no longer counts them as indexed.
        let checkpointed = loaded.checkpoint.map_or(0, |cp| cp.recovery_start());
        let start = checkpointed.min(inner.queues_end());
        // Validation starts at a group boundary or at a record of the group a fence ahead
        // seals: the checkpoint's offsets are one or the other, a queue's end may fall inside
        // a group, a segment's start is a boundary. Bytes below the checkpoint are durable;
        // reads verify them anyway.
        let validate_from = if start == checkpointed {
            start
        } else {
            start - start % inner.commit_log.segment_size()
        };
        if abnormal {
            log::warn!(
                "store {} was not shut down cleanly; recovering from offset {start}",
                root.display()
            );
        }
        let recovery = inner.recover(validate_from, start)?;
        inner.load_recalls();
        // Store times never go back, even when no record lies past the checkpoint.
        inner
            .commit_log
            .restore_last_store_timestamp(loaded.checkpoint.map_or(0, |cp| cp.written_at_ms));
        inner.update_disk_full();
        std::fs::write(&inner.abort_path, b"")
            .map_err(|e| StoreError::io("creating", &inner.abort_path, e))?;
        let inner = Arc::new(inner);
        let services = if inner.config.background_services {
            Some(Services::start(&inner)?)
        } else {
            None
        };
        Ok(Self {
            inner,
            services: parking_lot::Mutex::new(services),
            closing: parking_lot::Mutex::new(()),
            recovery,
        })
    }

    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    /// Appends `msgs` as one group: all of them or none become visible, in order, and under
    /// `SYNC_FLUSH` the call returns once they are durable. Messages may target different
    /// queues. `internal` allows the broker's reserved topics.
    pub fn put(&self, msgs: &[MessageInput<'_>], internal: bool) -> StoreResult<PutOutcome> {
        self.inner.put(msgs, internal, clock::now_ms(), true)
    }

    /// Like [`Self::put`], but under `SYNC_FLUSH` returns once the group is stored and visible,
    /// with its flush requested, instead of waiting for it: the group is durable once
    /// [`Self::flushed_phy_offset`] reaches the outcome's `end_offset`, and each flush that may
    /// have made such a group durable signals [`Self::flushed_fd`]. Any number of appends in
    /// flight this way share one fsync, without a thread blocked for each.
    pub fn put_nowait(&self, msgs: &[MessageInput<'_>], internal: bool) -> StoreResult<PutOutcome> {
        self.inner.put(msgs, internal, clock::now_ms(), false)
    }

    /// An eventfd made readable by a flush that may have made a [`Self::put_nowait`] group
    /// durable; [`Self::drain_flushed`] clears it.
    pub fn flushed_fd(&self) -> i32 {
        self.inner.commit_log.flushed_fd()
    }

    /// Clears [`Self::flushed_fd`], then returns the flushed offset: a flush that ends after
    /// the read makes the fd readable again, so a watcher misses none.
    pub fn drain_flushed(&self) -> u64 {
        self.inner.commit_log.clear_flushed_fd();
        self.inner.commit_log.flushed_offset()
    }

    pub fn get(&self, req: &GetRequest<'_>) -> StoreResult<GetOutcome> {
        self.inner.check_open()?;
        Ok(self.inner.get(req))
    }

    /// Published CommitLog bytes from `from` for a slave, in whole append groups of about
    /// `max_bytes`, and the offset after them (see [`CommitLog::read_replica`]).
    pub fn read_replica(&self, from: u64, max_bytes: usize) -> StoreResult<Option<ReplicaChunk>> {
        self.inner.check_open()?;
        self.inner.commit_log.read_replica(from, max_bytes)
    }

    /// A slave's store takes `data`, read by its master's [`Self::read_replica`] at `from`:
    /// checks it, writes it byte for byte, and dispatches its records to their queues and the
    /// index as the master did. Its first `damaged` bytes are those the master holds damaged:
    /// written as they are, with nothing dispatched, as recovery keeps a damaged group.
    /// Returns the new end of the CommitLog. `from` must be that end (or any offset, to start
    /// an empty store); nothing is written when a check fails.
    pub fn append_replica(&self, from: u64, data: &[u8], damaged: usize) -> StoreResult<u64> {
        self.inner.check_open()?;
        self.inner.append_replica(from, data, damaged)
    }

    /// Delivers the delayed messages due at `now_ms` to their real topics (the store's
    /// schedule service does this on its own every 100 ms while background services run).
    pub fn deliver_due(&self, now_ms: i64) -> StoreResult<Pass> {
        self.inner.check_open()?;
        Ok(self.inner.deliver_due(now_ms))
    }

    /// Deletes `topic`'s ConsumeQueues and returns how many there were, as RocketMQ's
    /// `deleteTopics`: its messages can no longer be read or found by key, and a later put to
    /// the topic starts again at queue offset 0. Its records stay in the CommitLog until
    /// retention removes them, and recovery does not bring the queues back.
    pub fn delete_topic(&self, topic: &str) -> StoreResult<usize> {
        self.inner.check_open()?;
        self.inner.delete_topic(topic)
    }

    /// Recalls the timer message `uniq_key` of `topic`, due at `due_ms` (RocketMQ 5's
    /// RecallMessage): stores a marker, and from then on the schedule drops that message
    /// instead of delivering it. Returns as [`Self::put`] does, or as [`Self::put_nowait`]
    /// without `wait_flush`. Recalling a message already delivered, or never sent, stores a
    /// marker that drops nothing.
    pub fn recall(
        &self,
        topic: &str,
        uniq_key: &str,
        due_ms: i64,
        producer_group: &str,
        born_host: std::net::SocketAddr,
        wait_flush: bool,
    ) -> StoreResult<PutOutcome> {
        self.inner.check_open()?;
        message::check_topic(topic, false)?;
        if uniq_key.is_empty() || uniq_key.contains(['\x01', '\x02']) {
            return Err(StoreError::IllegalMessage(format!(
                "recall: {uniq_key:?} is not a message id"
            )));
        }
        let key = recall::delete_key(topic, uniq_key);
        let now_ms = clock::now_ms();
        let mut properties = Vec::new();
        message::push_property(&mut properties, PROPERTY_TAGS, recall::RECALL_TAG);
        message::push_property(&mut properties, PROPERTY_REAL_TOPIC, topic);
        message::push_property(&mut properties, recall::PROPERTY_TIMER_DEL_UNIQKEY, &key);
        message::push_property(
            &mut properties,
            PROPERTY_TIMER_DELIVER_MS,
            &due_ms.to_string(),
        );
        if !producer_group.is_empty() {
            message::push_property(&mut properties, "PGROUP", producer_group);
        }
        let input = MessageInput {
            topic: RECALL_TOPIC,
            queue_id: 0,
            flag: 0,
            body: b"0",
            properties: &properties,
            sys_flag: 0,
            born_timestamp_ms: now_ms,
            born_host,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
        };
        // In the set before the marker is visible: a pass between the two would deliver the
        // message the answer says is recalled.
        let added = self.inner.recalls.insert(&key, due_ms);
        let outcome = self.inner.put(&[input], true, now_ms, wait_flush);
        if outcome.is_err() && added {
            self.inner.recalls.remove(&key, due_ms);
        }
        outcome
    }

    /// How many recalled timer messages the schedule has yet to meet.
    pub fn pending_recalls(&self) -> usize {
        self.inner.recalls.len()
    }

    /// Each delay level's next queue offset in SCHEDULE_TOPIC_XXXX (RocketMQ's delayOffset).
    pub fn delay_offsets(&self) -> std::collections::BTreeMap<u32, u64> {
        self.inner.delays.snapshot()
    }

    /// Takes a master's delay offsets in place of this store's (a slave's copy), persisted with
    /// the next flush: a slave made a master then delivers on from where its master was,
    /// instead of every delayed message its log holds again.
    pub fn copy_delay_offsets(&self, offsets: std::collections::BTreeMap<u32, u64>) {
        self.inner.delays.replace(offsets);
    }

    /// Delayed messages delivered to their real topics since the store opened, and the bytes
    /// their new records took.
    pub fn delayed_deliveries(&self) -> (u64, u64) {
        self.inner.delays.delivered()
    }

    /// The raw record at `phy_offset`, CRC-checked; `None` if no record starts there.
    pub fn look_message_by_offset(&self, phy_offset: u64) -> StoreResult<Option<Vec<u8>>> {
        self.inner.check_open()?;
        self.inner.look(phy_offset)
    }

    /// The raw record named by an offset message id.
    pub fn view_message_by_id(&self, msg_id: &str) -> StoreResult<Option<Vec<u8>>> {
        self.inner.check_open()?;
        match message::decode_offset_msg_id(msg_id) {
            Some((_, phy)) if phy >= 0 => self.inner.look(phy as u64),
            _ => Ok(None),
        }
    }

    /// The newest `max` records of `topic` whose KEYS contain `key` or whose UNIQ_KEY is `key`,
    /// stored within `[begin_ms, end_ms]`, oldest first (RocketMQ's order).
    pub fn query_message(
        &self,
        topic: &str,
        key: &str,
        max: usize,
        begin_ms: i64,
        end_ms: i64,
    ) -> StoreResult<Vec<Vec<u8>>> {
        self.inner.check_open()?;
        Ok(self.inner.query(topic, key, max, begin_ms, end_ms))
    }

    pub fn min_offset(&self, topic: &str, queue_id: i32) -> u64 {
        self.inner
            .queue(topic, queue_id)
            .map_or(0, |q| q.min_offset())
    }

    pub fn max_offset(&self, topic: &str, queue_id: i32) -> u64 {
        self.inner
            .queue(topic, queue_id)
            .map_or(0, |q| q.max_offset())
    }

    /// The queue offset at `boundary` of `timestamp_ms`: with [`TimeBoundary::Lower`] the first
    /// message stored at or after it (the max offset when every message is older), with
    /// [`TimeBoundary::Upper`] the last one stored at or before it (the min offset when every
    /// message is newer).
    pub fn offset_for_time(
        &self,
        topic: &str,
        queue_id: i32,
        timestamp_ms: i64,
        boundary: TimeBoundary,
    ) -> u64 {
        self.inner
            .offset_for_time(topic, queue_id, timestamp_ms, boundary)
    }

    pub fn earliest_store_time(&self, topic: &str, queue_id: i32) -> Option<i64> {
        let q = self.inner.queue(topic, queue_id)?;
        self.inner.unit_store_time(&q, q.min_offset())
    }

    /// Whether the message at `queue_offset` lies further behind the CommitLog's end than
    /// `accessMessageInMemoryMaxRatio` of memory, where the page cache has likely dropped it
    /// (RocketMQ's `checkInDiskByConsumeOffset`). False when there is no such message.
    pub fn offset_in_disk(&self, topic: &str, queue_id: i32, queue_offset: u64) -> bool {
        let Some(q) = self.inner.queue(topic, queue_id) else {
            return false;
        };
        let mut unit = Vec::with_capacity(1);
        q.scan(queue_offset, 1, None, 1, &mut unit);
        unit.first().is_some_and(|u| {
            u.queue_offset == queue_offset
                && self
                    .inner
                    .in_disk(self.inner.commit_log.max_offset(), u.phy_offset)
        })
    }

    /// Store time of the message at `queue_offset`.
    pub fn store_time(&self, topic: &str, queue_id: i32, queue_offset: u64) -> Option<i64> {
        let q = self.inner.queue(topic, queue_id)?;
        self.inner.unit_store_time(&q, queue_offset)
    }

    pub fn min_phy_offset(&self) -> u64 {
        self.inner.commit_log.min_offset()
    }

    pub fn max_phy_offset(&self) -> u64 {
        self.inner.commit_log.max_offset()
    }

    pub fn flushed_phy_offset(&self) -> u64 {
        self.inner.commit_log.flushed_offset()
    }

    /// Every (topic, queue id) the store has a ConsumeQueue for.
    pub fn queue_ids(&self) -> Vec<(String, i32)> {
        let mut v: Vec<_> = self
            .inner
            .queues
            .read()
            .iter()
            .map(|(t, q, _)| (t.to_owned(), q))
            .collect();
        v.sort();
        v
    }

    /// Counts units in `start..start + max_units` passing `tags_codes`: the bare scan loop.
    pub fn scan_consume_queue(
        &self,
        topic: &str,
        queue_id: i32,
        start: u64,
        max_units: u64,
        tags_codes: Option<&[i64]>,
    ) -> (u64, u64) {
        match self.inner.queue(topic, queue_id) {
            Some(q) => q.count_matching(start, max_units, tags_codes),
            None => (0, start),
        }
    }

    /// Units `start..` of a queue, for inspection and tests.
    pub fn consume_queue_units(
        &self,
        topic: &str,
        queue_id: i32,
        start: u64,
        max_units: u64,
    ) -> Vec<CqUnit> {
        let mut out = Vec::new();
        if let Some(q) = self.inner.queue(topic, queue_id) {
            q.scan(start, max_units, None, usize::MAX, &mut out);
        }
        out
    }

    /// Flushes the CommitLog, ConsumeQueues and index and advances the checkpoint.
    pub fn flush(&self) -> StoreResult<u64> {
        self.inner.check_open()?;
        self.inner.flush_all()
    }

    /// Runs retention now: see [`Inner::delete_expired_files`].
    pub fn delete_expired_files(&self, now_ms: i64, force: bool) -> StoreResult<usize> {
        self.inner.check_open()?;
        self.inner.delete_expired_files(now_ms, force)
    }

    /// The retention settings in force.
    pub fn retention(&self) -> Retention {
        self.inner.retention.read().clone()
    }

    /// Replaces the retention settings while the store is open, as RocketMQ's
    /// `updateBrokerConfig` changes `fileReservedTime` or `deleteWhen`: the next retention pass
    /// and disk check use them, and the disk check runs at once for a changed warning level.
    pub fn set_retention(&self, retention: Retention) -> StoreResult<()> {
        self.inner.check_open()?;
        retention.validate()?;
        log::info!("retention now {retention:?}");
        *self.inner.retention.write() = retention;
        self.inner.update_disk_full();
        Ok(())
    }

    pub fn is_disk_full(&self) -> bool {
        self.inner.disk_full.load(Ordering::Acquire)
    }

    /// Re-reads disk usage and updates the refuse-writes flag.
    pub fn check_disk(&self) -> Option<f64> {
        self.inner.update_disk_full()
    }

    pub fn arrivals_fd(&self) -> i32 {
        self.inner.arrivals.fd()
    }

    pub fn drain_arrivals(&self) -> Vec<Arrival> {
        self.inner.arrivals.drain()
    }

    /// Parks pull `id` on (topic, queue id) until the queue passes `queue_offset` with a
    /// message whose tag code is in `tags_codes` (`None`: any); see [`crate::hold`].
    pub fn hold_pull(
        &self,
        id: u64,
        topic: &str,
        queue_id: i32,
        queue_offset: u64,
        tags_codes: Option<Vec<i64>>,
    ) {
        let queue = self.inner.queue(topic, queue_id);
        let had_queue = queue.is_some();
        self.inner
            .hold
            .hold(id, topic, queue_id, queue_offset, tags_codes, || {
                queue.as_ref().map_or(0, |q| q.max_offset())
            });
        // The first put to a new queue may have created and published it after the lookup
        // above, its arrival finding no pull held yet.
        if !had_queue {
            if let Some(q) = self.inner.queue(topic, queue_id) {
                let max = q.max_offset();
                if max > queue_offset {
                    self.inner.hold.on_arrival(topic, queue_id, max, None);
                }
            }
        }
    }

    /// Removes held pull `id`, parked on (topic, queue id), whose time ran out; false if it was
    /// already woken.
    pub fn cancel_held_pull(&self, topic: &str, queue_id: i32, id: u64) -> bool {
        self.inner.hold.cancel(topic, queue_id, id)
    }

    /// Wakes every held pull whose queue moved past its offset (the periodic re-check).
    pub fn check_held_pulls(&self) {
        self.inner
            .hold
            .check(|topic, queue_id| self.max_offset(topic, queue_id));
    }

    /// Held pulls ready to be answered, with why.
    pub fn drain_ready_pulls(&self) -> Vec<(u64, WakeReason)> {
        self.inner.hold.drain_ready()
    }

    /// Readable when [`Self::drain_ready_pulls`] has something.
    pub fn held_pulls_fd(&self) -> i32 {
        self.inner.hold.fd()
    }

    pub fn held_pull_count(&self) -> usize {
        self.inner.hold.held_count()
    }

    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// `Ok` while the store takes calls: open, and in the process that opened it.
    pub fn check_usable(&self) -> StoreResult<()> {
        self.inner.check_open()
    }

    /// Stops the services, flushes everything, writes the checkpoint and removes the abort
    /// marker, so the next open knows the shutdown was clean. Idempotent.
    pub fn close(&self) -> StoreResult<()> {
        if self.inner.forked() {
            // The parent's store: nothing here may touch its files (the abort marker, the
            // checkpoint), nor wait for its threads, which this process does not have, or for
            // locks a thread of the parent held when it forked.
            self.inner.closed.store(true, Ordering::Release);
            if let Some(services) = self.services.try_lock().and_then(|mut s| s.take()) {
                std::mem::forget(services);
            }
            return Ok(());
        }
        let _closing = self.closing.lock();
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // Wait for in-flight appends to finish.
        drop(self.inner.commit_log.lock());
        if let Some(services) = self.services.lock().take() {
            services.stop();
        }
        // Every step runs even if an earlier one failed (a full disk can refuse the
        // checkpoint); the abort marker stays unless everything was flushed, and the directory
        // lock is always released.
        let flushed = self.inner.flush_all();
        let marked = flushed.as_ref().map_err(|_| ()).and_then(|_| {
            std::fs::remove_file(&self.inner.abort_path).map_err(|e| {
                log::error!("removing {}: {e}", self.inner.abort_path.display());
            })
        });
        self.inner.lock_file.lock().clear();
        flushed?;
        if marked.is_err() {
            return Err(StoreError::io(
                "removing",
                &self.inner.abort_path,
                std::io::Error::other("abort marker left in place"),
            ));
        }
        Ok(())
    }
}

impl Drop for MessageStore {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            log::error!(
                "closing store {}: {e}",
                self.inner.config.store_path_root_dir.display()
            );
        }
    }
}

/// Finishes deletions a crash interrupted: a queue of a deleted topic whose units point below
/// the deletion is the deleted topic's, and goes. One created again afterwards stays.
fn drop_deleted_queues(
    queues: &mut QueueMap<Arc<ConsumeQueue>>,
    deleted: &DeletedTopics,
    config: &StoreConfig,
) -> StoreResult<()> {
    let mut stale = Vec::new();
    for (topic, queue_id, q) in queues.iter() {
        let first = q.unit(q.min_offset()).map(|u| u.phy_offset);
        if first.is_some_and(|phy| deleted.covers(topic, phy)) {
            stale.push((topic.to_owned(), queue_id));
        }
    }
    for (topic, queue_id) in stale {
        queues.remove(&topic, queue_id);
        log::warn!(
            "removing consume queue {topic}/{queue_id}: its topic was deleted before the store \
             stopped"
        );
        remove_queue_dir(&config.consume_queue_dir(), &format!("{topic}/{queue_id}"))?;
    }
    Ok(())
}

/// Prefix of a ConsumeQueue directory being removed; no topic name contains a dot.
const REMOVING_PREFIX: &str = ".removing-";

/// Removes `cq_root/rel` (a topic's or a queue's directory) as one step: renamed out of the
/// way first, then emptied, so that a crash never leaves a queue with some of its files (its
/// next open would find a gap), only a directory that the next open removes.
fn remove_queue_dir(cq_root: &Path, rel: &str) -> StoreResult<()> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let dir = cq_root.join(rel);
    let doomed = cq_root.join(format!(
        "{REMOVING_PREFIX}{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    match std::fs::rename(&dir, &doomed) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(StoreError::io("removing", &dir, e)),
    }
    if let Err(e) = std::fs::remove_dir_all(&doomed) {
        // The queue is gone either way; the next open removes what is left.
        log::warn!("removing {}: {e}", doomed.display());
    }
    Ok(())
}

fn load_queues(config: &StoreConfig) -> StoreResult<QueueMap<Arc<ConsumeQueue>>> {
    let root = config.consume_queue_dir();
    std::fs::create_dir_all(&root).map_err(|e| StoreError::io("creating directory", &root, e))?;
    let mut queues = QueueMap::default();
    for topic_dir in std::fs::read_dir(&root).map_err(|e| StoreError::io("listing", &root, e))? {
        let topic_dir = topic_dir.map_err(|e| StoreError::io("listing", &root, e))?;
        let Some(topic) = topic_dir.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if topic.starts_with(REMOVING_PREFIX) {
            // Renamed by a removal the process did not finish.
            let path = topic_dir.path();
            std::fs::remove_dir_all(&path).map_err(|e| StoreError::io("removing", &path, e))?;
            continue;
        }
        if message::validate_topic(&topic).is_err() || !topic_dir.path().is_dir() {
            continue;
        }
        for qdir in std::fs::read_dir(topic_dir.path())
            .map_err(|e| StoreError::io("listing", topic_dir.path(), e))?
        {
            let qdir = qdir.map_err(|e| StoreError::io("listing", topic_dir.path(), e))?;
            let Some(queue_id) = qdir
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            let cq = ConsumeQueue::load(
                &qdir.path(),
                &topic,
                queue_id,
                config.mapped_file_size_consume_queue,
            )?;
            queues.insert(&topic, queue_id, Arc::new(cq));
        }
    }
    Ok(queues)
}

/// A message after validation and the delay rewrite, ready to encode.
struct Prepared<'a> {
    input: &'a MessageInput<'a>,
    crc: u32,
    len: usize,
    /// Encodes like the message before it but for its body (`message::same_but_body`): same
    /// queue, same tag code, and its record is copied from that one's.
    like_prev: bool,
    /// Index of its queue among the put's queues; `NO_SLOT` when it gets no queue unit
    /// (a transaction half or rollback).
    slot: usize,
}

/// Index candidates a key query examines at most: each costs a CommitLog read.
const QUERY_CANDIDATES_MAX: usize = 1 << 16;

/// Queue units whose buffer a put keeps for the next one (96 KiB); a bigger group's is freed.
const UNITS_KEEP: usize = 4096;
const NO_SLOT: usize = usize::MAX;
/// A slot not yet resolved (before the put lock is taken).
const UNRESOLVED: usize = usize::MAX - 1;

struct Rewrite {
    topic: &'static str,
    queue_id: i32,
    properties: Vec<u8>,
}

/// What dispatch needs from a stored record.
struct Dispatch<'a> {
    topic: &'a str,
    queue_id: i32,
    queue_offset: u64,
    phy: u64,
    /// Where the record's group starts: the checkpoint's offsets are group boundaries.
    group: u64,
    size: u32,
    store_ts: i64,
    properties: &'a [u8],
    sys_flag: i32,
}

impl Inner {
    fn check_open(&self) -> StoreResult<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(StoreError::Closed)
        } else if self.forked() {
            Err(StoreError::Forked)
        } else {
            Ok(())
        }
    }

    /// Whether this process is a child forked after the store was opened.
    fn forked(&self) -> bool {
        self.fork_generation != fork::generation()
    }

    /// Whether the record at `phy` lies further behind `log_end` than the share of memory the
    /// page cache likely keeps (`accessMessageInMemoryMaxRatio`).
    fn in_disk(&self, log_end: u64, phy: u64) -> bool {
        log_end.saturating_sub(phy) > self.in_memory_bytes
    }

    /// CommitLog offset past the last record any ConsumeQueue holds a unit for; 0 with none.
    fn queues_end(&self) -> u64 {
        self.queues
            .read()
            .values()
            .filter_map(|q| q.last_record_end())
            .max()
            .unwrap_or(0)
    }

    pub(crate) fn queue(&self, topic: &str, queue_id: i32) -> Option<Arc<ConsumeQueue>> {
        self.queues.read().get(topic, queue_id).cloned()
    }

    fn queue_or_create(&self, topic: &str, queue_id: i32) -> StoreResult<Arc<ConsumeQueue>> {
        if let Some(q) = self.queue(topic, queue_id) {
            return Ok(q);
        }
        let mut queues = self.queues.write();
        if let Some(q) = queues.get(topic, queue_id) {
            return Ok(q.clone());
        }
        let dir = self
            .config
            .consume_queue_dir()
            .join(topic)
            .join(queue_id.to_string());
        let q = Arc::new(ConsumeQueue::load(
            &dir,
            topic,
            queue_id,
            self.config.mapped_file_size_consume_queue,
        )?);
        queues.insert(topic, queue_id, q.clone());
        Ok(q)
    }

    fn validate_body(&self, m: &MessageInput<'_>) -> StoreResult<()> {
        if m.body.len() as u64 > u64::from(self.config.max_message_size_bytes) {
            return Err(StoreError::MessageTooLarge {
                size_bytes: m.body.len() as u64,
                max_bytes: u64::from(self.config.max_message_size_bytes),
            });
        }
        Ok(())
    }

    fn validate(&self, m: &MessageInput<'_>, internal: bool) -> StoreResult<()> {
        message::check_topic(m.topic, internal)?;
        if m.body.len() as u64 > u64::from(self.config.max_message_size_bytes) {
            return Err(StoreError::MessageTooLarge {
                size_bytes: m.body.len() as u64,
                max_bytes: u64::from(self.config.max_message_size_bytes),
            });
        }
        // The store's own puts keep a queue id accepted before: a delayed message still
        // reaches its queue after `maxQueueNumsPerTopic` was lowered, as in RocketMQ.
        if m.queue_id < 0
            || (!internal && m.queue_id as u32 >= self.config.max_queue_nums_per_topic)
        {
            return Err(StoreError::InvalidQueueId {
                queue_id: m.queue_id,
                max: self.config.max_queue_nums_per_topic,
            });
        }
        Self::validate_properties(m)
    }

    fn validate_properties(m: &MessageInput<'_>) -> StoreResult<()> {
        if m.properties.len() > MAX_PROPERTIES_LEN {
            return Err(StoreError::PropertiesTooLarge {
                size_bytes: m.properties.len(),
            });
        }
        // Names and values are text to every reader (tag codes, keys, clients' property maps),
        // and the broker's single sends already refuse headers that are not UTF-8.
        if std::str::from_utf8(m.properties).is_err() {
            return Err(StoreError::IllegalMessage(
                "properties are not valid UTF-8".to_owned(),
            ));
        }
        Ok(())
    }

    /// A message with `DELAY` > 0 (and not a transaction half/rollback) is parked in
    /// SCHEDULE_TOPIC_XXXX, queue level - 1, with its real topic and queue in properties.
    ///
    /// A timer message (RocketMQ 5's `TIMER_DELIVER_MS`, or `TIMER_DELAY_SEC`/`_MS` from
    /// `now_ms`) rides the same levels: it is parked in the longest level that does not
    /// overshoot its delivery time, with that time fixed in `TIMER_DELIVER_MS`, and parked
    /// again each time a level delivers it early, until it is due. It arrives at most one
    /// shortest level (1 s by default) late, as RocketMQ's timer wheel has 1 s precision.
    fn delay_rewrite(&self, m: &MessageInput<'_>, now_ms: i64) -> StoreResult<Option<Rewrite>> {
        let tx = m.sys_flag & SYSFLAG_TRANSACTION_MASK;
        if tx == SYSFLAG_TRANSACTION_PREPARED
            || tx == SYSFLAG_TRANSACTION_ROLLBACK
            || m.topic == SCHEDULE_TOPIC
            || m.topic == RECALL_TOPIC
        {
            return Ok(None);
        }
        let levels = &self.config.message_delay_level_ms;
        if levels.is_empty() {
            return Ok(None);
        }
        // As RocketMQ: a delay level above 0 wins over a timer, which it clears (a consumer
        // handing back a delivered timer message, a batch's message with both); a timer
        // still ahead hops over the levels.
        let level = message::property(m.properties, PROPERTY_DELAY)
            .and_then(|v| v.trim().parse::<i64>().ok())
            .filter(|&level| level > 0);
        let (level, timer) = match (level, timer_due(m.properties, now_ms)) {
            (Some(level), _) => ((level as usize).min(levels.len()), None),
            (None, Some(due)) if due > now_ms => (level_for(levels, due - now_ms), Some(due)),
            _ => return Ok(None),
        };
        let cleared: &[&str] = if timer.is_some() {
            &[PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID]
        } else {
            &[
                PROPERTY_REAL_TOPIC,
                PROPERTY_REAL_QUEUE_ID,
                PROPERTY_TIMER_DELIVER_MS,
                PROPERTY_TIMER_DELAY_SEC,
                PROPERTY_TIMER_DELAY_MS,
            ]
        };
        let mut properties = message::without_properties(m.properties, cleared);
        if let Some(due) = timer {
            properties = message::without_properties(
                &properties,
                &[
                    PROPERTY_DELAY,
                    PROPERTY_TIMER_DELIVER_MS,
                    PROPERTY_TIMER_DELAY_SEC,
                    PROPERTY_TIMER_DELAY_MS,
                ],
            );
            message::push_property(&mut properties, PROPERTY_DELAY, &level.to_string());
            message::push_property(&mut properties, PROPERTY_TIMER_DELIVER_MS, &due.to_string());
        }
        message::push_property(&mut properties, PROPERTY_REAL_TOPIC, m.topic);
        message::push_property(
            &mut properties,
            PROPERTY_REAL_QUEUE_ID,
            &m.queue_id.to_string(),
        );
        if properties.len() > MAX_PROPERTIES_LEN {
            return Err(StoreError::PropertiesTooLarge {
                size_bytes: properties.len(),
            });
        }
        Ok(Some(Rewrite {
            topic: SCHEDULE_TOPIC,
            queue_id: level as i32 - 1,
            properties,
        }))
    }

    fn put(
        &self,
        msgs: &[MessageInput<'_>],
        internal: bool,
        now_ms: i64,
        wait_flush: bool,
    ) -> StoreResult<PutOutcome> {
        self.check_open()?;
        if self.config.broker_role == BrokerRole::Slave {
            return Err(StoreError::ReadOnly);
        }
        if msgs.is_empty() {
            return Err(StoreError::IllegalMessage("no messages to put".to_owned()));
        }
        let mut prev: Option<&MessageInput<'_>> = None;
        for m in msgs {
            // A batch shares its topic and queue, and often its properties (a client's batch has
            // its own per message): check each distinct value once.
            match prev {
                Some(p)
                    if p.queue_id == m.queue_id
                        && message::same_bytes(p.topic.as_bytes(), m.topic.as_bytes()) =>
                {
                    self.validate_body(m)?;
                    if !std::ptr::eq(p.properties, m.properties) {
                        Self::validate_properties(m)?;
                    }
                }
                _ => self.validate(m, internal)?,
            }
            prev = Some(m);
        }
        // Messages parked for a delay are put as rewritten copies; none (and no allocation)
        // unless some message asks for a delay.
        let mut rewrites: Vec<(usize, Rewrite)> = Vec::new();
        let mut delayed = SameProperties::default();
        for (i, m) in msgs.iter().enumerate() {
            if delayed.get(m.properties, message::may_ask_for_delay) {
                if let Some(rw) = self.delay_rewrite(m, now_ms)? {
                    rewrites.push((i, rw));
                }
            }
        }
        let rewritten: Vec<MessageInput<'_>> = rewrites
            .iter()
            .map(|(i, rw)| MessageInput {
                topic: rw.topic,
                queue_id: rw.queue_id,
                properties: &rw.properties,
                ..msgs[*i].clone()
            })
            .collect();
        let mut rewritten_at = rewrites.iter().map(|(i, _)| *i).zip(&rewritten).peekable();
        let crc = message::BodyCrc::new();
        let store_host = SocketAddr::V4(self.config.store_host);
        let mut prepared: Vec<Prepared<'_>> = Vec::with_capacity(msgs.len());
        let mut records_len = 0u64;
        for (i, m) in msgs.iter().enumerate() {
            let input = match rewritten_at.peek() {
                Some(&(at, r)) if at == i => {
                    rewritten_at.next();
                    r
                }
                _ => m,
            };
            let like = prepared
                .last()
                .filter(|p| message::same_but_body(p.input, input));
            let (len, dispatch) = if let Some(p) = like {
                (
                    p.len - p.input.body.len() + input.body.len(),
                    p.slot != NO_SLOT,
                )
            } else {
                let sys_flag =
                    message::stored_sys_flag(input.sys_flag, &input.born_host, &store_host);
                let tx = input.sys_flag & SYSFLAG_TRANSACTION_MASK;
                (
                    message::record_len(
                        input.body.len(),
                        input.topic.len(),
                        input.properties.len(),
                        sys_flag,
                    ),
                    tx != SYSFLAG_TRANSACTION_PREPARED && tx != SYSFLAG_TRANSACTION_ROLLBACK,
                )
            };
            records_len += len as u64;
            prepared.push(Prepared {
                input,
                crc: crc.of(input.body),
                len,
                like_prev: like.is_some(),
                slot: if dispatch { UNRESOLVED } else { NO_SLOT },
            });
        }
        let group_len = records_len + FENCE_LEN as u64;
        if group_len + crate::commit_log::END_FILE_MIN_BLANK_LENGTH > self.commit_log.segment_size()
        {
            return Err(StoreError::GroupTooLarge {
                size_bytes: group_len,
                segment_bytes: self.commit_log.segment_size(),
            });
        }
        if self.disk_full.load(Ordering::Acquire) {
            let paths: Vec<String> = self
                .disk_paths()
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            return Err(StoreError::DiskFull(format!(
                "disk use of {} is above diskSpaceWarningLevelRatio {}%",
                paths.join(" or "),
                self.retention.read().disk_space_warning_level_ratio
            )));
        }

        let mut st = self.commit_log.lock();
        self.check_open()?;
        // Resolve every queue and make room for its units before writing a byte. A slot is
        // (queue, the next queue offset to assign, its max offset after this put).
        let mut queues: SmallVec<[(Arc<ConsumeQueue>, u64, u64); 2]> = SmallVec::new();
        let mut last = NO_SLOT;
        for p in &mut prepared {
            if p.slot == NO_SLOT {
                continue;
            }
            if !p.like_prev || last == NO_SLOT {
                let found = queues.iter().position(|(q, _, _)| {
                    q.queue_id() == p.input.queue_id && q.topic() == p.input.topic
                });
                last = if let Some(i) = found {
                    i
                } else {
                    let q = self.queue_or_create(p.input.topic, p.input.queue_id)?;
                    let now = q.max_offset();
                    queues.push((q, now, now));
                    queues.len() - 1
                };
            }
            queues[last].2 += 1;
            p.slot = last;
        }
        for (q, start, end) in &queues {
            q.ensure_capacity(*start, *end)?;
        }
        let res = self.commit_log.reserve(&mut st, group_len)?;

        let store_ts = now_ms.max(st.last_store_timestamp_ms);
        st.last_store_timestamp_ms = store_ts;
        let staged = self.config.flush_disk_type == FlushDiskType::Sync;
        let mut staging = if staged {
            self.commit_log.staging(&mut st, records_len as usize)
        } else {
            Vec::new()
        };
        let records: &mut [u8] = if staged {
            &mut staging
        } else {
            // SAFETY: we hold the put lock and the reserved range lies past the published end.
            unsafe { res.file.slice_mut(res.rel, records_len as usize) }
        };
        // One pass encodes the records and collects their entries and queue units. A record
        // shaped like the one before it is copied from it and patched, and shares its tag code.
        let mut entries = Vec::with_capacity(prepared.len());
        // The units' buffer lives in the put lock's state: a batch allocates it once, not per put.
        let mut units = std::mem::take(&mut st.units);
        units.clear();
        units.reserve(prepared.len());
        let mut at = 0usize;
        let mut prev_at = 0usize;
        let mut tags_code = 0i64;
        for p in &prepared {
            let queue_offset = if p.slot == NO_SLOT {
                0
            } else {
                let next = &mut queues[p.slot].1;
                *next += 1;
                (*next - 1) as i64
            };
            let phy = (res.phy + at as u64) as i64;
            if p.like_prev {
                message::encode_after(records, prev_at, at, p.input.body, p.crc, queue_offset, phy);
            } else {
                let assigned = Assigned {
                    queue_offset,
                    phy_offset: phy,
                    store_timestamp_ms: store_ts,
                    store_host,
                };
                message::encode_into(&mut records[at..at + p.len], p.input, p.crc, &assigned);
                tags_code = unit_tags_code(
                    p.input.topic,
                    p.input.properties,
                    store_ts,
                    &self.config.message_delay_level_ms,
                );
            }
            entries.push(PutEntry {
                queue_id: p.input.queue_id,
                queue_offset,
                phy_offset: phy,
                size: p.len as u32,
            });
            if p.slot != NO_SLOT {
                units.push((phy as u64, p.len as u32, tags_code));
            }
            prev_at = at;
            at += p.len;
        }
        let end = if staged {
            self.commit_log
                .write_staged_and_publish(&mut st, &res, staging)?
        } else {
            self.commit_log.seal_and_publish(&mut st, &res, records_len)
        };

        // Dispatch: index entries and queue units, then publish each queue.
        if let Some(index) = self.index.as_ref() {
            // A batch often shares properties without keys: scan those once, not per record.
            let mut keyless: Option<&[u8]> = None;
            for (p, e) in prepared.iter().zip(&entries) {
                let props = p.input.properties;
                if keyless.is_some_and(|k| std::ptr::eq(k, props)) {
                    continue;
                }
                let d = Dispatch {
                    topic: p.input.topic,
                    queue_id: p.input.queue_id,
                    queue_offset: e.queue_offset as u64,
                    phy: e.phy_offset as u64,
                    group: res.phy,
                    size: e.size,
                    store_ts,
                    properties: props,
                    sys_flag: p.input.sys_flag,
                };
                if !index_record(index, &d, &self.index_behind) {
                    keyless = Some(props);
                }
            }
        }
        let populator = Some(self.commit_log.populator());
        let mut tags: SmallVec<[i64; 8]> = SmallVec::new();
        if let [(q, next, _)] = queues.as_slice() {
            q.write_units(q.max_offset(), &units, populator)
                .expect("unit capacity ensured before the append");
            distinct_tags(units.iter().map(|u| u.2), &mut tags);
            self.publish_queue(q, *next, &tags);
        } else {
            let slots = prepared
                .iter()
                .filter(|p| p.slot != NO_SLOT)
                .map(|p| p.slot);
            let by_slot: Vec<(usize, (u64, u32, i64))> = slots.zip(units.iter().copied()).collect();
            let mut slot_units: Vec<(u64, u32, i64)> = Vec::new();
            for (slot, (q, next, _)) in queues.iter().enumerate() {
                slot_units.clear();
                slot_units.extend(by_slot.iter().filter(|(s, _)| *s == slot).map(|(_, u)| *u));
                q.write_units(q.max_offset(), &slot_units, populator)
                    .expect("unit capacity ensured before the append");
                tags.clear();
                distinct_tags(slot_units.iter().map(|u| u.2), &mut tags);
                self.publish_queue(q, *next, &tags);
            }
        }
        self.dispatched.store(end, Ordering::Release);
        if units.capacity() <= UNITS_KEEP {
            st.units = units;
        }
        drop(st);

        let mut status = PutStatus::PutOk;
        if self.config.flush_disk_type == FlushDiskType::Sync {
            if !wait_flush {
                self.commit_log.request_flush(end);
            } else if !self.commit_log.wait_flushed(
                end,
                Duration::from_millis(self.config.sync_flush_timeout_ms),
            ) {
                log::warn!(
                    "sync flush of offset {end} timed out after {} ms",
                    self.config.sync_flush_timeout_ms
                );
                status = PutStatus::FlushDiskTimeout;
            }
        }
        Ok(PutOutcome {
            status,
            entries,
            store_timestamp_ms: store_ts,
            wrote_bytes: group_len,
            end_offset: end,
            store_host,
        })
    }

    fn append_replica(&self, from: u64, data: &[u8], damaged: usize) -> StoreResult<u64> {
        if self.config.broker_role != BrokerRole::Slave {
            return Err(StoreError::Replication {
                offset: from,
                reason: "only a slave's store takes replicated bytes".to_owned(),
            });
        }
        let refuse = |reason: String| StoreError::Replication {
            offset: from,
            reason,
        };
        let delays = &self.config.message_delay_level_ms;
        let size = self.commit_log.segment_size();
        let intact_from = from + damaged as u64;
        if damaged > data.len() || from % size + damaged as u64 > size {
            return Err(refuse(format!(
                "{damaged} damaged bytes in a frame of {}, or past the segment's end",
                data.len()
            )));
        }
        let (records, roll) = if damaged == data.len() {
            // Damage up to the segment's end, its closing blank included.
            if damaged == 0 || !intact_from.is_multiple_of(size) {
                return Err(refuse(
                    "damaged bytes must be followed by an intact group or a closing blank"
                        .to_owned(),
                ));
            }
            (Vec::new(), true)
        } else {
            let records = crate::commit_log::check_replica(intact_from, &data[damaged..], size)
                .map_err(refuse)?;
            // No records: a closing blank.
            let roll = records.is_empty();
            (records, roll)
        };
        // Each record's dispatch, and its queue unit's tag code (transaction halves and
        // rollbacks have none).
        let items: Vec<(Dispatch<'_>, Option<i64>)> = records
            .iter()
            .map(|&(at, len, group)| (at + damaged, len, group + damaged))
            .map(|(at, len, group)| {
                let rec = message::decode(&data[at..at + len], false).expect("checked above");
                let tx = rec.sys_flag & SYSFLAG_TRANSACTION_MASK;
                let unit = (tx != SYSFLAG_TRANSACTION_PREPARED
                    && tx != SYSFLAG_TRANSACTION_ROLLBACK)
                    .then(|| {
                        unit_tags_code(rec.topic, rec.properties, rec.store_timestamp_ms, delays)
                    });
                let d = Dispatch {
                    topic: rec.topic,
                    queue_id: rec.queue_id,
                    queue_offset: rec.queue_offset as u64,
                    phy: from + at as u64,
                    group: from + group as u64,
                    size: rec.total_size,
                    store_ts: rec.store_timestamp_ms,
                    properties: rec.properties,
                    sys_flag: rec.sys_flag,
                };
                (d, unit)
            })
            .collect();
        if self.disk_full.load(Ordering::Acquire) {
            return Err(StoreError::DiskFull(
                "disk use is above diskSpaceWarningLevelRatio: replication paused".to_owned(),
            ));
        }

        let mut st = self.commit_log.lock();
        self.check_open()?;
        // No data yet (segments left by a first frame cut short may exist, empty).
        let empty = st.wrote == 0 && self.commit_log.max_offset() == 0;
        if st.wrote != from && !empty {
            return Err(refuse(format!("the CommitLog here ends at {}", st.wrote)));
        }
        // Recovery reads a segment from its start: an empty log starts at one.
        if empty && !from.is_multiple_of(self.commit_log.segment_size()) {
            return Err(refuse(
                "an empty CommitLog starts at a segment's start".to_owned(),
            ));
        }
        if empty && from > 0 {
            self.commit_log.files().delete_from(0)?;
            st.wrote = from;
        }
        // Queues and room for their units first, as a put resolves them before its append: a
        // failure here leaves the frame unwritten, never written with units missing.
        let mut slots: SmallVec<[ReplicaSlot; 4]> = SmallVec::new();
        for (d, unit) in &items {
            let Some(tags_code) = *unit else { continue };
            if self.deleted.covers(d.topic, d.phy) {
                continue;
            }
            let slot = self.replica_slot(&mut slots, d)?;
            let s = &mut slots[slot];
            if d.queue_offset != s.first + s.units.len() as u64 {
                return Err(refuse(format!(
                    "record at {} has queue offset {} of {}:{} where {} comes next",
                    d.phy,
                    d.queue_offset,
                    d.topic,
                    d.queue_id,
                    s.first + s.units.len() as u64
                )));
            }
            s.units.push((d.phy, d.size, tags_code));
            if !s.tags.contains(&tags_code) {
                s.tags.push(tags_code);
            }
        }
        for s in &slots {
            s.queue
                .ensure_capacity(s.first, s.first + s.units.len() as u64)?;
        }

        let end = self.commit_log.write_replica(&mut st, from, data, roll)?;
        if damaged > 0 {
            log::warn!(
                "commit log between offsets {from} and {intact_from} is damaged on the master: \
                 copied as it is; reads of the records there report corruption"
            );
        }
        if let Some(index) = self.index.as_ref() {
            for (d, _) in &items {
                if !self.deleted.covers(d.topic, d.phy) {
                    index_record(index, d, &self.index_behind);
                }
            }
        }
        for s in &slots {
            s.queue
                .write_units(s.first, &s.units, None)
                .expect("unit capacity ensured before the write");
            if s.fresh && s.first > 0 {
                // A slave that started mid-log has no units below its first.
                s.queue.raise_min_offset(s.first);
            }
            s.queue.publish(s.first + s.units.len() as u64);
        }
        self.dispatched.store(end, Ordering::Release);
        drop(st);
        for s in &slots {
            let (q, next) = (&s.queue, s.first + s.units.len() as u64);
            self.arrivals.notify(q.topic(), q.queue_id(), next, &s.tags);
            self.hold
                .on_arrival(q.topic(), q.queue_id(), next, Some(&s.tags));
        }
        if self.config.flush_disk_type == FlushDiskType::Sync {
            self.commit_log.request_flush(end);
        }
        Ok(end)
    }

    /// The slot of `d`'s queue among `slots`, added (with its queue resolved) when new.
    fn replica_slot(
        &self,
        slots: &mut SmallVec<[ReplicaSlot; 4]>,
        d: &Dispatch<'_>,
    ) -> StoreResult<usize> {
        if let Some(i) = slots
            .iter()
            .position(|s| s.queue.queue_id() == d.queue_id && s.queue.topic() == d.topic)
        {
            return Ok(i);
        }
        let mut q = self.queue_or_create(d.topic, d.queue_id)?;
        if d.queue_offset < q.max_offset() {
            // The master deleted the topic and it was created again: its queues start over.
            // Deleting is not in the CommitLog; this record shows it.
            self.drop_replica_topic(d.topic, d.phy)?;
            slots.retain(|s| s.queue.topic() != d.topic);
            q = self.queue_or_create(d.topic, d.queue_id)?;
        }
        let fresh = q.max_offset() == 0;
        if !fresh && d.queue_offset > q.max_offset() {
            log::warn!(
                "replicated record at {} leaves units {}..{} of {}:{} empty",
                d.phy,
                q.max_offset(),
                d.queue_offset,
                d.topic,
                d.queue_id
            );
        }
        slots.push(ReplicaSlot {
            queue: q,
            first: d.queue_offset,
            fresh,
            units: Vec::new(),
            tags: SmallVec::new(),
        });
        Ok(slots.len() - 1)
    }

    /// Deletes a topic's queues on a slave, as its master did, from CommitLog offset `at`
    /// (the first record of the topic created again). The caller holds the put lock.
    fn drop_replica_topic(&self, topic: &str, at: u64) -> StoreResult<()> {
        self.deleted.record(topic, at)?;
        let removed = self.queues.write().remove_topic(topic);
        remove_queue_dir(&self.config.consume_queue_dir(), topic)?;
        log::warn!(
            "topic {topic} starts over at offset {at} on the master (deleted there): its {} \
             queues here are deleted",
            removed.len()
        );
        Ok(())
    }

    /// A put by the store itself (a delayed message falling due): reserved topics allowed;
    /// under `SYNC_FLUSH` its flush is requested, not waited for.
    /// A put by the store itself, as of `now_ms` (a schedule pass's clock).
    pub(crate) fn put_internal(
        &self,
        msgs: &[MessageInput<'_>],
        now_ms: i64,
    ) -> StoreResult<PutOutcome> {
        self.put(msgs, true, now_ms, false)
    }

    fn delete_topic(&self, topic: &str) -> StoreResult<usize> {
        if topic == SCHEDULE_TOPIC {
            return Err(StoreError::InvalidTopic {
                topic: topic.to_owned(),
                reason: "it holds every delayed message and cannot be deleted",
            });
        }
        // Under the put lock no put of the topic is half dispatched, and the deletion lies
        // past every record of the topic so far.
        message::validate_topic(topic).map_err(|reason| StoreError::InvalidTopic {
            topic: topic.to_owned(),
            reason,
        })?;
        let removed = {
            let _st = self.commit_log.lock();
            self.check_open()?;
            self.deleted.record(topic, self.commit_log.max_offset())?;
            let removed = self.queues.write().remove_topic(topic);
            remove_queue_dir(&self.config.consume_queue_dir(), topic)?;
            removed.len()
        };
        // Logged once the put lock is free: a log handler may put.
        log::info!("deleted topic {topic}: {removed} queues");
        Ok(removed)
    }

    /// Reads the recall markers back into the set: those still in the marker queue. Those
    /// whose messages were dealt with before go again once the schedule passes their horizon.
    fn load_recalls(&self) {
        let Some(q) = self.queue(RECALL_TOPIC, 0) else {
            return;
        };
        for offset in q.min_offset()..q.max_offset() {
            let Some(unit) = q.unit(offset) else {
                continue;
            };
            let raw = match self.look(unit.phy_offset) {
                Ok(Some(raw)) => raw,
                Ok(None) => continue,
                Err(e) => {
                    log::error!("recall marker at queue offset {offset} cannot be read: {e}");
                    continue;
                }
            };
            if let Ok(rec) = message::decode(&raw, false) {
                if let Some((key, due)) = Recalls::marker(rec.properties) {
                    self.recalls.insert(key, due);
                }
            }
        }
        if self.recalls.len() > 0 {
            log::info!("{} recalled timer messages to drop", self.recalls.len());
        }
    }

    pub(crate) fn deliver_due(&self, now_ms: i64) -> Pass {
        schedule::deliver_due(self, &self.delays, now_ms)
    }

    /// Makes a queue's units below `next` visible and tells the long-polling side.
    fn publish_queue(&self, q: &ConsumeQueue, next: u64, tags: &[i64]) {
        q.publish(next);
        self.arrivals.notify(q.topic(), q.queue_id(), next, tags);
        self.hold
            .on_arrival(q.topic(), q.queue_id(), next, Some(tags));
    }

    /// Recovery's dispatch of one record: its index entries, unless the index has them, and,
    /// with a tag code, its queue unit, published. A put writes its entries and units itself.
    /// A unit that cannot be written fails the open: a queue with a hole would give the next
    /// put a queue offset a stored record already has.
    fn redispatch(&self, d: &Dispatch<'_>, unit_tags_code: Option<i64>) -> StoreResult<()> {
        if let Some(index) = self.index.as_ref() {
            let indexed = match self.index_durable {
                Some(durable) => d.phy < durable,
                None => {
                    index.last_indexed_phy().is_some_and(|p| (d.phy as i64) < p)
                        && !index.was_dropped(d.phy)
                }
            };
            if !indexed {
                index_record(index, d, &self.index_behind);
            }
        }
        let Some(tags_code) = unit_tags_code else {
            return Ok(());
        };
        let written = self.queue_or_create(d.topic, d.queue_id).and_then(|q| {
            if d.queue_offset >= q.min_offset() || q.max_offset() == 0 {
                q.write_unit(d.queue_offset, d.phy, d.size, tags_code)?;
                q.publish(d.queue_offset + 1);
            }
            Ok(())
        });
        match written {
            Err(e @ (StoreError::DiskFull(_) | StoreError::Io { .. })) => {
                log::error!(
                    "rebuilding unit topic={} queue_id={} offset={}: {e}",
                    d.topic,
                    d.queue_id,
                    d.queue_offset
                );
                Err(e)
            }
            // A record no queue can hold (a name or queue id this store refuses) stays unread.
            Err(e) => {
                log::error!(
                    "record at offset {} has no queue: topic={} queue_id={}: {e}",
                    d.phy,
                    d.topic,
                    d.queue_id
                );
                Ok(())
            }
            Ok(()) => Ok(()),
        }
    }

    fn recover(&self, validate_from: u64, start: u64) -> StoreResult<RecoveryReport> {
        let delays = &self.config.message_delay_level_ms;
        let report = self.commit_log.recover(
            validate_from,
            start,
            self.config.check_crc_on_recover,
            self.config.broker_role != BrokerRole::Slave,
            |group, phy, raw| {
                let Ok(rec) = message::decode(raw, false) else {
                    return Ok(());
                };
                if self.deleted.covers(rec.topic, phy) {
                    return Ok(());
                }
                let tx = rec.sys_flag & SYSFLAG_TRANSACTION_MASK;
                // Transaction halves and rollbacks have no queue unit.
                let unit = (tx != SYSFLAG_TRANSACTION_PREPARED
                    && tx != SYSFLAG_TRANSACTION_ROLLBACK)
                    .then(|| {
                        unit_tags_code(rec.topic, rec.properties, rec.store_timestamp_ms, delays)
                    });
                self.redispatch(
                    &Dispatch {
                        topic: rec.topic,
                        queue_id: rec.queue_id,
                        queue_offset: rec.queue_offset as u64,
                        phy,
                        group,
                        size: rec.total_size,
                        store_ts: rec.store_timestamp_ms,
                        properties: rec.properties,
                        sys_flag: rec.sys_flag,
                    },
                    unit,
                )
            },
        )?;
        let end = report.end_offset;
        let cl_min = self.commit_log.min_offset();
        let queues: Vec<_> = self.queues.read().values().cloned().collect();
        for q in queues {
            q.truncate_beyond(end)?;
            q.correct_min_offset(cl_min)?;
        }
        self.commit_log
            .restore_last_store_timestamp(report.max_store_timestamp_ms);
        self.dispatched.store(end, Ordering::Release);
        self.flush_all()?;
        if report.records > 0 || report.truncated_bytes > 0 || !report.corrupt_ranges.is_empty() {
            log::info!(
                "recovered store: {} records re-dispatched from offset {start}, end {end}, {} torn bytes removed, {} corrupt ranges",
                report.records, report.truncated_bytes, report.corrupt_ranges.len()
            );
        }
        Ok(report)
    }

    pub(crate) fn flush_all(&self) -> StoreResult<u64> {
        let dispatched = self.dispatched.load(Ordering::Acquire);
        // Taken before the flush, so that every delivery they count is durable when they are.
        let delay_offsets = self.delays.take_changed();
        let cl_flushed = self.commit_log.flush()?;
        // delayOffset.json is replaced through a new file, which a full disk refuses; the
        // queues and the checkpoint, written in place, still go, and the error after them.
        let delays_saved = match delay_offsets {
            Some((number, offsets)) => self.delays.persist(number, &offsets),
            None => Ok(()),
        };
        let queues: Vec<_> = self.queues.read().values().cloned().collect();
        for q in queues {
            q.flush()?;
        }
        if let Some(index) = &self.index {
            index.flush()?;
        }
        self.checkpoint.store(&Checkpoint {
            commit_log_flushed: cl_flushed,
            logics_flushed: dispatched,
            index_flushed: dispatched.min(self.index_behind.load(Ordering::Acquire)),
            written_at_ms: clock::now_ms(),
        })?;
        delays_saved?;
        Ok(cl_flushed)
    }

    /// Flushes the CommitLog only (the periodic async flush).
    pub(crate) fn flush_commit_log(&self) -> StoreResult<u64> {
        self.commit_log.flush()
    }

    fn get(&self, req: &GetRequest<'_>) -> GetOutcome {
        let mut out = GetOutcome {
            status: GetMessageStatus::NoMatchedLogicQueue,
            next_begin_offset: 0,
            min_offset: 0,
            max_offset: 0,
            records: Vec::new(),
            corrupt_offsets: Vec::new(),
            total_bytes: 0,
            in_disk: false,
        };
        let Some(q) = self.queue(req.topic, req.queue_id) else {
            return out;
        };
        let (min, max) = (q.min_offset(), q.max_offset());
        out.min_offset = min;
        out.max_offset = max;
        if max == 0 {
            out.status = GetMessageStatus::NoMessageInQueue;
            return out;
        }
        let offset = match u64::try_from(req.queue_offset) {
            Ok(offset) if offset >= min => offset,
            _ => {
                out.status = GetMessageStatus::OffsetTooSmall;
                out.next_begin_offset = min;
                return out;
            }
        };
        if offset == max {
            out.status = GetMessageStatus::OffsetOverflowOne;
            out.next_begin_offset = offset;
            return out;
        }
        if offset > max {
            out.status = GetMessageStatus::OffsetOverflowBadly;
            // RocketMQ answers 0 here while nothing was deleted, which replays the whole queue;
            // the reader's next offset is the end, as the pull spec says.
            out.next_begin_offset = max;
            return out;
        }
        let max_count = req.max_count.clamp(
            1,
            self.config.max_transfer_count_on_message_in_memory.max(1),
        ) as usize;
        let max_bytes = req
            .max_bytes
            .unwrap_or(self.config.max_transfer_bytes_on_message_in_memory)
            as usize;
        // Without a byte limit of the caller's, a batch of records the page cache has likely
        // dropped gets RocketMQ's smaller on-disk limits, so that a consumer far behind reads
        // the disk in small steps and leaves the page cache to those who keep up.
        let disk_limits = req.max_bytes.is_none().then(|| {
            (
                self.config.max_transfer_bytes_on_message_in_disk as usize,
                self.config.max_transfer_count_on_message_in_disk.max(1) as usize,
            )
        });
        let log_end = self.commit_log.max_offset();
        // As RocketMQ: examine at least 800 units (16,000 bytes) per call, so a sparse tag
        // filter still makes progress.
        let max_units = (max_count as u64).max(800);
        let mut units = Vec::with_capacity(max_count.min(1024));
        let scanned_to = q.scan(offset, max_units, req.tags_codes, max_count, &mut units);
        if scanned_to == offset && units.is_empty() {
            out.status = GetMessageStatus::OffsetFoundNull;
            out.next_begin_offset = offset;
            return out;
        }
        out.status = GetMessageStatus::NoMatchedMessage;
        out.next_begin_offset = scanned_to;
        // The last group verified, [start, end): its other records need no second check.
        let mut verified = (0u64, 0u64);
        for (i, &u) in units.iter().enumerate() {
            out.in_disk = self.in_disk(log_end, u.phy_offset);
            let (cap_bytes, cap_count) = match disk_limits {
                Some(limits) if out.in_disk => limits,
                _ => (max_bytes, max_count),
            };
            if !out.records.is_empty()
                && (out.total_bytes + u.size as usize > cap_bytes || out.records.len() >= cap_count)
            {
                out.next_begin_offset = u.queue_offset;
                break;
            }
            if u.size == 0 {
                log::error!(
                    "corrupt unit (topic={} queue_id={} offset={}): it is zeroed",
                    req.topic,
                    req.queue_id,
                    u.queue_offset
                );
                out.corrupt_offsets.push(u.queue_offset);
                continue;
            }
            let found = self.commit_log.record_bytes(u.phy_offset, u.size);
            if found.is_none() && u.phy_offset < self.commit_log.min_offset() {
                if out.records.is_empty() {
                    out.status = GetMessageStatus::MessageWasRemoving;
                }
                continue;
            }
            // A unit readers see has its bytes written: outside them, the unit is damaged.
            let checked = found
                .ok_or_else(|| "the unit points past the CommitLog's data".to_owned())
                .and_then(|(file, rel)| {
                    if !(verified.0..verified.1).contains(&u.phy_offset) {
                        let ahead = units[i + 1..].iter().map(|n| (n.phy_offset, n.size));
                        verified = self.commit_log.verify_group(&file, rel, u.size, ahead)?;
                    }
                    // The group's checksum covers the body: its CRC need not be computed again.
                    let problem = match message::decode(file.slice(rel, u.size as usize), false) {
                        Ok(r)
                            if r.phy_offset as u64 == u.phy_offset
                                && r.topic == req.topic
                                && r.queue_id == req.queue_id
                                && r.queue_offset as u64 == u.queue_offset =>
                        {
                            None
                        }
                        Ok(_) => Some("the record belongs to another queue".to_owned()),
                        Err(e) => Some(e.to_string()),
                    };
                    problem.map_or(Ok((file, rel)), Err)
                });
            let (file, rel) = match checked {
                Ok(found) => found,
                Err(problem) => {
                    log::error!(
                        "corrupt record at offset {} (topic={} queue_id={} offset={}): {problem}",
                        u.phy_offset,
                        req.topic,
                        req.queue_id,
                        u.queue_offset
                    );
                    out.corrupt_offsets.push(u.queue_offset);
                    continue;
                }
            };
            out.total_bytes += u.size as usize;
            out.records.push(FoundRecord {
                file,
                rel,
                size: u.size,
                queue_offset: u.queue_offset,
                phy_offset: u.phy_offset,
            });
            out.status = GetMessageStatus::Found;
        }
        out
    }

    pub(crate) fn look(&self, phy: u64) -> StoreResult<Option<Vec<u8>>> {
        let Some(raw) = self.commit_log.read_record(phy)? else {
            return Ok(None);
        };
        match message::decode(&raw, true) {
            Ok(rec) if rec.phy_offset as u64 == phy => Ok(Some(raw)),
            Ok(rec) => Err(StoreError::Corrupt {
                phy_offset: phy,
                reason: format!("record claims offset {}", rec.phy_offset),
            }),
            Err(e) => Err(StoreError::Corrupt {
                phy_offset: phy,
                reason: e.to_string(),
            }),
        }
    }

    fn query(
        &self,
        topic: &str,
        key: &str,
        max: usize,
        begin_ms: i64,
        end_ms: i64,
    ) -> Vec<Vec<u8>> {
        let Some(index) = &self.index else {
            return Vec::new();
        };
        let indexed_key = format!("{topic}#{key}");
        let mut out = Vec::new();
        let mut checked = HashSet::new();
        // Candidates include hash collisions and, as index times are whole seconds, messages
        // up to a second past `end_ms`, all filtered below: ask for more than wanted, and for
        // more again while the filter leaves too few.
        let mut limit = max.saturating_mul(4).max(64);
        loop {
            let (candidates, cut) = index.query(&indexed_key, begin_ms, end_ms, limit);
            for phy in candidates {
                if out.len() >= max {
                    break;
                }
                if !checked.insert(phy) {
                    continue;
                }
                let Ok(Some(raw)) = self.look(phy as u64) else {
                    continue;
                };
                let Ok(rec) = message::decode(&raw, false) else {
                    continue;
                };
                if self.deleted.covers(rec.topic, phy as u64) {
                    continue;
                }
                let keys_match = rec
                    .property(PROPERTY_KEYS)
                    .is_some_and(|ks| ks.split(' ').any(|k| k == key))
                    || rec.property(PROPERTY_UNIQ_KEY_SHORT) == Some(key);
                if rec.topic == topic
                    && keys_match
                    && (begin_ms..=end_ms).contains(&rec.store_timestamp_ms)
                {
                    out.push((phy, raw));
                }
            }
            if out.len() >= max || !cut || limit >= QUERY_CANDIDATES_MAX {
                // The newest matches, answered oldest first as RocketMQ sorts them.
                out.sort_unstable_by_key(|&(phy, _)| phy);
                return out.into_iter().map(|(_, raw)| raw).collect();
            }
            limit = limit.saturating_mul(4).min(QUERY_CANDIDATES_MAX);
        }
    }

    fn unit_store_time(&self, q: &ConsumeQueue, queue_offset: u64) -> Option<i64> {
        let unit = q.unit(queue_offset)?;
        let (file, rel) = self.commit_log.record_bytes(unit.phy_offset, unit.size)?;
        Some(crate::commit_log::record_store_timestamp(
            file.slice(rel, unit.size.min(120) as usize),
        ))
    }

    fn offset_for_time(&self, topic: &str, queue_id: i32, ts: i64, boundary: TimeBoundary) -> u64 {
        let Some(q) = self.queue(topic, queue_id) else {
            return 0;
        };
        let min = q.min_offset();
        let (mut lo, mut hi) = (min, q.max_offset());
        let past = |t: i64| match boundary {
            TimeBoundary::Lower => t >= ts,
            TimeBoundary::Upper => t > ts,
        };
        // Store times never decrease along a queue, so bisect for the first one past `ts`.
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let t = (mid..hi).find_map(|o| self.unit_store_time(&q, o));
            match t {
                Some(t) if past(t) => hi = mid,
                Some(_) => lo = mid + 1,
                None => hi = mid,
            }
        }
        match boundary {
            TimeBoundary::Lower => lo,
            TimeBoundary::Upper => lo.saturating_sub(1).max(min),
        }
    }

    /// The directories whose file systems hold the store: the root, and the CommitLog's when
    /// `store_path_commit_log` moves it elsewhere (RocketMQ checks both).
    fn disk_paths(&self) -> Vec<PathBuf> {
        let root = self.config.store_path_root_dir.clone();
        match &self.config.store_path_commit_log {
            Some(commit_log) => vec![commit_log.clone(), root],
            None => vec![root],
        }
    }

    /// The used fraction of the fullest of [`Self::disk_paths`], with its path.
    fn fullest_disk(&self) -> Option<(f64, PathBuf)> {
        self.disk_paths()
            .into_iter()
            .filter_map(|path| disk_used_ratio(&path).map(|r| (r, path)))
            .max_by(|a, b| a.0.total_cmp(&b.0))
    }

    /// Used fraction of the store's fullest file system, and whether writes must be refused.
    pub(crate) fn update_disk_full(&self) -> Option<f64> {
        let (ratio, path) = self.fullest_disk()?;
        let warning_level = self.retention.read().disk_space_warning_level_ratio;
        let full = ratio * 100.0 > f64::from(warning_level);
        let was = self.disk_full.swap(full, Ordering::AcqRel);
        if full && !was {
            log::error!(
                "disk use {:.1}% of {} is above diskSpaceWarningLevelRatio {warning_level}%: \
                 refusing writes",
                ratio * 100.0,
                path.display(),
            );
        } else if was && !full {
            log::info!("disk use back to {:.1}%: accepting writes", ratio * 100.0);
        }
        Some(ratio)
    }

    /// Deletes CommitLog segments older than `file_reserved_time_hours` when it is a delete hour
    /// or the disk is fuller than `disk_max_used_space_ratio` (or `force`); above
    /// `disk_space_clean_forcibly_ratio` (or `disk_space_warning_level_ratio`, if lower) the
    /// oldest segment goes even if not expired. The
    /// active segment is never deleted. Queues, then index files, follow the new minimum.
    pub(crate) fn delete_expired_files(&self, now_ms: i64, force: bool) -> StoreResult<usize> {
        let ratio = self.fullest_disk().map_or(0.0, |(r, _)| r) * 100.0;
        let retention = self.retention.read().clone();
        let delete_hour =
            clock::local_hour(now_ms).is_some_and(|h| retention.delete_when_hours.contains(&h));
        let space_tight = ratio > f64::from(retention.disk_max_used_space_ratio);
        // As RocketMQ: past either ratio (writes stop at the warning level, so a forced
        // clean-up set above it would never come).
        let forcibly = ratio
            > f64::from(
                retention
                    .disk_space_clean_forcibly_ratio
                    .min(retention.disk_space_warning_level_ratio),
            );
        if !(delete_hour || space_tight || force || forcibly) {
            return Ok(0);
        }
        let expire_ms = i64::try_from(retention.file_reserved_time_hours)
            .map_or(i64::MAX, |h| h.saturating_mul(3_600_000));
        // One pass at a time: two would each judge the same oldest segment and delete two.
        let _pass = self.cleaning.lock();
        let mut deleted = 0;
        // RocketMQ deletes at most 10 segments per pass to spread the I/O.
        while deleted < 10 {
            let files = self.commit_log.files().snapshot();
            if files.len() <= 1 {
                break;
            }
            let oldest = &files[0];
            let expired = oldest
                .modified_ms()
                .is_some_and(|m| now_ms.saturating_sub(m) >= expire_ms);
            if !(expired || (forcibly && deleted == 0)) {
                break;
            }
            if self
                .commit_log
                .delete_oldest_segment(oldest.file_from_offset())?
                .is_none()
            {
                break;
            }
            log::info!("deleted commit log segment {}", oldest.path().display());
            deleted += 1;
        }
        if deleted > 0 {
            let cl_min = self.commit_log.min_offset();
            let queues: Vec<_> = self.queues.read().values().cloned().collect();
            for q in queues {
                q.correct_min_offset(cl_min)?;
            }
            if let Some(index) = &self.index {
                index.delete_before(cl_min as i64)?;
            }
            self.deleted.prune(cl_min)?;
        }
        Ok(deleted)
    }
}

/// Remembers a predicate's answer for the properties it last saw: a batch usually shares one
/// properties buffer, so each distinct buffer is scanned once.
#[derive(Default)]
struct SameProperties<'a> {
    last: Option<(&'a [u8], bool)>,
}

impl<'a> SameProperties<'a> {
    fn get(&mut self, props: &'a [u8], f: impl FnOnce(&[u8]) -> bool) -> bool {
        match self.last {
            Some((seen, v)) if std::ptr::eq(seen, props) => v,
            _ => {
                let v = f(props);
                self.last = Some((props, v));
                v
            }
        }
    }
}

/// Appends the distinct codes of `codes` to `out`; a batch's codes come in runs.
fn distinct_tags(codes: impl Iterator<Item = i64>, out: &mut SmallVec<[i64; 8]>) {
    let mut last = None;
    for code in codes {
        if last != Some(code) && !out.contains(&code) {
            out.push(code);
        }
        last = Some(code);
    }
}

/// Indexes a record under `topic#key` for its unique id and each of its space-separated keys.
/// Recovery skips records the index already holds; a rolled-back transaction half is never
/// indexed. Returns false only when the properties name no key, so that records sharing them
/// need no look.
fn index_record(index: &IndexService, d: &Dispatch<'_>, behind: &AtomicU64) -> bool {
    if d.sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_ROLLBACK {
        return true;
    }
    let [uniq, ks] =
        message::properties_named(d.properties, [PROPERTY_UNIQ_KEY_SHORT, PROPERTY_KEYS]);
    if uniq.is_none() && ks.is_none() {
        return false;
    }
    // The keys share one buffer rather than a string each.
    let mut buf = String::with_capacity(
        2 * (d.topic.len() + 1) + uniq.map_or(0, str::len) + ks.map_or(0, str::len),
    );
    let mut spans: SmallVec<[(usize, usize); 4]> = SmallVec::new();
    for k in uniq
        .into_iter()
        .chain(ks.into_iter().flat_map(|ks| ks.split(' ')))
        .filter(|k| !k.is_empty())
    {
        let start = buf.len();
        buf.push_str(d.topic);
        buf.push('#');
        buf.push_str(k);
        spans.push((start, buf.len()));
    }
    if !spans.is_empty() {
        let keys = spans.iter().map(|&(a, b)| &buf[a..b]);
        if let Err(e) = index.put(keys, d.phy as i64, d.store_ts, clock::now_ms) {
            if behind.fetch_min(d.group, Ordering::AcqRel) == u64::MAX {
                log::error!(
                    "indexing the record at offset {} failed: {e}; the store indexes it and \
                     the records after it again when it next opens",
                    d.phy
                );
            }
        }
    }
    true
}

/// A timer message's delivery time in epoch milliseconds: `TIMER_DELAY_SEC` or, else,
/// `TIMER_DELAY_MS` after `now_ms`, else `TIMER_DELIVER_MS`; None for any other message.
pub(crate) fn timer_due(properties: &[u8], now_ms: i64) -> Option<i64> {
    let number =
        |name| message::property(properties, name).and_then(|v| v.trim().parse::<i64>().ok());
    // RocketMQ's order. A parked timer message keeps TIMER_DELIVER_MS alone.
    if let Some(seconds) = number(PROPERTY_TIMER_DELAY_SEC) {
        return Some(now_ms.saturating_add(seconds.saturating_mul(1000)));
    }
    if let Some(ms) = number(PROPERTY_TIMER_DELAY_MS) {
        return Some(now_ms.saturating_add(ms));
    }
    number(PROPERTY_TIMER_DELIVER_MS)
}

/// The level (1-based) a timer message `remaining_ms` from due is parked in: the longest delay
/// that does not pass the due time, else the shortest.
fn level_for(levels: &[u64], remaining_ms: i64) -> usize {
    let fits = levels
        .iter()
        .enumerate()
        .filter(|(_, d)| **d as i64 <= remaining_ms)
        .max_by_key(|(_, d)| **d);
    let (index, _) = fits.unwrap_or_else(|| {
        levels
            .iter()
            .enumerate()
            .min_by_key(|(_, d)| **d)
            .expect("levels is not empty")
    });
    index + 1
}

/// Tag code of a ConsumeQueue unit. As in RocketMQ, a SCHEDULE_TOPIC_XXXX record with a DELAY
/// level carries its due time (store time + the level's delay, levels clamped to the table);
/// every other record carries the hash of its tag. Live puts and rebuilds use this one rule.
fn unit_tags_code(topic: &str, properties: &[u8], store_ts: i64, delays: &[u64]) -> i64 {
    if topic == SCHEDULE_TOPIC && !delays.is_empty() {
        if let Some(level) =
            message::property(properties, PROPERTY_DELAY).and_then(|v| v.trim().parse::<i64>().ok())
        {
            let index = (level.max(1) as usize).min(delays.len()) - 1;
            return store_ts.saturating_add(delays[index] as i64);
        }
    }
    message::tags_code(message::property(properties, PROPERTY_TAGS))
}

fn disk_used_ratio(path: &Path) -> Option<f64> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs writes into a zeroed struct we own; `c` is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &raw mut st) } != 0 {
        return None;
    }
    used_ratio(st.f_blocks as u64, st.f_bfree as u64, st.f_bavail as u64)
}

/// Used blocks over the blocks a non-root writer could ever hold: used plus still available,
/// as `df` and RocketMQ's `getDiskPartitionSpaceUsedPercent` count them. Blocks reserved for
/// root count neither way, so a file system with a large reserve is not taken for full.
fn used_ratio(blocks: u64, free: u64, avail: u64) -> Option<f64> {
    let used = blocks.saturating_sub(free);
    let usable = used + avail.min(free);
    (usable > 0).then(|| used as f64 / usable as f64)
}

/// Turns an IPv4-mapped IPv6 address into plain IPv4 (C++ clients read 4-byte hosts only).
pub fn normalize_host(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), addr.port()),
            None => addr,
        },
        IpAddr::V4(_) => addr,
    }
}

#[cfg(test)]
mod tests {
    use super::used_ratio;

    #[test]
    fn disk_use_is_counted_as_df_counts_it() {
        // 252 blocks, 198 free of which 38 available to non-root writers: df says 59%.
        let r = used_ratio(252, 198, 38).unwrap();
        assert!((r - 54.0 / 92.0).abs() < 1e-9, "{r}");
        // No root reserve: used over total.
        assert_eq!(used_ratio(100, 25, 25), Some(0.75));
        // Full for non-root writers although root could still write.
        assert_eq!(used_ratio(100, 5, 0), Some(1.0));
        assert_eq!(used_ratio(0, 0, 0), None);
    }
}
