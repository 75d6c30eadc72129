//! The CommitLog: one append-only log of every topic's messages, in preallocated segments.
//!
//! ## Append groups and fences
//! Each append (one message or a batch) is written as a *group*: its records end to end, then a
//! 20-byte fence that seals them:
//!
//! | off | size | field        | invariant                                      |
//! |-----|------|--------------|------------------------------------------------|
//! |   0 |    4 | TOTALSIZE    | 20                                             |
//! |   4 |    4 | MAGICCODE    | 0x5EA1F3C7                                     |
//! |   8 |    8 | GROUPSTART   | CommitLog offset of the group's first record   |
//! |  16 |    4 | GROUPCRC     | crc32 of every byte from GROUPSTART to here    |
//!
//! The V1 record format checksums only the body, so without the fence a torn write that
//! garbled a header or the properties would pass as a record. With it, recovery keeps a group
//! only when all of its bytes are intact, which also makes a batch all-or-nothing across a
//! crash. Readers never meet a fence: they find records through ConsumeQueue units.
//!
//! A group never spans segments. When one does not fit (with 8 spare bytes), a blank record
//! (magic 0xCBD43194, TOTALSIZE = the rest of the segment) closes the segment.
//!
//! ## Durability contract
//! * `append` returns once the group is in the page cache and visible to readers. A process
//!   crash (kill -9) after that loses nothing; a power loss may lose what was not yet flushed.
//! * Under `SYNC_FLUSH`, the store waits for `flushed_offset() >= end` before answering: the
//!   group is on disk. Concurrent appenders share one fsync (group commit). An appender that
//!   must not block (an event loop) requests the flush instead and learns of it from an eventfd,
//!   so any number of appends in flight share one fsync.
//! * After a crash, recovery keeps exactly the groups whose fences verify, up to the first torn
//!   group at the tail. A damaged group followed by intact ones is kept in place (its reads report
//!   corruption) rather than truncating intact data behind it.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};

use crate::epoch::Epoch;
use crate::error::{StoreError, StoreResult};
use crate::mapped_file::MappedFile;
use crate::mapped_file_queue::MappedFileQueue;
use crate::message::{self, BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE};
use crate::populate::Populator;
use crate::wakeup::EventFd;

pub const FENCE_MAGIC_CODE: u32 = 0x5EA1_F3C7;
pub const FENCE_LEN: usize = 20;
/// The staging buffer is kept between `SYNC_FLUSH` appends up to this size, so a rare large
/// batch does not pin its memory.
const STAGING_KEEP_BYTES: usize = 1 << 20;
/// Group-commit rounds that write more than this on average have their segment pages
/// populated rather than zeroed ahead (see `Allocation::Written`): zeroing writes every byte
/// twice, and past a few pages a round the second write costs more than the block allocation it
/// spares the fsync. On the reference VM, 8 appenders of 1.9 KB rounds got 6–17% more puts from
/// zeroing, and of 61 KB rounds 10–14% fewer in three runs of four.
const ZEROED_ROUND_MAX_BYTES: u64 = 16 * 1024;
/// Space a segment must keep free for its closing blank record.
pub const END_FILE_MIN_BLANK_LENGTH: u64 = 8;
/// Groups at least this large are remembered once verified (see [`CommitLog::verify_group`]).
const LARGE_GROUP_BYTES: u64 = 256 * 1024;
const LARGE_GROUPS_KEPT: usize = 16;

/// The magic code of a message stored by RocketMQ 5 (two-byte topic length), which pyrmq does
/// not write; RocketMQ 4's is [`MESSAGE_MAGIC_CODE`].
const MESSAGE_MAGIC_CODE_V2: u32 = 0xDAA3_20AB;

/// State guarded by the put lock.
pub struct WriteState {
    /// End of the last appended group (a CommitLog offset).
    pub wrote: u64,
    /// Store timestamps never decrease, so ConsumeQueue time searches can bisect.
    pub last_store_timestamp_ms: i64,
    /// Where a `SYNC_FLUSH` group is encoded before it is written through the file.
    pub staging: Vec<u8>,
    /// Start of the segment last created ahead of the roll (0: none yet).
    pub prepared_segment: u64,
    /// A put's ConsumeQueue units `(phy offset, size, tag code)`, kept between puts.
    pub units: Vec<(u64, u32, i64)>,
}

/// Where an append group goes: a segment and its position in it.
pub struct Reservation {
    pub file: Arc<MappedFile>,
    pub rel: u64,
    pub phy: u64,
}

pub struct CommitLog {
    files: MappedFileQueue,
    put_lock: Mutex<WriteState>,
    /// End of published data: every byte below it is written and may be read.
    max_offset: AtomicU64,
    flushed: AtomicU64,
    /// The highest end an appender asked to have flushed.
    flush_requested_to: AtomicU64,
    /// Moves when a request may need the group-commit thread, and at shutdown.
    flush_requests: Epoch,
    /// Moves after each flush.
    flushes: Epoch,
    /// Set at shutdown, so that a group-commit thread with nothing to flush returns at once.
    closing: AtomicBool,
    /// The highest end a caller that does not block asked to have flushed, and the fd every
    /// flush that may have covered it signals (an event loop watches it).
    nowait_requested: AtomicU64,
    flushed_fd: EventFd,
    /// Flush requests made since the current fsync started.
    arrivals: AtomicUsize,
    /// Appenders the previous fsync released, and how long it took: the flusher lingers for
    /// that many to queue again, at most that long, so one fsync covers the whole group.
    last_cover: AtomicUsize,
    last_flush_us: AtomicU64,
    /// Bytes a group-commit round wrote, as a moving average (written by that thread only).
    round_bytes: AtomicU64,
    /// Spans `[start, end)` of the last large groups [`Self::verify_group`] verified.
    large_groups: Mutex<std::collections::VecDeque<(u64, u64)>>,
    populator: Populator,
}

