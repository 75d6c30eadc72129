//! One memory-mapped segment file of fixed size.
//!
//! A page of a shared file mapping that cannot get disk space when first written kills the
//! process with SIGBUS. So no byte is written to a page before its space is reserved, in one of
//! three ways ([`Allocation`]):
//! * `Reserve`: the file is sparse and its blocks are allocated with `fallocate`, which writes
//!   nothing: a prefix at creation ([`MappedFile::create_reserved`]) for a region written at
//!   random, the rest [`RESERVE_CHUNK`] at a time ahead of a writer that writes in order. Used
//!   for index files (hash slots at random, entries in order), which would otherwise take
//!   their whole size (420 MB by default) at the first keyed message.
//! * `OnDemand`: the file is sparse and its pages are populated before they are written
//!   (`MADV_POPULATE_WRITE`, which reserves space and returns ENOSPC as an error instead of a
//!   signal): ahead of the writer by [`crate::populate::Populator`], and by the writer itself
//!   in small chunks when it gets there first. First writes into fallocated-but-unwritten
//!   extents cost about ten times more than into populated pages, which matters on the
//!   CommitLog append path. ConsumeQueue files are `OnDemand` too: a broker may hold thousands
//!   of queues, most of them quiet, and a whole file each would cost as much disk (and, read at
//!   open, memory).
//! * `Written`: for CommitLog segments appended through the file under `SYNC_FLUSH`. The file
//!   is sparse, and while the store's fsync rounds are small its pages are written with zeros
//!   ahead of the writer, one page per write. An fsync then finds its blocks allocated and
//!   written, so it records no allocation; and it finds single-page folios, so it writes only
//!   the pages the appends touched, where populated pages sit in large folios that are written
//!   back whole. Zeroing is the one way of reserving that changes bytes: it never starts below
//!   the reserved end, and it holds the file's zeroing lock. While rounds are large the zeros
//!   would cost more disk bandwidth than the allocations they save, and the populator
//!   populates the window as for `OnDemand` files (see [`crate::populate`]); a writer that
//!   outruns it still zeroes its own chunk.
//!
//! Concurrency: exactly one writer (the holder of the owner's put lock) writes bytes past the
//! published position; readers only read below it. The owner publishes with Release after
//! writing and readers load with Acquire before reading, so no byte is read while written.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::MmapRaw;
use parking_lot::Mutex;

use crate::error::{StoreError, StoreResult};

/// How a segment gets its disk space; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allocation {
    Reserve,
    OnDemand,
    Written,
}

/// Pages the writer populates for itself in one step when the populator is behind.
const WRITER_CHUNK: u64 = 64 * 1024;
/// Bytes a `Reserve` file allocates in one step. An `fallocate` costs about the same for any
/// length on ext4, so a large step makes fewer calls and extents; it is bounded by the disk it
/// may leave unused past the last entry and, on tmpfs (which zeroes pages as it allocates them),
/// by the time the writer waits for it.
pub const RESERVE_CHUNK: u64 = 1024 * 1024;
const PAGE: u64 = 4096;
const MADV_POPULATE_WRITE: libc::c_int = 23;
/// The source of a `Written` file's zeros.
static ZERO_PAGE: [u8; PAGE as usize] = [0; PAGE as usize];

pub struct MappedFile {
    path: PathBuf,
    /// Offset of this file's first byte in its log (CommitLog bytes or ConsumeQueue bytes).
    file_from_offset: u64,
    file_size: u64,
    map: MmapRaw,
    file: File,
    allocation: Allocation,
    /// Held while a `Written` file's pages are zeroed, so that the populator and a writer that
    /// outran it never zero the same pages, nor pages the other has handed over.
    zeroing: Mutex<()>,
    /// Bytes from the start whose pages have their space reserved.
    writable_to: AtomicU64,
    /// Bytes from the start whose pages were populated (pages a `Reserve` file allocated
    /// still fault on first write).
    populated_to: AtomicU64,
    /// How far the populator has been asked to go.
    populate_requested: AtomicU64,
}

impl MappedFile {
    /// Creates a new segment of `file_size` bytes, with no space reserved.
    pub fn create(
        path: &Path,
        file_from_offset: u64,
        file_size: u64,
        allocation: Allocation,
    ) -> StoreResult<Self> {
        Self::create_inner(path, file_from_offset, file_size, allocation, 0)
    }

