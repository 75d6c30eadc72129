//! The key index: finds messages by `KEYS` entry or `UNIQ_KEY` within a time range.
//!
//! Files `index/<20-digit creation ms>`, each a hash table with chained entries, big-endian:
//!
//! | off               | size | field                                                  |
//! |-------------------|------|--------------------------------------------------------|
//! | 0                 |    8 | begin_timestamp_ms (store time of the first entry)     |
//! | 8                 |    8 | end_timestamp_ms   (store time of the last entry)      |
//! | 16                |    8 | begin_phy_offset                                       |
//! | 24                |    8 | end_phy_offset     (record of the last entry)          |
//! | 32                |    4 | hash_slot_count    (slots holding a chain)             |
//! | 36                |    4 | index_count        (next entry number; starts at 1)    |
//! | 40                | 4*S  | slots: newest entry number of the chain, 0 = empty     |
//! | 40 + 4*S          | 20*N | entries: key_hash i32, phy_offset i64,                 |
//! |                   |      |          time_diff_s i32 (from begin), prev entry i32  |
//!
//! The header and slots are written at random and have their blocks from the file's creation.
//! The entries, written in order, get theirs [`RESERVE_CHUNK`] at a time before the entry that
//! needs them, so that a file takes disk as it fills (files of older versions are wholly
//! allocated, which changes nothing here). A full disk fails the entry's `put` before any byte
//! of it is written, as it fails the creation of a file.
//!
//! [`RESERVE_CHUNK`]: crate::mapped_file::RESERVE_CHUNK
//!
//! Keys are `topic#key`, hashed with Java's `String.hashCode` made non-negative. Entries do not
//! store keys, so a query checks each candidate record's topic and keys.
//! After a crash, records from the last indexed offset on are indexed again; a query drops the
//! duplicates this may leave. A file that does not fit the configured geometry (changed
//! settings, a shortened file) is dropped at load, and the records its header spans are indexed
//! again.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{StoreError, StoreResult};
use crate::mapped_file::{segment_name, Allocation, MappedFile};
use crate::message::java_string_hash;

const HEADER_LEN: u64 = 40;
const SLOT_LEN: u64 = 4;
const ENTRY_LEN: u64 = 20;

struct IndexFile {
    file: Arc<MappedFile>,
    slots: u64,
    entries: u64,
}

impl IndexFile {
    fn read_i64(&self, at: u64) -> i64 {
        i64::from_be_bytes(self.file.slice(at, 8).try_into().expect("8 bytes"))
    }
    fn read_i32(&self, at: u64) -> i32 {
        i32::from_be_bytes(self.file.slice(at, 4).try_into().expect("4 bytes"))
    }
    fn write(&self, at: u64, bytes: &[u8]) {
        // SAFETY: the index mutex serialises writers; readers take the same mutex.
        unsafe { self.file.write_at(at, bytes) };
    }
    fn begin_ts(&self) -> i64 {
        self.read_i64(0)
    }
    fn end_ts(&self) -> i64 {
        self.read_i64(8)
    }
    fn begin_phy(&self) -> i64 {
        self.read_i64(16)
    }
    fn end_phy(&self) -> i64 {
        self.read_i64(24)
    }
    /// The next entry number, within the file even if its header was damaged.
    fn count(&self) -> u64 {
        u64::try_from(self.read_i32(36))
            .unwrap_or(0)
            .clamp(1, self.entries)
    }
    /// Whether the header's entry count fits the file (a damaged header does not).
    fn count_fits(&self) -> bool {
        u64::try_from(self.read_i32(36)).is_ok_and(|n| n <= self.entries)
    }
    fn is_full(&self) -> bool {
        self.count() >= self.entries
    }

    fn entry_at(&self, n: u64) -> u64 {
        entries_start(self.slots) + n * ENTRY_LEN
    }