/// CommitLog bytes for a slave (see [`CommitLog::read_replica`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaChunk {
    pub data: Vec<u8>,
    /// The offset after `data` (for a closing blank, the next segment's start).
    pub next: u64,
    /// How many of `data`'s first bytes are damaged in this log, sent as they are.
    pub damaged: usize,
}

/// What the recovery scan found.
#[derive(Debug, Default)]
pub struct RecoveryReport {
    pub end_offset: u64,
    /// Records re-dispatched (those at or after the recovery start).
    pub records: u64,
    pub groups: u64,
    /// `(start, end)` CommitLog ranges that failed their checks but were followed by intact
    /// data, so they were kept.
    pub corrupt_ranges: Vec<(u64, u64)>,
    /// Bytes discarded at the torn tail.
    pub truncated_bytes: u64,
    pub max_store_timestamp_ms: i64,
}

impl CommitLog {
    pub fn load(files: MappedFileQueue) -> std::io::Result<Self> {
        Ok(Self {
            files,
            put_lock: Mutex::new(WriteState {
                wrote: 0,
                last_store_timestamp_ms: 0,
                staging: Vec::new(),
                prepared_segment: 0,
                units: Vec::new(),
            }),
            max_offset: AtomicU64::new(0),
            flushed: AtomicU64::new(0),
            flush_requested_to: AtomicU64::new(0),
            flush_requests: Epoch::new(),
            flushes: Epoch::new(),
            closing: AtomicBool::new(false),
            nowait_requested: AtomicU64::new(0),
            flushed_fd: EventFd::new()?,
            arrivals: AtomicUsize::new(0),
            last_cover: AtomicUsize::new(0),
            last_flush_us: AtomicU64::new(0),
            round_bytes: AtomicU64::new(0),
            large_groups: Mutex::new(std::collections::VecDeque::new()),
            populator: Populator::default(),
        })
    }

    pub fn files(&self) -> &MappedFileQueue {
        &self.files
    }

    pub fn populator(&self) -> &Populator {
        &self.populator
    }

    pub fn segment_size(&self) -> u64 {
        self.files.file_size()
    }