    /// Creates a new `Reserve` segment of `file_size` bytes whose pages up to `reserved` have
    /// their blocks allocated. Fails, leaving no file, if the disk cannot take them.
    pub fn create_reserved(
        path: &Path,
        file_from_offset: u64,
        file_size: u64,
        reserved: u64,
    ) -> StoreResult<Self> {
        Self::create_inner(
            path,
            file_from_offset,
            file_size,
            Allocation::Reserve,
            reserved,
        )
    }

    fn create_inner(
        path: &Path,
        file_from_offset: u64,
        file_size: u64,
        allocation: Allocation,
        reserved: u64,
    ) -> StoreResult<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| StoreError::io("creating segment", path, e))?;
        // The prefix is allocated before the file gets its size: a crash in between leaves a
        // file too short to be taken for a segment whose prefix has its blocks.
        let reserved = reserved.div_ceil(PAGE).saturating_mul(PAGE).min(file_size);
        let sized = fallocate(&file, 0, reserved).and_then(|()| file.set_len(file_size));
        if let Err(e) = sized {
            drop(file);
            let _ = std::fs::remove_file(path);
            return Err(StoreError::io("allocating segment", path, e));
        }
        // A file left behind would make every later create of this segment fail (EEXIST).
        let mf =
            Self::map(path, file, file_from_offset, file_size, allocation).inspect_err(|_| {
                let _ = std::fs::remove_file(path);
            })?;
        mf.writable_to.store(reserved, Ordering::Release);
        Ok(mf)
    }

    /// Maps an existing segment, which must already have its full size. No page counts as
    /// reserved until [`Self::ensure_writable`] reserves it: a `Reserve` file's owner reserves
    /// its prefix again at load, since a copy may have made its zero pages holes.
    pub fn open(
        path: &Path,
        file_from_offset: u64,
        file_size: u64,
        allocation: Allocation,
    ) -> StoreResult<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| StoreError::io("opening segment", path, e))?;
        let len = file
            .metadata()
            .map_err(|e| StoreError::io("reading size of", path, e))?
            .len();
        if len != file_size {
            return Err(StoreError::Corrupt {
                phy_offset: file_from_offset,
                reason: format!(
                    "segment {} is {len} bytes, expected {file_size}",
                    path.display()
                ),
            });
        }
        Self::map(path, file, file_from_offset, file_size, allocation)
    }

    fn map(
        path: &Path,
        file: File,
        file_from_offset: u64,
        file_size: u64,
        allocation: Allocation,
    ) -> StoreResult<Self> {
        let map =
            MmapRaw::map_raw(&file).map_err(|e| StoreError::io("mapping segment", path, e))?;
        Ok(Self {
            path: path.to_owned(),
            file_from_offset,
            file_size,
            map,
            file,
            allocation,
            zeroing: Mutex::new(()),
            writable_to: AtomicU64::new(0),
            populated_to: AtomicU64::new(0),
            populate_requested: AtomicU64::new(0),
        })
    }

    /// End of the data region that contains `pos`: the next hole at or after it (the file size
    /// when there is none). Pages past it were never written; on tmpfs even *reading* them
    /// allocates, which on a full file system is a SIGBUS, so scans of unknown bytes stop here.
    pub fn data_end_from(&self, pos: u64) -> u64 {
        if pos >= self.file_size {
            return self.file_size;
        }
        // SAFETY: plain syscall on our own descriptor.
        let r = unsafe { libc::lseek(self.file.as_raw_fd(), pos as libc::off_t, libc::SEEK_HOLE) };
        if r < 0 {
            self.file_size
        } else {
            (r as u64).min(self.file_size)
        }
    }

    /// Start of the next data region at or after `pos`, if any. A file system that cannot
    /// tell (an error other than "no data past `pos`") has data everywhere.
    pub fn next_data_from(&self, pos: u64) -> Option<u64> {
        if pos >= self.file_size {
            return None;
        }
        // SAFETY: plain syscall on our own descriptor.
        let r = unsafe { libc::lseek(self.file.as_raw_fd(), pos as libc::off_t, libc::SEEK_DATA) };
        if r < 0 {
            let no_data = std::io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO);
            return (!no_data).then_some(pos);
        }
        Some(r as u64).filter(|d| *d < self.file_size)
    }

    /// The file's data regions, in order.
    pub fn data_regions(&self) -> Vec<(u64, u64)> {
        let mut regions = Vec::new();
        let mut pos = 0;
        while let Some(start) = self.next_data_from(pos) {
            let end = self.data_end_from(start);
            if end <= start {
                break;
            }
            regions.push((start, end));
            pos = end;
        }
        regions
    }

    /// Copies bytes at `pos` with `pread`, which reads holes as zeros without allocating: for
    /// offsets that come from outside (a message id), where the mapping could hit a hole.
    pub fn read_at(&self, pos: u64, buf: &mut [u8]) -> StoreResult<()> {
        self.file
            .read_exact_at(buf, pos)
            .map_err(|e| StoreError::io("reading", &self.path, e))
    }

    /// Writes `data` at `pos` through the file rather than the mapping; readers of the mapping
    /// see it all the same (one page cache). Same contract as [`Self::write_at`].
    pub fn write_through(&self, pos: u64, data: &[u8]) -> StoreResult<()> {
        assert!(
            pos + data.len() as u64 <= self.file_size,
            "write past the end of {}",
            self.path.display()
        );
        self.file
            .write_all_at(data, pos)
            .map_err(|e| StoreError::io("writing", &self.path, e))
    }

    /// Reserves disk space for the pages of `from..to` (and up to one chunk beyond) so that
    /// writing them cannot fault. On a full disk this fails and nothing is written.
    pub fn ensure_writable(&self, from: u64, to: u64) -> StoreResult<()> {
        let ready = self.writable_to.load(Ordering::Acquire);
        if to <= ready {
            return Ok(());
        }
        let chunk = match self.allocation {
            Allocation::Reserve => RESERVE_CHUNK,
            Allocation::OnDemand | Allocation::Written => WRITER_CHUNK,
        };
        self.reserve(from.max(ready), to.div_ceil(chunk).saturating_mul(chunk))
    }

    /// Reserves the pages of `from..to` the file's way. Same contract as [`Self::populate`].
    fn reserve(&self, from: u64, to: u64) -> StoreResult<()> {
        match self.allocation {
            Allocation::Written => self.write_zeros(from, to).map(|_| ()),
            Allocation::OnDemand => self.populate(from, to),
            Allocation::Reserve => self.allocate(from, to),
        }
    }

    /// Allocates the blocks of the pages of `from..to` (clamped to the file) without writing
    /// them, and advances `writable_to` to its end. Same contract as [`Self::populate`].
    fn allocate(&self, from: u64, to: u64) -> StoreResult<()> {
        let start = from / PAGE * PAGE;
        let end = to.div_ceil(PAGE).saturating_mul(PAGE).min(self.file_size);
        if end <= start {
            return Ok(());
        }
        fallocate(&self.file, start, end)
            .map_err(|e| StoreError::io("reserving space in", &self.path, e))?;
        self.writable_to.fetch_max(end, Ordering::AcqRel);
        Ok(())
    }

    pub fn allocation(&self) -> Allocation {
        self.allocation
    }

    /// Bytes from the start whose pages are reserved.
    pub fn writable_to(&self) -> u64 {
        self.writable_to.load(Ordering::Acquire)
    }

    /// Bytes from the start whose pages were populated.
    pub fn populated_to(&self) -> u64 {
        self.populated_to.load(Ordering::Acquire)
    }

    pub fn populate_requested(&self) -> u64 {
        self.populate_requested.load(Ordering::Acquire)
    }

    pub fn set_populate_requested(&self, to: u64) {
        self.populate_requested.fetch_max(to, Ordering::AcqRel);
    }

    /// Reserves the pages of `from..to` (clamped to the file) and advances `writable_to` to its
    /// end. `from` must be at most `writable_to()` or the write position (bytes below it are never
    /// written again), so that everything from the write position up to `to` is then reserved.
    pub fn populate(&self, from: u64, to: u64) -> StoreResult<()> {
        let start = from / PAGE * PAGE;
        let end = to.div_ceil(PAGE).saturating_mul(PAGE).min(self.file_size);
        if end <= start {
            return Ok(());
        }
        let len = (end - start) as usize;
        // SAFETY: the range lies inside the mapping; MADV_POPULATE_WRITE faults pages in without
        // changing their contents, so it may overlap data written concurrently.
        let rc = unsafe {
            libc::madvise(
                self.map.as_mut_ptr().add(start as usize).cast(),
                len,
                MADV_POPULATE_WRITE,
            )
        };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            match err.raw_os_error() {
                // Kernels before 5.14: reserve the range with fallocate instead.
                Some(libc::EINVAL) => fallocate(&self.file, start, end)
                    .map_err(|e| StoreError::io("reserving space in", &self.path, e))?,
                // A page that could not get disk space.
                Some(libc::EFAULT | libc::ENOSPC | libc::EDQUOT | libc::EFBIG) => {
                    return Err(StoreError::DiskFull(format!(
                        "no space to extend {} to {end} bytes: {err}",
                        self.path.display()
                    )));
                }
                _ => return Err(StoreError::io("populating pages of", &self.path, err)),
            }
        }
        self.writable_to.fetch_max(end, Ordering::AcqRel);
        self.populated_to.fetch_max(end, Ordering::AcqRel);
        Ok(())
    }

    /// Reserves `from..to` of a `Written` file as [`Self::ensure_writable`] does, with zeros,
    /// then starts their write-back, so that their blocks are allocated and on disk before an
    /// fsync meets them. For the populator, ahead of the writer.
    pub fn write_zeros_ahead(&self, from: u64, to: u64) -> StoreResult<()> {
        // Only the pages zeroed now: below them may be appends a group commit is about to sync.
        let zeroed = self.write_zeros(from, to)?;
        if !zeroed.is_empty() {
            // SAFETY: plain syscall on our own descriptor. Starting write-back is advice: on an
            // error the zeros stay dirty, and the fsync that meets them writes them.
            unsafe {
                libc::sync_file_range(
                    self.file.as_raw_fd(),
                    zeroed.start as libc::off64_t,
                    (zeroed.end - zeroed.start) as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                );
            }
        }
        Ok(())
    }

    /// Reserves `from..to` (the end rounded up to a page) of a `Written` file by writing zeros
    /// over what is not reserved yet, one page per write so that the page cache keeps
    /// single-page folios. Same contract as [`Self::populate`]; returns the range it zeroed.
    fn write_zeros(&self, from: u64, to: u64) -> StoreResult<std::ops::Range<u64>> {
        debug_assert_eq!(self.allocation, Allocation::Written);
        let _zeroing = self.zeroing.lock();
        let start = from.max(self.writable_to());
        let mut pos = start;
        let end = to.div_ceil(PAGE).saturating_mul(PAGE).min(self.file_size);
        while pos < end {
            let n = (PAGE - pos % PAGE).min(end - pos) as usize;
            if let Err(err) = self.file.write_all_at(&ZERO_PAGE[..n], pos) {
                return Err(match err.raw_os_error() {
                    Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG) => {
                        StoreError::DiskFull(format!(
                            "no space to extend {} to {end} bytes: {err}",
                            self.path.display()
                        ))
                    }
                    _ => StoreError::io("zeroing pages of", &self.path, err),
                });
            }
            pos += n as u64;
            // Each page is handed over as soon as it is written, for a writer waiting on it.
            self.writable_to.fetch_max(pos, Ordering::AcqRel);
        }
        self.populated_to.fetch_max(end, Ordering::AcqRel);
        Ok(start..pos)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file_from_offset(&self) -> u64 {
        self.file_from_offset
    }

    pub fn file_size(&self) -> u64 {
        self.file_size
    }

    /// Copies `data` to `pos` (relative to the file start).
    ///
    /// # Safety
    /// The caller must be the only writer of `pos..pos + data.len()` and no reader may read that
    /// range until the owner publishes it.
    pub unsafe fn write_at(&self, pos: u64, data: &[u8]) {
        assert!(
            pos + data.len() as u64 <= self.file_size,
            "write past the end of {}",
            self.path.display()
        );
        // SAFETY: in bounds (checked above); exclusivity is the caller's contract.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.map.as_mut_ptr().add(pos as usize),
                data.len(),
            );
        }
    }

    /// A mutable view of `pos..pos + len` for encoding in place.
    ///
    /// # Safety
    /// Same contract as [`Self::write_at`]; the slice must be dropped before publication.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self, pos: u64, len: usize) -> &mut [u8] {
        assert!(
            pos + len as u64 <= self.file_size,
            "slice past the end of {}",
            self.path.display()
        );
        // SAFETY: in bounds; exclusivity is the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_mut_ptr().add(pos as usize), len) }
    }

    /// Reads `pos..pos + len`, clamped to the file. Callers read only published bytes.
    pub fn slice(&self, pos: u64, len: usize) -> &[u8] {
        let start = pos.min(self.file_size) as usize;
        let end = (pos + len as u64).min(self.file_size) as usize;
        // SAFETY: the mapping lives as long as `self` and the range is in bounds. Published bytes
        // are never written again (except by recovery and truncation, which run single-threaded).
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(start), end - start) }
    }

    /// Makes `from..to` (relative to the file start) durable.
    pub fn flush_range(&self, from: u64, to: u64) -> StoreResult<()> {
        if to > from {
            self.map
                .flush_range(from as usize, (to - from) as usize)
                .map_err(|e| StoreError::io("flushing segment", &self.path, e))?;
        }
        Ok(())
    }

    /// Zeroes the written tail from `from` on: up to the first page that is entirely zero
    /// (preallocated space never written). Returns the number of non-zero bytes cleared.
    pub fn zero_from(&self, from: u64) -> StoreResult<u64> {
        let mut cleared = 0u64;
        let mut pos = from;
        let data_end = self.data_end_from(from);
        while pos < data_end {
            let page_end = ((pos / PAGE) + 1) * PAGE;
            let end = page_end.min(data_end);
            let chunk = self.slice(pos, (end - pos) as usize);
            let nonzero = chunk.iter().filter(|b| **b != 0).count() as u64;
            if nonzero == 0 && pos.is_multiple_of(PAGE) {
                break;
            }
            if nonzero > 0 {
                // Only this page: reserving a `Written` file's pages zeroes them, and pages
                // past this one are still to be counted.
                if end > self.writable_to() {
                    self.reserve(pos, end)?;
                }
                // SAFETY: recovery runs before any reader or writer starts.
                unsafe { self.slice_mut(pos, (end - pos) as usize).fill(0) };
                cleared += nonzero;
            }
            pos = end;
        }
        if pos > from {
            self.flush_range(from, pos)?;
        }
        Ok(cleared)
    }

    /// Last modification time of the file, in ms since the epoch.
    pub fn modified_ms(&self) -> Option<i64> {
        let meta = std::fs::metadata(&self.path).ok()?;
        let t = meta.modified().ok()?;
        Some(t.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as i64)
    }
}

