//! An ordered run of equally sized segments covering one contiguous offset range.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::error::{StoreError, StoreResult};
use crate::mapped_file::{segment_name, Allocation, MappedFile};

pub struct MappedFileQueue {
    dir: PathBuf,
    file_size: u64,
    allocation: Allocation,
    files: RwLock<Vec<Arc<MappedFile>>>,
}

/// A file missing between others of a [`MappedFileQueue::load_derived`] queue.
#[derive(Debug)]
pub struct Gap {
    /// Byte offset of the first missing file.
    pub at: u64,
    /// The files after it, not opened.
    pub after: Vec<PathBuf>,
}

impl MappedFileQueue {
    /// Opens every segment in `dir` (created if missing). A last segment of the wrong size is a
    /// creation cut short: it never held data and is removed. Any other gap or size mismatch is
    /// an error rather than a guess.
    pub fn load(dir: &Path, file_size: u64, allocation: Allocation) -> StoreResult<Self> {
        Self::open(dir, file_size, allocation, false).map(|(files, _)| files)
    }

    /// Like [`Self::load`], for files derived from the CommitLog (a ConsumeQueue's), which can
    /// be written again: at a gap between files, the files up to it are opened, and the gap
    /// is returned with the files after it, for the caller to remove once it has made sure
    /// they will be written again.
    pub fn load_derived(
        dir: &Path,
        file_size: u64,
        allocation: Allocation,
    ) -> StoreResult<(Self, Option<Gap>)> {
        Self::open(dir, file_size, allocation, true)
    }