    pub fn lock(&self) -> MutexGuard<'_, WriteState> {
        self.put_lock.lock()
    }

    pub fn max_offset(&self) -> u64 {
        self.max_offset.load(Ordering::Acquire)
    }

    pub fn min_offset(&self) -> u64 {
        self.files.min_offset().unwrap_or_else(|| self.max_offset())
    }

    pub fn flushed_offset(&self) -> u64 {
        self.flushed.load(Ordering::Acquire)
    }

    /// Finds room for a group of `len` bytes (fence included), closing the current segment with
    /// a blank record and creating the next one when it does not fit. On error nothing has been
    /// written.
    pub fn reserve(&self, st: &mut WriteState, len: u64) -> StoreResult<Reservation> {
        let size = self.segment_size();
        assert!(
            len + END_FILE_MIN_BLANK_LENGTH <= size,
            "group larger than a segment"
        );
        let wrote = st.wrote;
        let rel = wrote % size;
        let current = if wrote == 0 && self.files.is_empty() {
            None
        } else {
            self.files.find(wrote)
        };
        match current {
            Some(file) if rel + len + END_FILE_MIN_BLANK_LENGTH <= size => {
                file.ensure_writable(rel, rel + len)?;
                self.populator.after_write(&file, rel + len);
                let next = file.file_from_offset() + size;
                if st.prepared_segment != next
                    && self.populator.wants_next_segment(&file, rel + len)
                {
                    st.prepared_segment = next;
                    self.prepare_segment(next);
                }
                Ok(Reservation {
                    file,
                    rel,
                    phy: wrote,
                })
            }
            Some(file) => {
                // Make room in the next segment first so that a full disk leaves this one
                // untouched.
                let next_start = file.file_from_offset() + size;
                let next = self.files.get_or_create(next_start)?;
                next.ensure_writable(0, len)?;
                self.populator.after_write(&next, len);
                file.ensure_writable(rel, rel + 8)?;
                let blank_len = size - rel;
                let mut blank = [0u8; 8];
                blank[..4].copy_from_slice(&(blank_len as u32).to_be_bytes());
                blank[4..].copy_from_slice(&BLANK_MAGIC_CODE.to_be_bytes());
                // SAFETY: we hold the put lock and these bytes are past the published end.
                unsafe { file.write_at(rel, &blank) };
                st.wrote = next_start;
                self.max_offset.store(next_start, Ordering::Release);
                Ok(Reservation {
                    file: next,
                    rel: 0,
                    phy: next_start,
                })
            }
            None => {
                let start = wrote - rel;
                let file = self.files.get_or_create(start)?;
                file.ensure_writable(rel, rel + len)?;
                self.populator.after_write(&file, rel + len);
                Ok(Reservation {
                    file,
                    rel,
                    phy: wrote,
                })
            }
        }
    }

    /// Creates the segment starting at `start` ahead of the roll and has its head populated.
    fn prepare_segment(&self, start: u64) {
        if let Some(next) = self.files.create_ahead(start) {
            self.populator.next_segment(&next);
        }
    }

    /// Seals the group written at `res` (records occupying `records_len` bytes) with its fence
    /// and publishes it. Returns the new end offset.
    pub fn seal_and_publish(
        &self,
        st: &mut WriteState,
        res: &Reservation,
        records_len: u64,
    ) -> u64 {
        let fence_rel = res.rel + records_len;
        let fence = fence(res.phy, res.file.slice(res.rel, records_len as usize));
        // SAFETY: we hold the put lock and these bytes are past the published end.
        unsafe { res.file.write_at(fence_rel, &fence) };
        self.publish(st, res.phy + records_len + FENCE_LEN as u64)
    }

    /// A zeroed buffer of `len` bytes to encode a group's records into, reusing the last one.
    pub fn staging(&self, st: &mut WriteState, len: usize) -> Vec<u8> {
        let mut buf = std::mem::take(&mut st.staging);
        buf.clear();
        buf.resize(len, 0);
        buf
    }

    /// Seals the records encoded in `staged` (from [`Self::staging`]), writes the group at
    /// `res` through the file and publishes it. Under `SYNC_FLUSH` this beats writing through
    /// the mapping: each fsync write-protects the pages it cleans, so the next store into the
    /// same page faults, and the write-back that follows must shoot down the other CPU's TLB.
    /// On error nothing is published.
    pub fn write_staged_and_publish(
        &self,
        st: &mut WriteState,
        res: &Reservation,
        mut staged: Vec<u8>,
    ) -> StoreResult<u64> {
        let records_len = staged.len() as u64;
        let fence = fence(res.phy, &staged);
        staged.extend_from_slice(&fence);
        res.file.write_through(res.rel, &staged)?;
        if staged.capacity() <= STAGING_KEEP_BYTES {
            st.staging = staged;
        }
        Ok(self.publish(st, res.phy + records_len + FENCE_LEN as u64))
    }

    fn publish(&self, st: &mut WriteState, end: u64) -> u64 {
        st.wrote = end;
        self.max_offset.store(end, Ordering::Release);
        end
    }

    /// The bytes of a published record at `phy` of `size` bytes, or `None` when that range is
    /// gone (retention) or not yet written.
    pub fn record_bytes(&self, phy: u64, size: u32) -> Option<(Arc<MappedFile>, u64)> {
        if phy + u64::from(size) > self.max_offset() {
            return None;
        }
        let file = self.files.find(phy)?;
        let rel = phy - file.file_from_offset();
        if rel + u64::from(size) > file.file_size() {
            return None;
        }
        Some((file, rel))
    }

    /// Checks the append group holding the record at `rel` of `file` (`size` bytes) against
    /// the checksum of the fence that seals it. Returns the group's span in the log,
    /// `[start, end)`: every record in it is as written. A group is written and published
    /// whole, so a byte changed anywhere in it (a header field the body CRC does not cover, a
    /// property) fails every record of it.
    ///
    /// `ahead` lists records known to follow (`(offset, size)`, in log order, as a read's queue
    /// units do): the walk to the fence steps over them without reading their headers, which
    /// would be a chain of dependent cache misses. Large groups verified lately are remembered,
    /// so that a batch of thousands of records read a few at a time is checked once.
    pub fn verify_group(
        &self,
        file: &MappedFile,
        rel: u64,
        size: u32,
        ahead: impl IntoIterator<Item = (u64, u32)>,
    ) -> Result<(u64, u64), String> {
        let base = file.file_from_offset();
        let phy = base + rel;
        let limit = self.max_offset().saturating_sub(base).min(file.file_size());
        let mut ahead = ahead.into_iter().peekable();
        let mut pos = rel + u64::from(size);
        let mut looked_up = false;
        loop {
            if let Some(&(next, next_size)) = ahead.peek() {
                if next < base + pos {
                    ahead.next();
                    continue;
                }
                if next == base + pos && pos + u64::from(next_size) <= limit {
                    ahead.next();
                    pos += u64::from(next_size);
                    continue;
                }
            }
            if !looked_up && pos - rel >= LARGE_GROUP_BYTES {
                // Far from the fence yet: a large group, perhaps verified a moment ago.
                looked_up = true;
                if let Some(span) = self.large_group(phy) {
                    return Ok(span);
                }
            }
            if pos + 8 > limit {
                return Err("no fence seals the record's group".to_owned());
            }
            let head = file.slice(pos, 8);
            let total = u32::from_be_bytes(head[..4].try_into().expect("4 bytes"));
            let magic = u32::from_be_bytes(head[4..8].try_into().expect("4 bytes"));
            match magic {
                MESSAGE_MAGIC_CODE
                    if total as usize >= message::FIXED_LEN_V4
                        && pos + u64::from(total) <= limit =>
                {
                    pos += u64::from(total);
                }
                FENCE_MAGIC_CODE if total as usize == FENCE_LEN && pos + 20 <= limit => {
                    let fence = file.slice(pos, FENCE_LEN);
                    let start = u64::from_be_bytes(fence[8..16].try_into().expect("8 bytes"));
                    let crc = u32::from_be_bytes(fence[16..20].try_into().expect("4 bytes"));
                    if start < base || start > phy {
                        return Err(format!("the fence after it names a group at {start}"));
                    }
                    let span = (start, base + pos + FENCE_LEN as u64);
                    let large = span.1 - span.0 >= LARGE_GROUP_BYTES;
                    if large && !looked_up {
                        if let Some(span) = self.large_group(phy) {
                            return Ok(span);
                        }
                    }
                    let group_rel = start - base;
                    if crc32fast::hash(file.slice(group_rel, (pos - group_rel) as usize)) != crc {
                        return Err("its group's checksum does not match".to_owned());
                    }
                    if large {
                        let mut kept = self.large_groups.lock();
                        if kept.len() == LARGE_GROUPS_KEPT {
                            kept.pop_front();
                        }
                        kept.push_back(span);
                    }
                    return Ok(span);
                }
                _ => return Err("a record after it in its group is damaged".to_owned()),
            }
        }
    }

    /// The span of a large group verified lately that holds `phy`.
    fn large_group(&self, phy: u64) -> Option<(u64, u64)> {
        self.large_groups
            .lock()
            .iter()
            .find(|(start, end)| (*start..*end).contains(&phy))
            .copied()
    }

    /// Copies the record at `phy` with `pread` (offsets here may come from clients), checking
    /// that it lies inside published data, starts with a message header and its group
    /// verifies ([`Self::verify_group`]).
    pub fn read_record(&self, phy: u64) -> StoreResult<Option<Vec<u8>>> {
        let Some((file, rel)) = self.record_bytes(phy, 8) else {
            return Ok(None);
        };
        let mut head = [0u8; 8];
        file.read_at(rel, &mut head)?;
        let size = u32::from_be_bytes(head[..4].try_into().expect("4 bytes"));
        let magic = u32::from_be_bytes(head[4..8].try_into().expect("4 bytes"));
        if magic != MESSAGE_MAGIC_CODE || size < 8 {
            return Ok(None);
        }
        // Against the segment already found: retention may remove it from the list meanwhile,
        // and the record is still whole in it.
        if rel + u64::from(size) > file.file_size()
            || file.file_from_offset() + rel + u64::from(size) > self.max_offset()
        {
            return Err(StoreError::Corrupt {
                phy_offset: phy,
                reason: format!("record size {size} runs past the end of its segment or the log"),
            });
        }
        let mut raw = vec![0u8; size as usize];
        file.read_at(rel, &mut raw)?;
        self.verify_group(&file, rel, size, [])
            .map_err(|reason| StoreError::Corrupt {
                phy_offset: phy,
                reason,
            })?;
        Ok(Some(raw))
    }

    /// Published bytes from `from` for a slave: whole append groups, at least one and then as
    /// many as fit in `max_bytes`, all in one segment; or, where a segment's closing blank
    /// lies, its 8-byte header alone. `None` when nothing is published past `from`.
    ///
    /// A group here that fails its checks is sent as it is, marked `damaged`, together with
    /// what ends it: the next intact group, or the segment's closing blank (or nothing, when the
    /// damage runs to the segment's end). A slave keeps it in place as this log does, rather than
    /// refusing it for good. Damage with nothing intact published after it yet is an error.
    pub fn read_replica(&self, from: u64, max_bytes: usize) -> StoreResult<Option<ReplicaChunk>> {
        let published = self.max_offset();
        if from >= published {
            return Ok(None);
        }
        let gone = || StoreError::Replication {
            offset: from,
            reason: format!(
                "no segment holds it (the CommitLog runs from {} to {published})",
                self.min_offset()
            ),
        };
        let file = self.files.find(from).ok_or_else(gone)?;
        let size = self.segment_size();
        let base = file.file_from_offset();
        let rel = from - base;
        let limit = (published - base).min(size);
        if rel + 8 <= limit {
            let head = file.slice(rel, 8);
            let total = u64::from(u32::from_be_bytes(head[..4].try_into().expect("4 bytes")));
            let magic = u32::from_be_bytes(head[4..8].try_into().expect("4 bytes"));
            if magic == BLANK_MAGIC_CODE && total == size - rel {
                return Ok(Some(ReplicaChunk {
                    data: head.to_vec(),
                    next: base + size,
                    damaged: 0,
                }));
            }
        }
        if let Some(end) = intact_run(&file, rel, limit, max_bytes) {
            return Ok(Some(ReplicaChunk {
                data: file.slice(rel, (end - rel) as usize).to_vec(),
                next: base + end,
                damaged: 0,
            }));
        }
        let magic = FENCE_MAGIC_CODE.to_be_bytes();
        let finder = memchr::memmem::Finder::new(&magic);
        // Where the damage ends, where the chunk ends, and the offset after it.
        let (damaged_end, end, next) = match search_region(&finder, &file, rel, limit, from) {
            Some(g) => {
                let g_rel = g - base;
                let end =
                    intact_run(&file, g_rel, limit, max_bytes).expect("the group's fence verifies");
                (g_rel, end, base + end)
            }
            None if published >= base + size => match closing_blank(&file, rel, size) {
                Some(p) => (p, p + END_FILE_MIN_BLANK_LENGTH, base + size),
                None => (size, size, base + size),
            },
            None => {
                return Err(StoreError::Corrupt {
                    phy_offset: from,
                    reason: "damaged, and no intact group follows yet: it cannot be sent to a \
                             slave"
                        .to_owned(),
                })
            }
        };
        log::warn!(
            "commit log damaged between offsets {from} and {}: sent to a slave as it is",
            base + damaged_end
        );
        Ok(Some(ReplicaChunk {
            data: file.slice(rel, (end - rel) as usize).to_vec(),
            next,
            damaged: (damaged_end - rel) as usize,
        }))
    }

    /// Writes `data` received from the master at the write position `from` (the caller holds
    /// the put lock and checked that it is `st.wrote`, and that `data` is whole verified
    /// groups, or ends the segment with its closing blank or damage up to its end, as `roll`
    /// says), and publishes it. Returns the new end.
    pub fn write_replica(
        &self,
        st: &mut WriteState,
        from: u64,
        data: &[u8],
        roll: bool,
    ) -> StoreResult<u64> {
        let size = self.segment_size();
        let rel = from % size;
        let file = self.files.get_or_create(from - rel)?;
        file.ensure_writable(rel, rel + data.len() as u64)?;
        file.write_through(rel, data)?;
        let end = if roll {
            let next = from - rel + size;
            // Created now, so that recovery finds the roll complete.
            self.files.get_or_create(next)?;
            next
        } else {
            from + data.len() as u64
        };
        Ok(self.publish(st, end))
    }

    /// Flushes published bytes up to now; returns the flushed offset.
    pub fn flush(&self) -> StoreResult<u64> {
        let target = self.max_offset();
        let from = self.flushed_offset();
        if target > from {
            self.files.flush(from, target)?;
            self.flushed.fetch_max(target, Ordering::AcqRel);
            // Appenders waiting for their bytes, whoever flushed them (the group-commit
            // service, an explicit flush, the last one at close).
            self.flushes.advance();
            // A request above `from` was either covered now or left a request for the next
            // flush, which signals in its turn: none is missed.
            if self.nowait_requested.load(Ordering::Acquire) > from {
                self.flushed_fd.signal();
            }
        }
        Ok(self.flushed_offset())
    }

    /// Readable after a flush that may have made a [`Self::request_flush`] durable; the
    /// watcher clears it with [`Self::clear_flushed_fd`], then reads [`Self::flushed_offset`].
    pub fn flushed_fd(&self) -> i32 {
        self.flushed_fd.raw()
    }

    pub fn clear_flushed_fd(&self) {
        self.flushed_fd.clear();
    }

    /// Asks the group-commit service to flush up to `end` without waiting for it: the flush
    /// that makes it durable signals [`Self::flushed_fd`], unless it already is durable.
    pub fn request_flush(&self, end: u64) {
        // Published before the check, so a flush that covers `end` after it sees the request.
        self.nowait_requested.fetch_max(end, Ordering::AcqRel);
        if self.flushed_offset() < end {
            self.enqueue_flush(end);
        }
    }

    /// Blocks until `end` is durable or the timeout passes; returns whether it became durable.
    pub fn wait_flushed(&self, end: u64, timeout: Duration) -> bool {
        if self.flushed_offset() >= end {
            return true;
        }
        self.enqueue_flush(end);
        self.flushes
            .wait_until(Instant::now() + timeout, || self.flushed_offset() >= end)
    }

    fn enqueue_flush(&self, end: u64) {
        self.flush_requested_to.fetch_max(end, Ordering::AcqRel);
        let arrived = self.arrivals.fetch_add(1, Ordering::AcqRel) + 1;
        // The flusher needs waking when idle (the first request) and when lingering, once
        // the appenders it waits for are all here; waking it for each costs a switch apiece.
        if arrived == 1 || arrived >= self.last_cover.load(Ordering::Acquire) {
            self.flush_requests.advance();
        }
    }

    /// One turn of the group-commit service: waits up to `idle` for a request, then flushes
    /// everything published so far, which covers every appender waiting at that moment.
    pub fn group_commit_once(&self, idle: Duration) -> StoreResult<()> {
        let pending = || self.flush_requested_to.load(Ordering::Acquire) > self.flushed_offset();
        let woken = self.flush_requests.wait_until(Instant::now() + idle, || {
            pending() || self.closing.load(Ordering::Acquire)
        });
        if !woken || !pending() {
            return Ok(());
        }
        // Linger asleep rather than spinning: on a small machine a spinning flusher takes the
        // CPU from the very appenders it waits for.
        let expected = self.last_cover.load(Ordering::Acquire);
        let linger = Duration::from_micros(self.last_flush_us.load(Ordering::Acquire).min(2000));
        self.flush_requests.wait_until(Instant::now() + linger, || {
            self.arrivals.load(Ordering::Acquire) >= expected
        });
        let covered = self.arrivals.swap(0, Ordering::AcqRel);
        let began = Instant::now();
        let from = self.flushed_offset();
        let result = self.flush();
        self.last_flush_us
            .store(began.elapsed().as_micros() as u64, Ordering::Release);
        self.last_cover.store(covered, Ordering::Release);
        let to = result?;
        self.note_round(to.saturating_sub(from));
        Ok(())
    }

    /// Folds a round's size into the average that decides how segments are reserved ahead.
    fn note_round(&self, bytes: u64) {
        let avg = (self.round_bytes.load(Ordering::Relaxed) * 7 + bytes) / 8;
        self.round_bytes.store(avg, Ordering::Relaxed);
        self.populator
            .set_large_rounds(avg > ZEROED_ROUND_MAX_BYTES);
    }

    /// Wakes the group-commit service (used at shutdown).
    pub fn wake_flusher(&self) {
        self.closing.store(true, Ordering::Release);
        self.flush_requests.advance();
    }

    /// Refuses a log whose oldest segment opens with message records that no fence seals, as
    /// Apache RocketMQ writes its CommitLog: recovery would take them all for a torn tail and
    /// truncate them. With `own_checkpoint` (this store's checkpoint, written before its first
    /// put) such records are a first group cut short by a crash, truncated as usual.
    pub fn check_fenced(&self, own_checkpoint: bool) -> StoreResult<()> {
        let Some(file) = self.files.first().filter(|_| !own_checkpoint) else {
            return Ok(());
        };
        let (mut rel, mut records) = (0u64, 0u64);
        loop {
            let readable = file.data_end_from(rel);
            if rel + 8 > readable {
                break;
            }
            let head = file.slice(rel, 8);
            let total = u32::from_be_bytes(head[..4].try_into().expect("4 bytes"));
            let magic = u32::from_be_bytes(head[4..8].try_into().expect("4 bytes"));
            match magic {
                FENCE_MAGIC_CODE if records > 0 => return Ok(()),
                MESSAGE_MAGIC_CODE | MESSAGE_MAGIC_CODE_V2
                    if total >= 8 && u64::from(total) <= readable - rel =>
                {
                    records += 1;
                    rel += u64::from(total);
                }
                _ => break,
            }
        }
        if records == 0 {
            return Ok(());
        }
        // A damaged first group hides its own fence; a later group's still marks the log ours.
        let magic = FENCE_MAGIC_CODE.to_be_bytes();
        let finder = memchr::memmem::Finder::new(&magic);
        let mut at = 0;
        while let Some(start) = file.next_data_from(at) {
            let end = file.data_end_from(start);
            if search_region(&finder, &file, start, end, file.file_from_offset()).is_some() {
                return Ok(());
            }
            at = end;
        }
        Err(StoreError::Config(format!(
            "{} opens with {records} message records that no pyrmq group fence seals, as Apache \
             RocketMQ writes its CommitLog; pyrmq does not read that format and would truncate \
             it as a torn tail: open another directory",
            file.path().display()
        )))
    }

    /// Validates the log from `validate_from` (a group boundary at or before `start`, or a
    /// record inside the group that starts there) to its end, calls `on_record` with its
    /// group's start, its offset and its bytes for every record at or after `start` in every
    /// intact group, then truncates the torn tail. A damaged group followed by intact ones is
    /// kept in place with `keep_corrupt`, and is where the log is cut without it (a slave's,
    /// whose master sends the rest again). Runs before any reader or writer exists.
    pub fn recover(
        &self,
        validate_from: u64,
        start: u64,
        check_body_crc: bool,
        keep_corrupt: bool,
        mut on_record: impl FnMut(u64, u64, &[u8]) -> StoreResult<()>,
    ) -> StoreResult<RecoveryReport> {
        let size = self.segment_size();
        let mut report = RecoveryReport::default();
        let Some(first) = self.files.min_offset() else {
            self.set_end(0);
            return Ok(report);
        };
        let dispatch_from = start.max(first);
        let mut pos = validate_from.clamp(first, dispatch_from);
        if self.files.find(pos).is_none() {
            // The checkpoint points past the last segment: start from the last one.
            pos = self.files.last().map_or(first, |f| f.file_from_offset());
        }
        let mut group_start = pos;
        let scan_start = pos;
        let mut pending: Vec<(u64, u32)> = Vec::new();
        // The data region the scan is in, (segment start, region end): asked for once per
        // region, not per record (an lseek each).
        let mut region = (u64::MAX, 0u64);
        loop {
            let Some(file) = self.files.find(pos) else {
                break;
            };
            let rel = pos - file.file_from_offset();
            if rel + 8 > size {
                pos = file.file_from_offset() + size;
                group_start = pos;
                continue;
            }
            // Bytes past the data region were never written: read them as the end of the log.
            if region.0 != file.file_from_offset() || rel >= region.1 {
                region = (file.file_from_offset(), file.data_end_from(rel));
            }
            let readable = region.1;
            if rel + 8 > readable {
                if pending.is_empty() {
                    break;
                }
                match self.find_next_group(group_start).filter(|_| keep_corrupt) {
                    Some(next) => {
                        report.corrupt_ranges.push((group_start, next));
                        pending.clear();
                        pos = next;
                        group_start = next;
                        continue;
                    }
                    None => break,
                }
            }
            let head = file.slice(rel, 8);
            let total = u32::from_be_bytes(head[..4].try_into().expect("4 bytes"));
            let magic = u32::from_be_bytes(head[4..8].try_into().expect("4 bytes"));
            let intact = match magic {
                MESSAGE_MAGIC_CODE if u64::from(total) <= readable - rel => {
                    let raw = file.slice(rel, total as usize);
                    match message::decode(raw, check_body_crc) {
                        Ok(rec) if rec.phy_offset == pos as i64 => {
                            pending.push((pos, total));
                            pos += u64::from(total);
                            true
                        }
                        _ => false,
                    }
                }
                FENCE_MAGIC_CODE
                    if total as usize == FENCE_LEN
                        && rel + 20 <= readable
                        && (fence_verifies(&file, rel, group_start)
                            // A checkpoint from an older build may name a record inside its
                            // group: that first group's fence names where it really starts.
                            || (group_start == scan_start
                                && earlier_group_verifies(&file, rel, group_start))) =>
                {
                    let mut dispatched = 0u64;
                    // A group never spans segments: its records are in this one.
                    let base = file.file_from_offset();
                    for &(phy, len) in &pending {
                        report.max_store_timestamp_ms = report
                            .max_store_timestamp_ms
                            .max(store_timestamp(file.slice(phy - base, 88)));
                        if phy >= dispatch_from {
                            on_record(group_start, phy, file.slice(phy - base, len as usize))?;
                            dispatched += 1;
                        }
                    }
                    report.records += dispatched;
                    report.groups += u64::from(dispatched > 0);
                    pending.clear();
                    pos += FENCE_LEN as u64;
                    group_start = pos;
                    true
                }
                BLANK_MAGIC_CODE if u64::from(total) == size - rel && pending.is_empty() => {
                    let next = file.file_from_offset() + size;
                    if self.files.find(next).is_none() {
                        // A blank with no next segment: the roll was cut short.
                        break;
                    }
                    pos = next;
                    group_start = pos;
                    true
                }
                0 if total == 0 && pending.is_empty() => break,
                _ => false,
            };
            if intact {
                continue;
            }
            // The group starting at `group_start` is damaged. Intact data after it means
            // corruption in place, kept for reads to report; nothing intact means a torn tail.
            // A slave cuts its log there instead: its master sends the rest again.
            if !keep_corrupt {
                if self.find_next_group(group_start).is_some() {
                    log::error!(
                        "commit log corrupt at offset {group_start}; cut there, for the master \
                         to send again what follows"
                    );
                }
                break;
            }
            match self.find_next_group(group_start) {
                Some(next) => {
                    log::error!(
                        "commit log corrupt between offsets {group_start} and {next}; kept, \
                         reads of records there report corruption"
                    );
                    report.corrupt_ranges.push((group_start, next));
                    pending.clear();
                    pos = next;
                    group_start = next;
                }
                None => break,
            }
        }
        let end = group_start;
        report.truncated_bytes = self.truncate_to(end)?;
        report.end_offset = end;
        self.set_end(end);
        Ok(report)
    }

    /// The start of the next intact group after `from`: a fence whose CRC covers the bytes
    /// from its GROUPSTART, which must lie after `from`.
    fn find_next_group(&self, from: u64) -> Option<u64> {
        let magic = FENCE_MAGIC_CODE.to_be_bytes();
        let finder = memchr::memmem::Finder::new(&magic);
        for file in self.files.snapshot() {
            let base = file.file_from_offset();
            if base + file.file_size() <= from {
                continue;
            }
            let mut region_start = if from >= base { from - base + 1 } else { 0 };
            // Search the data regions only: holes were never written (see data_end_from).
            while let Some(start) = file.next_data_from(region_start) {
                let end = file.data_end_from(start);
                if let Some(g) = search_region(&finder, &file, start, end, from) {
                    return Some(g);
                }
                region_start = end;
            }
        }
        None
    }

    /// Zeroes the written bytes at and after `end` and removes later segments. Returns the
    /// number of non-zero bytes discarded.
    fn truncate_to(&self, end: u64) -> StoreResult<u64> {
        self.large_groups.lock().clear();
        let size = self.segment_size();
        let mut discarded = 0u64;
        if let Some(file) = self.files.find(end) {
            discarded += file.zero_from(end - file.file_from_offset())?;
        }
        let next = end - end % size + size;
        for f in self.files.snapshot() {
            if f.file_from_offset() >= next {
                let mut at = 0;
                while let Some(start) = f.next_data_from(at) {
                    let end = f.data_end_from(start);
                    let data = f.slice(start, (end - start) as usize);
                    discarded += data.iter().filter(|b| **b != 0).count() as u64;
                    at = end;
                }
            }
        }
        self.files.delete_from(next)?;
        if discarded > 0 {
            log::warn!(
                "commit log truncated at offset {end}: {discarded} bytes of torn tail removed"
            );
        }
        Ok(discarded)
    }

    fn set_end(&self, end: u64) {
        let mut st = self.put_lock.lock();
        st.wrote = end;
        self.max_offset.store(end, Ordering::Release);
        self.flushed.store(end, Ordering::Release);
    }

    pub fn restore_last_store_timestamp(&self, ts: i64) {
        let mut st = self.put_lock.lock();
        st.last_store_timestamp_ms = st.last_store_timestamp_ms.max(ts);
    }

    /// Removes the oldest segment if it starts at `start` (the one the caller judged) and does
    /// not hold the write position (nor was prepared after it); returns its end offset.
    pub fn delete_oldest_segment(&self, start: u64) -> StoreResult<Option<u64>> {
        let written = self.max_offset();
        if self.files.first().is_none_or(|f| {
            f.file_from_offset() != start || f.file_from_offset() + f.file_size() > written
        }) {
            return Ok(None);
        }
        Ok(self
            .files
            .delete_first()?
            .map(|f| f.file_from_offset() + f.file_size()))
    }
}