    fn put(&self, key: &str, phy: i64, store_ts: i64) -> StoreResult<()> {
        let count = self.count();
        let entry_at = self.entry_at(count);
        // Entries below this one were written, and the header and slots were reserved at
        // creation: only the entry's own bytes may lack blocks.
        self.file.ensure_writable(entry_at, entry_at + ENTRY_LEN)?;
        let hash = key_hash(key);
        let slot_at = HEADER_LEN + (u64::from(hash) % self.slots) * SLOT_LEN;
        let mut prev = self.read_i32(slot_at);
        if prev <= 0 || u64::from(prev.unsigned_abs()) >= count {
            prev = 0;
        }
        if count == 1 {
            self.write(0, &store_ts.to_be_bytes());
            self.write(16, &phy.to_be_bytes());
        }
        let diff_s = ((store_ts - self.begin_ts()).max(0) / 1000).min(i64::from(i32::MAX)) as i32;
        let mut entry = [0u8; ENTRY_LEN as usize];
        entry[..4].copy_from_slice(&hash.to_be_bytes());
        entry[4..12].copy_from_slice(&phy.to_be_bytes());
        entry[12..16].copy_from_slice(&diff_s.to_be_bytes());
        entry[16..20].copy_from_slice(&prev.to_be_bytes());
        self.write(entry_at, &entry);
        self.write(slot_at, &(count as i32).to_be_bytes());
        if prev == 0 {
            let slots_used = self.read_i32(32) + 1;
            self.write(32, &slots_used.to_be_bytes());
        }
        self.write(8, &store_ts.to_be_bytes());
        self.write(24, &phy.to_be_bytes());
        self.write(36, &((count + 1) as i32).to_be_bytes());
        Ok(())
    }

    fn query(&self, key: &str, begin_ms: i64, end_ms: i64, max: usize, out: &mut Vec<i64>) {
        let hash = key_hash(key);
        let slot_at = HEADER_LEN + (u64::from(hash) % self.slots) * SLOT_LEN;
        let count = self.count();
        let begin_ts = self.begin_ts();
        let mut cur = self.read_i32(slot_at);
        let mut steps = 0u64;
        while cur > 0 && u64::from(cur.unsigned_abs()) < count && out.len() < max && steps < count {
            steps += 1;
            let at = self.entry_at(u64::from(cur.unsigned_abs()));
            let entry_hash = self.read_i32(at);
            let phy = self.read_i64(at + 4);
            let ts = begin_ts + i64::from(self.read_i32(at + 12)) * 1000;
            let prev = self.read_i32(at + 16);
            // Entry times are truncated to seconds: widen the window by one second.
            if ts + 1000 < begin_ms {
                break;
            }
            if entry_hash as u32 == hash && ts <= end_ms {
                out.push(phy);
            }
            if prev >= cur {
                break;
            }
            cur = prev;
        }
    }
}

/// Offset of entry 0: past the header and the hash slots.
fn entries_start(slots: u64) -> u64 {
    HEADER_LEN + slots * SLOT_LEN
}

fn key_hash(key: &str) -> u32 {
    let h = java_string_hash(key);
    if h == i32::MIN {
        0
    } else {
        h.unsigned_abs()
    }
}

/// CommitLog offsets of the first and last records an index file indexed, if it holds any
/// entry. The header's layout does not depend on the file's geometry, so any index file's can
/// be read.
fn indexed_range(path: &Path) -> Option<(u64, u64)> {
    let mut head = [0u8; HEADER_LEN as usize];
    std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
        .ok()?;
    let count = u32::from_be_bytes(head[36..40].try_into().expect("4 bytes"));
    let phy = |at: usize| i64::from_be_bytes(head[at..at + 8].try_into().expect("8 bytes"));
    let (begin, end) = (u64::try_from(phy(16)).ok()?, u64::try_from(phy(24)).ok()?);
    (count > 1 && begin <= end).then_some((begin, end))
}

pub struct IndexService {
    dir: PathBuf,
    slots: u64,
    entries: u64,
    files: Mutex<Vec<IndexFile>>,
    /// CommitLog ranges of the records that index files dropped at load had indexed.
    dropped: Vec<(u64, u64)>,
    /// Those files, until [`Self::discard_dropped`] removes them.
    dropped_paths: Vec<PathBuf>,
    /// Files that filled up since the last flush, which still has to sync their tails.
    filled: Mutex<Vec<Arc<MappedFile>>>,
    /// Set while the records of dropped files wait to be indexed again: they go to a file of
    /// their own, begun at their store time. In the last file, begun later, their times would
    /// read as its beginning, and a query for their time range would pass them by.
    fresh_file: AtomicBool,
}

