//! ConsumeQueue: the per-(topic, queue id) index of CommitLog records, in 20-byte units.
//!
//! Files live at `consumequeue/<topic>/<queueId>/<20-digit byte offset>`, each
//! `mapped_file_size_consume_queue` bytes (300,000 units by default). Unit `n` (the queue
//! offset) sits at byte `20 * n` of the queue. Big-endian:
//!
//! | off | size | field      | invariant                                                 |
//! |-----|------|------------|-----------------------------------------------------------|
//! |   0 |    8 | phy_offset | CommitLog offset of the record, >= 0                      |
//! |   8 |    4 | size       | record TOTALSIZE, > 0; 0 marks a unit never written      |
//! |  12 |    8 | tags_code  | Java hash of TAGS; due time (ms) in SCHEDULE_TOPIC_XXXX   |
//!
//! Files are sparse: space is reserved a chunk at a time ahead of the writer, before the
//! CommitLog append that needs it, so a quiet queue costs a chunk of disk and not a whole file,
//! and a full disk refuses the put instead of faulting the write.
//!
//! Units are written before the queue's max offset is published (Release), and readers load
//! it (Acquire) first, so a reader never sees a unit whose record is not written.
//! After a crash, units whose record lies past the recovered CommitLog end are zeroed and the
//! missing units are rewritten from the CommitLog (each record carries its queue offset, so a
//! rewrite is idempotent).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{StoreError, StoreResult};
use crate::mapped_file::{Allocation, MappedFile};
use crate::mapped_file_queue::MappedFileQueue;
use crate::populate::Populator;

pub const CQ_UNIT_SIZE: u64 = 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqUnit {
    pub queue_offset: u64,
    pub phy_offset: u64,
    pub size: u32,
    pub tags_code: i64,
}

pub struct ConsumeQueue {
    topic: String,
    queue_id: i32,
    files: MappedFileQueue,
    units_per_file: u64,
    /// Next free queue offset; every unit below it is written.
    max_offset: AtomicU64,
    /// First queue offset whose record still exists.
    min_offset: AtomicU64,
    /// Queue offset up to which units are durable.
    flushed: AtomicU64,
    /// Byte offset of the file created ahead of the writer (see [`Populator`]); only the
    /// put-lock holder touches it.
    next_prepared: AtomicU64,
    /// Set at load when a file was missing between others: the CommitLog offset from which
    /// recovery dispatches again to write the units after the gap.
    rebuild_from: Option<u64>,
    /// The files after that gap, not opened, until [`Self::remove_past_gap`].
    past_gap: parking_lot::Mutex<Vec<std::path::PathBuf>>,
}

impl ConsumeQueue {
    /// Opens the queue in `dir` and finds its max offset: past the last written unit of the
    /// last file holding any.
    pub fn load(dir: &Path, topic: &str, queue_id: i32, file_size: u64) -> StoreResult<Self> {
        let (files, gap_at) = MappedFileQueue::load_derived(dir, file_size, Allocation::OnDemand)?;
        let units_per_file = file_size / CQ_UNIT_SIZE;
        // A file after that one was created ahead of its writer (or just before a crash) and is
        // empty. The last written unit, not the first unwritten one, ends the queue: a queue
        // rebuilt after retention starts in the middle of its first file, with nothing before.
        let (min, max) = match files.first() {
            Some(first) => {
                let min = first.file_from_offset() / CQ_UNIT_SIZE;
                let max = files
                    .snapshot()
                    .iter()
                    .rev()
                    .find_map(|file| {
                        let last = last_written_unit(file)?;
                        Some(file.file_from_offset() / CQ_UNIT_SIZE + last + 1)
                    })
                    .unwrap_or(min);
                (min, max)
            }
            None => (0, 0),
        };
        let mut queue = Self {
            topic: topic.to_owned(),
            queue_id,
            files,
            units_per_file,
            max_offset: AtomicU64::new(max),
            min_offset: AtomicU64::new(min.min(max)),
            flushed: AtomicU64::new(max),
            next_prepared: AtomicU64::new(0),
            rebuild_from: None,
            past_gap: parking_lot::Mutex::new(Vec::new()),
        };
        if let Some(gap) = gap_at {
            // The records of the lost units follow the last one kept.
            queue.rebuild_from = Some(queue.last_record_end().unwrap_or(0));
            log::warn!(
                "ConsumeQueue {topic}:{queue_id} has no file at byte {} (after queue offset \
                 {max}): its units from there on are written again from the CommitLog",
                gap.at
            );
            *queue.past_gap.get_mut() = gap.after;
        }
        Ok(queue)
    }