/// Checks bytes a master sent for CommitLog offset `from` in segments of `segment_size`:
/// whole groups, each record's offset field its own offset and each fence verifying, none
/// crossing the segment's end; or a closing blank filling the segment. Returns the start and
/// length of each record and the start of its group, relative to `data`.
pub fn check_replica(
    from: u64,
    data: &[u8],
    segment_size: u64,
) -> Result<Vec<(usize, usize, usize)>, String> {
    let rel = from % segment_size;
    if data.len() == 8 {
        let total = u64::from(u32::from_be_bytes(data[..4].try_into().expect("4 bytes")));
        let magic = u32::from_be_bytes(data[4..8].try_into().expect("4 bytes"));
        if magic == BLANK_MAGIC_CODE {
            return if total == segment_size - rel {
                Ok(Vec::new())
            } else {
                Err(format!(
                    "a closing blank of {total} bytes where {} remain: the master's segments \
                     are not {segment_size} bytes (mappedFileSizeCommitLog must be the same)",
                    segment_size - rel
                ))
            };
        }
    }
    if rel + data.len() as u64 + END_FILE_MIN_BLANK_LENGTH > segment_size {
        return Err(format!("{} bytes run past the segment's end", data.len()));
    }
    let mut records = Vec::new();
    let (mut pos, mut group) = (0usize, 0usize);
    while pos < data.len() {
        if pos + 8 > data.len() {
            return Err(format!(
                "{} bytes after offset {} are no record",
                data.len() - pos,
                from + pos as u64
            ));
        }
        let total = u32::from_be_bytes(data[pos..pos + 4].try_into().expect("4 bytes")) as usize;
        let magic = u32::from_be_bytes(data[pos + 4..pos + 8].try_into().expect("4 bytes"));
        let at = from + pos as u64;
        if total < 8 || pos + total > data.len() {
            return Err(format!("the record at {at} claims {total} bytes"));
        }
        match magic {
            MESSAGE_MAGIC_CODE => {
                let rec = message::decode(&data[pos..pos + total], false)
                    .map_err(|e| format!("the record at {at} does not decode: {e}"))?;
                if rec.phy_offset != at as i64 {
                    return Err(format!(
                        "the record at {at} names offset {}",
                        rec.phy_offset
                    ));
                }
                records.push((pos, total, group));
            }
            FENCE_MAGIC_CODE if total == FENCE_LEN && pos > group => {
                if fence(from + group as u64, &data[group..pos]) != data[pos..pos + FENCE_LEN] {
                    return Err(format!("the fence at {at} does not seal its group"));
                }
                group = pos + FENCE_LEN;
            }
            _ => return Err(format!("no record or fence at {at} (magic {magic:#010x})")),
        }
        pos += total;
    }
    if group != data.len() || data.is_empty() {
        return Err("the bytes do not end with a fence".to_owned());
    }
    Ok(records)
}