impl IndexService {
    pub fn load(dir: &Path, slots: u32, entries: u32) -> StoreResult<Self> {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::io("creating directory", dir, e))?;
        let (slots, entries) = (u64::from(slots), u64::from(entries));
        let size = entries_start(slots) + entries * ENTRY_LEN;
        let mut names: Vec<(u64, PathBuf)> = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| StoreError::io("listing", dir, e))? {
            let entry = entry.map_err(|e| StoreError::io("listing", dir, e))?;
            if let Some(n) = entry.file_name().to_str() {
                if n.len() == 20 && n.bytes().all(|b| b.is_ascii_digit()) {
                    // Twenty digits above u64::MAX name no index file of ours.
                    if let Ok(stamp) = n.parse() {
                        names.push((stamp, entry.path()));
                    }
                }
            }
        }
        names.sort_unstable();
        let mut files = Vec::new();
        let mut dropped = Vec::new();
        let mut dropped_paths = Vec::new();
        for (stamp, path) in names {
            let len = std::fs::metadata(&path).map_or(0, |m| m.len());
            let opened = if len == size {
                MappedFile::open(&path, stamp, size, Allocation::Reserve)
                    .and_then(|file| {
                        // Header and slots are written and read at random through the map:
                        // a copy that made their zero pages holes (rsync -S, cp --sparse)
                        // would fault there on a full disk. Costs nothing where they have
                        // their blocks; on a full disk the file is indexed again later.
                        file.ensure_writable(0, entries_start(slots))?;
                        Ok(file)
                    })
                    .map_err(|e| e.to_string())
                    .and_then(|file| {
                        let file = IndexFile {
                            file: Arc::new(file),
                            slots,
                            entries,
                        };
                        if file.count_fits() {
                            Ok(file)
                        } else {
                            Err(format!("its header counts more than its {entries} entries"))
                        }
                    })
            } else {
                Err(format!(
                    "{len} bytes where maxHashSlotNum {slots} and maxIndexNum {entries} make {size}"
                ))
            };
            match opened {
                Ok(file) => files.push(file),
                Err(e) => {
                    // An index file of another geometry (config changed) or cut short: the index
                    // is derived data, so drop it and index its records again.
                    log::warn!("dropping unreadable index file {}: {e}", path.display());
                    dropped_paths.push(path.clone());
                    // A header too short or damaged to say which records the file held: those
                    // from the last the file before it indexed to the first the file after it
                    // did (a record's keys may straddle two files).
                    dropped.push(indexed_range(&path).ok_or(files.len()));
                }
            }
        }
        let dropped: Vec<(u64, u64)> = dropped
            .into_iter()
            .map(|range| {
                range.unwrap_or_else(|before: usize| {
                    let from = before
                        .checked_sub(1)
                        .and_then(|i| u64::try_from(files[i].end_phy()).ok())
                        .unwrap_or(0);
                    let to = files
                        .get(before)
                        .and_then(|next| u64::try_from(next.begin_phy()).ok())
                        .unwrap_or(u64::MAX);
                    (from, to.max(from))
                })
            })
            .collect();
        for (from, to) in &dropped {
            log::warn!("records at commit-log offsets {from} to {to} are indexed again");
        }
        Ok(Self {
            dir: dir.to_owned(),
            slots,
            entries,
            files: Mutex::new(files),
            fresh_file: AtomicBool::new(!dropped.is_empty()),
            dropped,
            dropped_paths,
            filled: Mutex::new(Vec::new()),
        })
    }

    /// Removes the index files dropped at load. Call it once the checkpoint no longer counts
    /// their records as indexed.
    pub fn discard_dropped(&mut self) -> StoreResult<()> {
        for path in self.dropped_paths.drain(..) {
            std::fs::remove_file(&path).map_err(|e| StoreError::io("removing", &path, e))?;
        }
        Ok(())
    }

    /// Where recovery must start for the records of index files dropped at load to be indexed
    /// again, if any were.
    pub fn dropped_from(&self) -> Option<u64> {
        self.dropped.iter().map(|r| r.0).min()
    }

    /// Whether recovery must index the record at `phy` although later records are indexed: an
    /// index file dropped at load held it.
    pub fn was_dropped(&self, phy: u64) -> bool {
        self.dropped.iter().any(|&(a, b)| (a..=b).contains(&phy))
    }

    /// Offset of the last indexed record; records from here on are re-indexed on recovery.
    pub fn last_indexed_phy(&self) -> Option<i64> {
        let files = self.files.lock();
        let last = files.last()?;
        (last.count() > 1).then(|| last.end_phy())
    }

    /// Indexes `keys` (already prefixed `topic#`) of the record at `phy`; `now_ms` names a new
    /// index file, and is read only when one is made.
    pub fn put<'a>(
        &self,
        keys: impl IntoIterator<Item = &'a str>,
        phy: i64,
        store_ts: i64,
        now_ms: impl Fn() -> i64,
    ) -> StoreResult<()> {
        let mut files = self.files.lock();
        for key in keys {
            let fresh = self.fresh_file.load(Ordering::Relaxed)
                && self.fresh_file.swap(false, Ordering::Relaxed);
            if fresh || files.last().is_none_or(IndexFile::is_full) {
                if let Some(full) = files.last() {
                    self.filled.lock().push(Arc::clone(&full.file));
                }
                let size = entries_start(self.slots) + self.entries * ENTRY_LEN;
                let mut stamp = now_ms().max(0) as u64;
                if let Some(last) = files.last() {
                    stamp = stamp.max(last.file.file_from_offset() + 1);
                }
                let path = self.dir.join(segment_name(stamp));
                // The header, the slots and the first entry (entry 0 is never used), so that a
                // new file has room for the entry it is made for.
                let reserved = entries_start(self.slots) + 2 * ENTRY_LEN;
                let file = MappedFile::create_reserved(&path, stamp, size, reserved)?;
                files.push(IndexFile {
                    file: Arc::new(file),
                    slots: self.slots,
                    entries: self.entries,
                });
            }
            files
                .last()
                .expect("an index file exists")
                .put(key, phy, store_ts)?;
        }
        Ok(())
    }

    /// Candidate record offsets for `key` (prefixed `topic#`), newest first, without
    /// duplicates, and whether `max` cut them short.
    pub fn query(&self, key: &str, begin_ms: i64, end_ms: i64, max: usize) -> (Vec<i64>, bool) {
        let files = self.files.lock();
        let mut out = Vec::new();
        for f in files.iter().rev() {
            if out.len() >= max {
                break;
            }
            if f.count() <= 1 || f.end_ts() + 1000 < begin_ms || f.begin_ts() > end_ms {
                continue;
            }
            f.query(key, begin_ms, end_ms, max, &mut out);
        }
        let cut = out.len() >= max;
        let mut seen = std::collections::HashSet::new();
        out.retain(|p| seen.insert(*p));
        (out, cut)
    }

    pub fn flush(&self) -> StoreResult<()> {
        // msync outside the lock: over a whole index file it takes milliseconds, and `put`
        // (every append) needs the lock meanwhile.
        let filled = std::mem::take(&mut *self.filled.lock());
        let last = self.files.lock().last().map(|f| Arc::clone(&f.file));
        for (i, file) in filled.iter().chain(&last).enumerate() {
            if let Err(e) = file.flush_range(0, file.file_size()) {
                // Synced again by the next flush.
                self.filled.lock().extend(filled.into_iter().skip(i));
                return Err(e);
            }
        }
        Ok(())
    }

    /// Deletes index files whose records all lie before `commit_log_min` (the last file stays).
    pub fn delete_before(&self, commit_log_min: i64) -> StoreResult<usize> {
        let mut files = self.files.lock();
        let mut removed = 0;
        while files.len() > 1 && files[0].end_phy() < commit_log_min {
            let f = files.remove(0);
            std::fs::remove_file(f.file.path())
                .map_err(|e| StoreError::io("removing", f.file.path(), e))?;
            removed += 1;
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt as _;

    use super::*;
    use crate::mapped_file::RESERVE_CHUNK;

    const SLOTS: u32 = 10_000;
    const ENTRIES: u32 = 1_000_000;

    fn allocated(path: &Path) -> u64 {
        std::fs::metadata(path).unwrap().blocks() * 512
    }

    fn only_file(dir: &Path) -> PathBuf {
        let files: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        files.into_iter().next().unwrap()
    }

    fn put_keys(index: &IndexService, range: std::ops::Range<u64>) {
        for i in range {
            let key = format!("T#k{i}");
            index
                .put([key.as_str()], i as i64 * 100, 1_000 + i as i64, || 1)
                .unwrap();
        }
    }

    fn assert_found(index: &IndexService, range: std::ops::Range<u64>) {
        for i in range {
            let (found, _) = index.query(&format!("T#k{i}"), 0, i64::MAX, 64);
            assert!(found.contains(&(i as i64 * 100)), "key {i}: {found:?}");
        }
    }

    /// Entries whose blocks one chunk holds.
    fn per_chunk() -> u64 {
        RESERVE_CHUNK / ENTRY_LEN
    }

    #[test]
    fn an_index_file_takes_disk_as_its_entries_fill_it() {
        let dir = tempfile::tempdir().unwrap();
        let index = IndexService::load(dir.path(), SLOTS, ENTRIES).unwrap();
        put_keys(&index, 0..1);
        let path = only_file(dir.path());
        let len = std::fs::metadata(&path).unwrap().len();
        let slots_end = entries_start(u64::from(SLOTS));
        assert_eq!(len, slots_end + u64::from(ENTRIES) * ENTRY_LEN);
        // The header and slots, and one chunk of entries at most.
        let first = allocated(&path);
        assert!(first >= slots_end, "{first}");
        assert!(first <= slots_end + RESERVE_CHUNK + 4096, "{first}");
        assert!(first < len / 8, "{first} of {len}");

        let mut last = first;
        let mut put = 1;
        for _ in 0..3 {
            put_keys(&index, put..put + per_chunk());
            put += per_chunk();
            let now = allocated(&path);
            let written_end = entries_start(u64::from(SLOTS)) + (put + 1) * ENTRY_LEN;
            assert!(now > last, "{now} after {last}");
            assert!(now >= written_end, "{now} below {written_end}");
            assert!(
                now <= written_end + RESERVE_CHUNK + 4096,
                "{now} for {written_end}"
            );
            last = now;
        }
        assert!(last < len / 2, "{last} of {len}");
    }

    #[test]
    fn entries_across_chunks_are_found_after_reopening_and_later_ones_too() {
        let dir = tempfile::tempdir().unwrap();
        let n = 3 * per_chunk() + 100;
        {
            let index = IndexService::load(dir.path(), SLOTS, ENTRIES).unwrap();
            put_keys(&index, 0..n);
            index.flush().unwrap();
        }
        let path = only_file(dir.path());
        let before = allocated(&path);
        let index = IndexService::load(dir.path(), SLOTS, ENTRIES).unwrap();
        assert_found(&index, 0..n);
        assert_eq!(index.last_indexed_phy(), Some((n as i64 - 1) * 100));
        // Reopened, the file reserves from its last entry on, as before the close.
        put_keys(&index, n..n + per_chunk());
        assert_found(&index, 0..n + per_chunk());
        let after = allocated(&path);
        assert!(after > before && after <= before + RESERVE_CHUNK + 4096);
        drop(index);
        let index = IndexService::load(dir.path(), SLOTS, ENTRIES).unwrap();
        assert_found(&index, 0..n + per_chunk());
    }

    #[test]
    fn a_file_whose_slot_pages_were_made_holes_gets_their_blocks_back_at_load() {
        let dir = tempfile::tempdir().unwrap();
        {
            let index = IndexService::load(dir.path(), SLOTS, ENTRIES).unwrap();
            put_keys(&index, 0..10);
            index.flush().unwrap();
        }
        let path = only_file(dir.path());
        let slots_end = entries_start(u64::from(SLOTS));
        // A sparse copy (cp --sparse=always, rsync -S) makes the all-zero pages holes.
        let bytes = std::fs::read(&path).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        for (i, page) in bytes[..slots_end as usize].chunks(PAGE).enumerate() {
            if page.iter().all(|&b| b == 0) {
                // SAFETY: plain syscall on a descriptor this test holds open.
                let r = unsafe {
                    libc::fallocate(
                        std::os::fd::AsRawFd::as_raw_fd(&file),
                        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                        (i * PAGE) as libc::off_t,
                        page.len() as libc::off_t,
                    )
                };
                assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
            }
        }
        let punched = allocated(&path);
        assert!(punched < slots_end / 2, "{punched}");
        let index = IndexService::load(dir.path(), SLOTS, ENTRIES).unwrap();
        assert!(allocated(&path) >= slots_end, "{}", allocated(&path));
        put_keys(&index, 10..20);
        assert_found(&index, 0..20);
    }

    const PAGE: usize = 4096;

    #[test]
    fn a_wholly_allocated_file_of_an_older_version_opens_and_takes_more_entries() {
        let dir = tempfile::tempdir().unwrap();
        let (slots, entries) = (SLOTS, 3 * per_chunk() as u32);
        {
            let index = IndexService::load(dir.path(), slots, entries).unwrap();
            put_keys(&index, 0..1000);
            index.flush().unwrap();
        }
        // Older versions allocated the whole file at creation.
        let path = only_file(dir.path());
        let len = std::fs::metadata(&path).unwrap().len();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        // SAFETY: plain syscall on an open descriptor.
        let r =
            unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&file), 0, 0, len as i64) };
        assert_eq!(r, 0);
        drop(file);
        assert!(allocated(&path) >= len);

        let index = IndexService::load(dir.path(), slots, entries).unwrap();
        assert_found(&index, 0..1000);
        put_keys(&index, 1000..u64::from(entries) - 1);
        assert_found(&index, 0..u64::from(entries) - 1);
        // Full: the next key starts a second file.
        put_keys(&index, u64::from(entries) - 1..u64::from(entries));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
        drop(index);
        let index = IndexService::load(dir.path(), slots, entries).unwrap();
        assert_found(&index, 0..u64::from(entries));
    }
}