    /// Where recovery must dispatch from for this queue to be whole, when a file of it was
    /// missing at load.
    pub fn rebuild_from(&self) -> Option<u64> {
        self.rebuild_from
    }

    /// Removes the files found after a missing one, which recovery writes again. Call it once
    /// the checkpoint makes the next open dispatch from [`Self::rebuild_from`] too, so that a
    /// crash before the units are written again loses none of them.
    pub fn remove_past_gap(&self) -> StoreResult<()> {
        let mut files = self.past_gap.lock();
        while let Some(path) = files.pop() {
            log::warn!(
                "removing {}: it is written again from the CommitLog",
                path.display()
            );
            std::fs::remove_file(&path).map_err(|e| StoreError::io("removing", &path, e))?;
        }
        Ok(())
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn queue_id(&self) -> i32 {
        self.queue_id
    }

    pub fn max_offset(&self) -> u64 {
        self.max_offset.load(Ordering::Acquire)
    }

    pub fn min_offset(&self) -> u64 {
        self.min_offset.load(Ordering::Acquire)
    }

    /// Creates the files needed to hold units `start..end` and reserves their space, so that
    /// writing them cannot fail once the records are appended. Nothing is written.
    pub fn ensure_capacity(&self, start: u64, end: u64) -> StoreResult<()> {
        if end <= start {
            return Ok(());
        }
        // The first unit's file first: a queue without files starts with the file holding
        // it, and the files up to the last unit's follow it.
        let (mut byte, to) = (start * CQ_UNIT_SIZE, end * CQ_UNIT_SIZE);
        while byte < to {
            let file = self.files.get_or_create(byte)?;
            let base = file.file_from_offset();
            let file_end = base + file.file_size();
            file.ensure_writable(byte - base, to.min(file_end) - base)?;
            byte = file_end;
        }
        Ok(())
    }

    /// Writes unit `queue_offset`. Only the put-lock holder (or recovery) calls this.
    pub fn write_unit(
        &self,
        queue_offset: u64,
        phy: u64,
        size: u32,
        tags_code: i64,
    ) -> StoreResult<()> {
        self.write_units(queue_offset, &[(phy, size, tags_code)], None)
    }

    /// Writes `(phy, size, tags_code)` units at consecutive offsets from `first`, looking up
    /// each file once, and asks `populator` for the pages past them. Only the put-lock holder
    /// (or recovery) calls this.
    pub fn write_units(
        &self,
        first: u64,
        units: &[(u64, u32, i64)],
        populator: Option<&Populator>,
    ) -> StoreResult<()> {
        let mut done = 0;
        while done < units.len() {
            let byte = (first + done as u64) * CQ_UNIT_SIZE;
            let file = self.files.get_or_create(byte)?;
            let rel = byte - file.file_from_offset();
            let fit = ((file.file_size() - rel) / CQ_UNIT_SIZE) as usize;
            let run = &units[done..units.len().min(done + fit)];
            // Puts reserved this space before their append; recovery's rebuilds reserve it here.
            file.ensure_writable(rel, rel + run.len() as u64 * CQ_UNIT_SIZE)?;
            // SAFETY: single writer under the put lock; units are unpublished until `publish`,
            // and the run ends inside this file.
            let out = unsafe { file.slice_mut(rel, run.len() * CQ_UNIT_SIZE as usize) };
            for (unit, &(phy, size, tags_code)) in
                out.chunks_exact_mut(CQ_UNIT_SIZE as usize).zip(run)
            {
                unit[..8].copy_from_slice(&phy.to_be_bytes());
                unit[8..12].copy_from_slice(&size.to_be_bytes());
                unit[12..].copy_from_slice(&tags_code.to_be_bytes());
            }
            done += run.len();
            if let Some(p) = populator {
                let end = rel + (run.len() as u64) * CQ_UNIT_SIZE;
                let lane = std::ptr::from_ref(self) as usize;
                p.after_queue_write(lane, &file, end);
                let next = file.file_from_offset() + file.file_size();
                if Populator::wants_next_queue_file(end, file.file_size())
                    && self.next_prepared.load(Ordering::Relaxed) != next
                {
                    if let Some(f) = self.files.create_ahead(next) {
                        p.next_queue_file(lane, &f);
                    }
                    self.next_prepared.store(next, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }

    /// Makes units below `end` visible to readers.
    /// Moves the min offset up to `min` (a queue whose first unit is there).
    pub fn raise_min_offset(&self, min: u64) {
        self.min_offset.fetch_max(min, Ordering::AcqRel);
    }

    pub fn publish(&self, end: u64) {
        self.max_offset.fetch_max(end, Ordering::AcqRel);
    }

    /// The unit at `queue_offset`, if it is published and its file still exists.
    pub fn unit(&self, queue_offset: u64) -> Option<CqUnit> {
        if queue_offset >= self.max_offset() {
            return None;
        }
        let byte = queue_offset * CQ_UNIT_SIZE;
        let file = self.files.find(byte)?;
        let raw = file.slice(byte - file.file_from_offset(), CQ_UNIT_SIZE as usize);
        let unit = decode_unit(queue_offset, raw);
        (unit.size > 0).then_some(unit)
    }

    /// CommitLog offset just past the record of the queue's last unit, if it has one.
    pub fn last_record_end(&self) -> Option<u64> {
        let max = self.max_offset();
        if max == 0 {
            return None;
        }
        self.unit(max - 1).map(|u| u.phy_offset + u64::from(u.size))
    }

    /// Scans up to `max_units` units from `start`, appending those that pass `filter` (tag codes;
    /// `None` keeps all) to `out`, stopping early once `max_matches` units matched. Returns the
    /// queue offset after the last unit examined.
    pub fn scan(
        &self,
        start: u64,
        max_units: u64,
        filter: Option<&[i64]>,
        max_matches: usize,
        out: &mut Vec<CqUnit>,
    ) -> u64 {
        let end = self.max_offset().min(start.saturating_add(max_units));
        let mut offset = start.max(self.min_offset());
        let file_bytes = self.units_per_file * CQ_UNIT_SIZE;
        while offset < end && out.len() < max_matches {
            let byte = offset * CQ_UNIT_SIZE;
            let Some(file) = self.files.find(byte) else {
                return offset;
            };
            let rel = byte - file.file_from_offset();
            let units_here = ((file_bytes - rel) / CQ_UNIT_SIZE).min(end - offset);
            let data = file.slice(rel, (units_here * CQ_UNIT_SIZE) as usize);
            let mut examined = 0u64;
            for raw in data.chunks_exact(CQ_UNIT_SIZE as usize) {
                examined += 1;
                let tags = i64::from_be_bytes(raw[12..20].try_into().expect("8 bytes"));
                let keep = filter.is_none_or(|codes| codes.contains(&tags));
                // A zeroed unit below the end is damage, not a gap: it is handed on for the
                // reader to report.
                if keep {
                    out.push(decode_unit(offset + examined - 1, raw));
                    if out.len() >= max_matches {
                        break;
                    }
                }
            }
            offset += examined;
        }
        offset
    }

    /// Counts units in `start..start + max_units` whose tag code passes `filter`: the scan loop
    /// alone, for benchmarks and checks.
    pub fn count_matching(&self, start: u64, max_units: u64, filter: Option<&[i64]>) -> (u64, u64) {
        let end = self.max_offset().min(start.saturating_add(max_units));
        let mut offset = start.max(self.min_offset());
        let mut matched = 0u64;
        let file_bytes = self.units_per_file * CQ_UNIT_SIZE;
        while offset < end {
            let byte = offset * CQ_UNIT_SIZE;
            let Some(file) = self.files.find(byte) else {
                break;
            };
            let rel = byte - file.file_from_offset();
            let units_here = ((file_bytes - rel) / CQ_UNIT_SIZE).min(end - offset);
            let data = file.slice(rel, (units_here * CQ_UNIT_SIZE) as usize);
            matched += match filter {
                None => data.chunks_exact(20).filter(|u| unit_size(u) > 0).count() as u64,
                Some(codes) => data
                    .chunks_exact(20)
                    .filter(|u| {
                        codes.contains(&i64::from_be_bytes(u[12..20].try_into().expect("8")))
                    })
                    .count() as u64,
            };
            offset += units_here;
        }
        (matched, offset)
    }

    /// Flushes units written since the last flush; returns the flushed queue offset.
    pub fn flush(&self) -> StoreResult<u64> {
        let max = self.max_offset();
        let from = self.flushed.load(Ordering::Acquire);
        if max > from {
            self.files.flush(from * CQ_UNIT_SIZE, max * CQ_UNIT_SIZE)?;
            self.flushed.fetch_max(max, Ordering::AcqRel);
        }
        Ok(max)
    }

    /// Recovery: zeroes units whose record ends past `commit_log_end` and lowers the max offset
    /// to the first of them.
    pub fn truncate_beyond(&self, commit_log_end: u64) -> StoreResult<()> {
        let mut max = self.max_offset();
        let min_file = self.files.min_offset().unwrap_or(0) / CQ_UNIT_SIZE;
        while max > min_file {
            let q = max - 1;
            let byte = q * CQ_UNIT_SIZE;
            let Some(file) = self.files.find(byte) else {
                break;
            };
            let raw = file.slice(byte - file.file_from_offset(), CQ_UNIT_SIZE as usize);
            let unit = decode_unit(q, raw);
            if unit.size > 0 && unit.phy_offset + u64::from(unit.size) <= commit_log_end {
                break;
            }
            // SAFETY: recovery runs before any reader or writer starts.
            unsafe {
                file.write_at(
                    byte - file.file_from_offset(),
                    &[0u8; CQ_UNIT_SIZE as usize],
                );
            };
            max = q;
        }
        if max < self.max_offset() {
            log::warn!(
                "consume queue topic={} queue_id={} truncated to offset {max}",
                self.topic,
                self.queue_id
            );
            self.max_offset.store(max, Ordering::Release);
            self.files
                .flush(max * CQ_UNIT_SIZE, (max + 1) * CQ_UNIT_SIZE)?;
            // Files wholly past the new end hold nothing.
            let fs = self.files.file_size();
            self.files.delete_from((max * CQ_UNIT_SIZE / fs + 1) * fs)?;
        }
        self.flushed.store(self.max_offset(), Ordering::Release);
        Ok(())
    }

    /// Sets the min offset to the first unit whose record starts at or after `commit_log_min`,
    /// then deletes files that hold only units below it (the last file stays). The min moves
    /// first, so a reader is sent past the old units before their file disappears.
    pub fn correct_min_offset(&self, commit_log_min: u64) -> StoreResult<()> {
        let max = self.max_offset();
        let first_file = self.files.min_offset().map_or(max, |b| b / CQ_UNIT_SIZE);
        let mut min = self.min_offset().max(first_file);
        // Skip whole files whose last unit is still below the CommitLog minimum.
        for file in self.files.snapshot() {
            let start = file.file_from_offset() / CQ_UNIT_SIZE;
            let end = start + self.units_per_file;
            if end <= min {
                continue;
            }
            let last = last_written_unit(&file)
                .map(|i| decode_unit(0, file.slice(i * CQ_UNIT_SIZE, CQ_UNIT_SIZE as usize)));
            match last {
                Some(u) if u.phy_offset < commit_log_min && end < max => min = end,
                _ => break,
            }
        }
        while min < max {
            match self.unit(min) {
                Some(u) if u.phy_offset >= commit_log_min => break,
                _ => min += 1,
            }
        }
        self.min_offset.fetch_max(min, Ordering::AcqRel);
        let min = self.min_offset();
        while self.files.len() > 1 {
            let Some(first) = self.files.first() else {
                break;
            };
            let end = first.file_from_offset() / CQ_UNIT_SIZE + self.units_per_file;
            if end > min {
                break;
            }
            self.files.delete_first()?;
        }
        Ok(())
    }
}

/// Index in `file` of its last written unit. Only the file's data regions are read: a hole
/// read through the mapping would take memory (and on tmpfs, space) for nothing.
fn last_written_unit(file: &MappedFile) -> Option<u64> {
    file.data_regions().iter().rev().find_map(|&(start, end)| {
        // A unit cut by a region's edge lies partly in a hole: it was never written.
        let first = start.div_ceil(CQ_UNIT_SIZE);
        let last = end / CQ_UNIT_SIZE;
        let units = last.saturating_sub(first);
        let bytes = file.slice(first * CQ_UNIT_SIZE, (units * CQ_UNIT_SIZE) as usize);
        let i = bytes
            .chunks_exact(CQ_UNIT_SIZE as usize)
            .rposition(|u| unit_size(u) != 0)?;
        Some(first + i as u64)
    })
}

fn unit_size(raw: &[u8]) -> u32 {
    u32::from_be_bytes(raw[8..12].try_into().expect("4 bytes"))
}

fn decode_unit(queue_offset: u64, raw: &[u8]) -> CqUnit {
    CqUnit {
        queue_offset,
        phy_offset: u64::from_be_bytes(raw[..8].try_into().expect("8 bytes")),
        size: unit_size(raw),
        tags_code: i64::from_be_bytes(raw[12..20].try_into().expect("8 bytes")),
    }
}