/// The fence that seals `records`, a group starting at CommitLog offset `group_start`.
fn fence(group_start: u64, records: &[u8]) -> [u8; FENCE_LEN] {
    let mut fence = [0u8; FENCE_LEN];
    fence[..4].copy_from_slice(&(FENCE_LEN as u32).to_be_bytes());
    fence[4..8].copy_from_slice(&FENCE_MAGIC_CODE.to_be_bytes());
    fence[8..16].copy_from_slice(&group_start.to_be_bytes());
    fence[16..20].copy_from_slice(&crc32fast::hash(records).to_be_bytes());
    fence
}

/// The end (relative to `file`) of the intact groups from `rel`, stopping once `max_bytes`
/// are covered or at anything else; `None` when the first group is not intact. A fence alone
/// at `rel` counts: it is what a slave that resumes there compares with its own.
fn intact_run(file: &MappedFile, rel: u64, limit: u64, max_bytes: usize) -> Option<u64> {
    let base = file.file_from_offset();
    let (mut pos, mut group) = (rel, rel);
    let mut boundary = None;
    while pos + 8 <= limit {
        let head = file.slice(pos, 8);
        let total = u64::from(u32::from_be_bytes(head[..4].try_into().expect("4 bytes")));
        let magic = u32::from_be_bytes(head[4..8].try_into().expect("4 bytes"));
        match magic {
            MESSAGE_MAGIC_CODE if total >= 8 && pos + total <= limit => pos += total,
            FENCE_MAGIC_CODE
                if total == FENCE_LEN as u64
                    && pos + total <= limit
                    && (pos == rel || fence_verifies(file, pos, base + group)) =>
            {
                pos += total;
                boundary = Some(pos);
                group = pos;
                if pos - rel >= max_bytes as u64 {
                    break;
                }
            }
            _ => break,
        }
    }
    boundary
}