/// Allocates the blocks of `start..end` of `file` (`fallocate` mode 0: extends the file if
/// `end` is past its end).
fn fallocate(file: &File, start: u64, end: u64) -> std::io::Result<()> {
    if end <= start {
        return Ok(());
    }
    // SAFETY: plain syscall on a descriptor the caller holds open.
    let r = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            0,
            start as libc::off_t,
            (end - start) as libc::off_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// File name for a segment starting at `offset`: 20 zero-padded digits, as RocketMQ names them.
pub fn segment_name(offset: u64) -> String {
    format!("{offset:020}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(path: &Path) -> Vec<u8> {
        std::fs::read(path).unwrap()
    }

    #[test]
    fn a_written_file_reserves_by_writing_zeros_from_the_write_position_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg");
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8 + 1).collect();
        {
            let f = MappedFile::create(&path, 0, 1 << 20, Allocation::Written).unwrap();
            f.ensure_writable(0, data.len() as u64).unwrap();
            assert_eq!(f.writable_to(), WRITER_CHUNK);
            f.write_through(0, &data).unwrap();
        }
        // Reopened, nothing past the data counts as reserved; reserving from the write
        // position zeroes onwards from there and leaves the data alone.
        let f = MappedFile::open(&path, 0, 1 << 20, Allocation::Written).unwrap();
        assert_eq!(f.writable_to(), 0);
        f.ensure_writable(5000, 5100).unwrap();
        assert_eq!(f.writable_to(), WRITER_CHUNK);
        let bytes = read_all(&path);
        assert_eq!(&bytes[..5000], &data[..]);
        assert!(bytes[5000..].iter().all(|b| *b == 0));
        // The zeros are written, not a hole: the data region reaches the end of the window.
        assert!(f.data_end_from(0) >= WRITER_CHUNK);
    }

    #[test]
    fn zeroing_ahead_skips_what_is_reserved_and_stops_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg");
        let size = 2 * WRITER_CHUNK;
        let f = MappedFile::create(&path, 0, size, Allocation::Written).unwrap();
        f.ensure_writable(0, 10).unwrap();
        assert_eq!(f.writable_to(), WRITER_CHUNK);
        f.write_through(WRITER_CHUNK - 10, b"0123456789").unwrap();
        // A request that starts below the reserved end zeroes only past it, up to the file's end.
        assert_eq!(f.write_zeros(0, 10 * size).unwrap(), WRITER_CHUNK..size);
        assert!(f.write_zeros(0, 10 * size).unwrap().is_empty());
        f.write_zeros_ahead(0, 10 * size).unwrap();
        assert_eq!(f.writable_to(), size);
        assert_eq!(f.populated_to(), size);
        let bytes = read_all(&path);
        assert_eq!(
            &bytes[WRITER_CHUNK as usize - 10..WRITER_CHUNK as usize],
            b"0123456789"
        );
        assert!(f.data_end_from(WRITER_CHUNK) >= size);
    }
}