    fn open(
        dir: &Path,
        file_size: u64,
        allocation: Allocation,
        derived: bool,
    ) -> StoreResult<(Self, Option<Gap>)> {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::io("creating directory", dir, e))?;
        let mut names: Vec<(u64, PathBuf)> = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| StoreError::io("listing", dir, e))? {
            let entry = entry.map_err(|e| StoreError::io("listing", dir, e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit()) {
                // Twenty digits above u64::MAX name no segment; like other foreign names,
                // such a file is left alone.
                if let Ok(offset) = name.parse() {
                    names.push((offset, entry.path()));
                }
            }
        }
        names.sort_unstable();
        let mut files: Vec<Arc<MappedFile>> = Vec::with_capacity(names.len());
        let mut gap_at = None;
        let count = names.len();
        for (i, (offset, path)) in names.iter().cloned().enumerate() {
            let len = std::fs::metadata(&path)
                .map_err(|e| StoreError::io("stat", &path, e))?
                .len();
            if len != file_size {
                // A creation cut short leaves a last file that never held data; anything else is
                // a store written with another segment size, which must not be touched.
                let empty = std::fs::read(&path)
                    .map_err(|e| StoreError::io("reading", &path, e))?
                    .iter()
                    .all(|b| *b == 0);
                if i + 1 == count && empty {
                    log::warn!(
                        "removing partially created segment path={} size={len}",
                        path.display()
                    );
                    std::fs::remove_file(&path)
                        .map_err(|e| StoreError::io("removing", &path, e))?;
                    continue;
                }
                return Err(StoreError::Config(format!(
                    "segment {} is {len} bytes but the configured size is {file_size}: open the store \
                     with the segment size it was written with",
                    path.display()
                )));
            }
            if let Some(prev) = files.last() {
                let expected = prev.file_from_offset() + file_size;
                if expected != offset && derived {
                    gap_at = Some(Gap {
                        at: expected,
                        after: names[i..].iter().map(|(_, p)| p.clone()).collect(),
                    });
                    break;
                }
                if expected != offset {
                    return Err(StoreError::Corrupt {
                        phy_offset: offset,
                        reason: format!("segment gap before {}", path.display()),
                    });
                }
            }
            let file = MappedFile::open(&path, offset, file_size, allocation)?;
            files.push(Arc::new(file));
        }
        let files = Self {
            dir: dir.to_owned(),
            file_size,
            allocation,
            files: RwLock::new(files),
        };
        Ok((files, gap_at))
    }

    pub fn file_size(&self) -> u64 {
        self.file_size
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn first(&self) -> Option<Arc<MappedFile>> {
        self.files.read().first().cloned()
    }

    pub fn last(&self) -> Option<Arc<MappedFile>> {
        self.files.read().last().cloned()
    }

    pub fn snapshot(&self) -> Vec<Arc<MappedFile>> {
        self.files.read().clone()
    }

    pub fn len(&self) -> usize {
        self.files.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.read().is_empty()
    }

    /// The segment holding `offset`, if it still exists.
    pub fn find(&self, offset: u64) -> Option<Arc<MappedFile>> {
        let files = self.files.read();
        let first = files.first()?.file_from_offset();
        if offset < first {
            return None;
        }
        let index = ((offset - first) / self.file_size) as usize;
        files.get(index).cloned()
    }

    /// Creates the segment that starts at `offset`, which must follow the last one.
    pub fn create(&self, offset: u64) -> StoreResult<Arc<MappedFile>> {
        let mut files = self.files.write();
        if let Some(last) = files.last() {
            assert_eq!(
                last.file_from_offset() + self.file_size,
                offset,
                "segments of {} must be contiguous",
                self.dir.display()
            );
        }
        let path = self.dir.join(segment_name(offset));
        let file = Arc::new(MappedFile::create(
            &path,
            offset,
            self.file_size,
            self.allocation,
        )?);
        files.push(file.clone());
        Ok(file)
    }

    /// The segment starting at `start`, created ahead of the writer that will need it. A
    /// failure (a full disk) is left for that write to report, so this only logs it.
    pub fn create_ahead(&self, start: u64) -> Option<Arc<MappedFile>> {
        self.get_or_create(start)
            .map_err(|e| log::debug!("creating {} ahead: {e}", segment_name(start)))
            .ok()
    }

    /// The segment holding `offset`, created (with any segments before it) if needed.
    pub fn get_or_create(&self, offset: u64) -> StoreResult<Arc<MappedFile>> {
        if let Some(f) = self.find(offset) {
            return Ok(f);
        }
        let start = offset - offset % self.file_size;
        let mut next = match self.last() {
            Some(last) => last.file_from_offset() + self.file_size,
            None => start,
        };
        if next > start {
            return Err(StoreError::Corrupt {
                phy_offset: offset,
                reason: format!(
                    "offset {offset} lies before the first segment of {}",
                    self.dir.display()
                ),
            });
        }
        loop {
            let f = self.create(next)?;
            if next == start {
                return Ok(f);
            }
            next += self.file_size;
        }
    }

    /// Deletes every segment that starts at or after `offset` (recovery truncation).
    pub fn delete_from(&self, offset: u64) -> StoreResult<()> {
        let mut files = self.files.write();
        while let Some(last) = files.last() {
            if last.file_from_offset() < offset {
                break;
            }
            let path = last.path().to_owned();
            files.pop();
            std::fs::remove_file(&path).map_err(|e| StoreError::io("removing", &path, e))?;
        }
        Ok(())
    }

    /// Removes the first segment from the queue and deletes its file. Readers still holding it
    /// keep their mapping until they drop it.
    pub fn delete_first(&self) -> StoreResult<Option<Arc<MappedFile>>> {
        let mut files = self.files.write();
        if files.is_empty() {
            return Ok(None);
        }
        let first = files.remove(0);
        std::fs::remove_file(first.path())
            .map_err(|e| StoreError::io("removing", first.path(), e))?;
        Ok(Some(first))
    }

    /// Offset of the first byte still present, or `None` when there is no segment.
    pub fn min_offset(&self) -> Option<u64> {
        self.files.read().first().map(|f| f.file_from_offset())
    }

    /// Flushes `from..to` (log offsets) across segments.
    pub fn flush(&self, from: u64, to: u64) -> StoreResult<()> {
        let files = self.snapshot();
        for f in files {
            let start = f.file_from_offset();
            let end = start + self.file_size;
            if end <= from || start >= to {
                continue;
            }
            let lo = from.max(start) - start;
            let hi = to.min(end) - start;
            f.flush_range(lo, hi)?;
        }
        Ok(())
    }
}