/// The position of the blank record that closes `file`'s segment of `size` bytes, searched
/// after `rel` in the data it holds.
fn closing_blank(file: &MappedFile, rel: u64, size: u64) -> Option<u64> {
    let magic = BLANK_MAGIC_CODE.to_be_bytes();
    let finder = memchr::memmem::Finder::new(&magic);
    let mut at = rel + 1;
    while let Some(start) = file.next_data_from(at) {
        let end = file.data_end_from(start).min(size);
        if end <= start {
            break;
        }
        for hit in finder.find_iter(file.slice(start, (end - start) as usize)) {
            let magic_rel = start + hit as u64;
            if magic_rel <= rel + 4 {
                continue;
            }
            let p = magic_rel - 4;
            let total = u64::from(u32::from_be_bytes(
                file.slice(p, 4).try_into().expect("4 bytes"),
            ));
            if total >= END_FILE_MIN_BLANK_LENGTH && total == size - p {
                return Some(p);
            }
        }
        at = end;
    }
    None
}

/// Looks for a verifying fence in `start..end` of `file` whose group starts after `from`.
fn search_region(
    finder: &memchr::memmem::Finder<'_>,
    file: &MappedFile,
    start: u64,
    end: u64,
    from: u64,
) -> Option<u64> {
    let base = file.file_from_offset();
    let hay = file.slice(start, (end - start) as usize);
    for hit in finder.find_iter(hay) {
        let magic_rel = start + hit as u64;
        if magic_rel < 4 || magic_rel + 16 > end {
            continue;
        }
        let rel = magic_rel - 4;
        let head = file.slice(rel, FENCE_LEN);
        if u32::from_be_bytes(head[..4].try_into().expect("4 bytes")) != 20 {
            continue;
        }
        let g = u64::from_be_bytes(head[8..16].try_into().expect("8 bytes"));
        if g <= from || g < base || g > base + rel {
            continue;
        }
        if fence_verifies(file, rel, g) {
            return Some(g);
        }
    }
    None
}

/// Whether the fence at `fence_rel` seals a group that starts before `from`, in this file.
fn earlier_group_verifies(file: &MappedFile, fence_rel: u64, from: u64) -> bool {
    let fence = file.slice(fence_rel, FENCE_LEN);
    fence.len() == FENCE_LEN && {
        let stored_start = u64::from_be_bytes(fence[8..16].try_into().expect("8 bytes"));
        stored_start < from && fence_verifies(file, fence_rel, stored_start)
    }
}

fn fence_verifies(file: &MappedFile, fence_rel: u64, group_start: u64) -> bool {
    let base = file.file_from_offset();
    if group_start < base || group_start - base > fence_rel {
        return false;
    }
    let fence = file.slice(fence_rel, FENCE_LEN);
    if fence.len() < FENCE_LEN {
        return false;
    }
    let stored_start = u64::from_be_bytes(fence[8..16].try_into().expect("8 bytes"));
    let stored_crc = u32::from_be_bytes(fence[16..20].try_into().expect("4 bytes"));
    let group_rel = group_start - base;
    stored_start == group_start
        && fence_rel > group_rel
        && crc32fast::hash(file.slice(group_rel, (fence_rel - group_rel) as usize)) == stored_crc
}

fn store_timestamp(head: &[u8]) -> i64 {
    if head.len() < 88 {
        return 0;
    }
    let sys_flag = i32::from_be_bytes(head[36..40].try_into().expect("4 bytes"));
    let at = if sys_flag & message::SYSFLAG_BORNHOST_V6 != 0 {
        68
    } else {
        56
    };
    i64::from_be_bytes(head[at..at + 8].try_into().expect("8 bytes"))
}

/// Store timestamp of a record whose first bytes are `head` (at least 88 bytes).
pub fn record_store_timestamp(head: &[u8]) -> i64 {
    store_timestamp(head)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapped_file::Allocation;

    #[test]
    fn large_rounds_switch_written_segments_from_zeroing_to_populating() {
        let dir = tempfile::tempdir().unwrap();
        let files = MappedFileQueue::load(dir.path(), 1 << 20, Allocation::Written).unwrap();
        let log = CommitLog::load(files).unwrap();
        assert!(!log.populator().large_rounds());
        for _ in 0..8 {
            log.note_round(2 * 1024);
        }
        assert!(!log.populator().large_rounds());
        for _ in 0..8 {
            log.note_round(64 * 1024);
        }
        assert!(log.populator().large_rounds());
        for _ in 0..32 {
            log.note_round(1024);
        }
        assert!(!log.populator().large_rounds());
    }

    fn blank(len: u32) -> Vec<u8> {
        let mut b = len.to_be_bytes().to_vec();
        b.extend_from_slice(&BLANK_MAGIC_CODE.to_be_bytes());
        b
    }

    #[test]
    fn a_replica_blank_must_fill_its_segment_and_a_group_must_end_with_its_fence() {
        let size = 4096u64;
        assert_eq!(check_replica(1000, &blank(3096), size), Ok(Vec::new()));
        assert!(check_replica(1000, &blank(3000), size).is_err());
        // Twenty bytes of a fence with nothing before it seal no group.
        let lone = fence(0, &[]);
        assert!(check_replica(0, &lone, size).is_err());
        assert!(check_replica(0, &[], size).is_err());
        // Past the segment's end (8 bytes stay for its blank).
        assert!(check_replica(size - 16, &[0u8; 16], size).is_err());
    }
}
