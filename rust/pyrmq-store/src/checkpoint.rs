//! The checkpoint: how far each structure is known durable, so recovery starts near the end.
//!
//! File `checkpoint`, 64 bytes, big-endian, replaced atomically (write, fsync, rename):
//!
//! | off | size | field                                                              |
//! |-----|------|--------------------------------------------------------------------|
//! |   0 |    4 | magic "PRCK"                                                       |
//! |   4 |    4 | version (1)                                                        |
//! |   8 |    8 | commit_log_flushed: CommitLog bytes below it are durable           |
//! |  16 |    8 | logics_flushed: ConsumeQueue units of records below it are durable |
//! |  24 |    8 | index_flushed: index entries of records below it are durable       |
//! |  32 |    8 | written_at_ms                                                      |
//! |  40 |    4 | crc32 of bytes 0..40                                               |
//!
//! The offsets are append-group boundaries, except that `index_flushed` may name a record
//! inside its group (the first record of index files dropped at open, or a checkpoint from
//! before index failures were counted per group), and `logics_flushed` too (the end of the last
//! unit kept before a ConsumeQueue file found missing at open): recovery then finds the group's
//! start in the fence ahead. A missing or damaged checkpoint makes recovery scan the CommitLog from its first
//! segment: slower, never wrong.

use std::path::{Path, PathBuf};

use crate::error::{StoreError, StoreResult};
use crate::state_file;

const MAGIC: &[u8; 4] = b"PRCK";
const LEN: usize = 64;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Checkpoint {
    pub commit_log_flushed: u64,
    pub logics_flushed: u64,
    pub index_flushed: u64,
    pub written_at_ms: i64,
}

impl Checkpoint {
    /// Where recovery must start re-validating and re-dispatching.
    pub fn recovery_start(&self) -> u64 {
        self.commit_log_flushed
            .min(self.logics_flushed)
            .min(self.index_flushed)
    }

    pub fn encode(&self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[..4].copy_from_slice(MAGIC);
        b[4..8].copy_from_slice(&1u32.to_be_bytes());
        b[8..16].copy_from_slice(&self.commit_log_flushed.to_be_bytes());
        b[16..24].copy_from_slice(&self.logics_flushed.to_be_bytes());
        b[24..32].copy_from_slice(&self.index_flushed.to_be_bytes());
        b[32..40].copy_from_slice(&self.written_at_ms.to_be_bytes());
        let crc = crc32fast::hash(&b[..40]);
        b[40..44].copy_from_slice(&crc.to_be_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Option<Self> {
        if b.len() < 44 || &b[..4] != MAGIC || b[4..8] != 1u32.to_be_bytes() {
            return None;
        }
        let crc = u32::from_be_bytes(b[40..44].try_into().ok()?);
        if crc != crc32fast::hash(&b[..40]) {
            return None;
        }
        let u = |r: std::ops::Range<usize>| u64::from_be_bytes(b[r].try_into().expect("8 bytes"));
        Some(Self {
            commit_log_flushed: u(8..16),
            logics_flushed: u(16..24),
            index_flushed: u(24..32),
            written_at_ms: u(32..40) as i64,
        })
    }
}

/// What [`CheckpointFile::load`] found.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The checkpoint, if the file is whole.
    pub checkpoint: Option<Checkpoint>,
    /// Whether the file is this store's at all (its magic), as a damaged checkpoint still is.
    pub ours: bool,
}

pub struct CheckpointFile {
    path: PathBuf,
    /// The periodic flush and an explicit one may store at once. Both write `checkpoint.tmp`:
    /// unserialized, one renames the file the other is still writing into place, and the
    /// other's rename then fails.
    writing: parking_lot::Mutex<()>,
}

impl CheckpointFile {
    pub fn new(root: &Path) -> Self {
        Self {
            path: root.join("checkpoint"),
            writing: parking_lot::Mutex::new(()),
        }
    }

    pub fn load(&self) -> Loaded {
        let Ok(bytes) = std::fs::read(&self.path) else {
            return Loaded::default();
        };
        let checkpoint = Checkpoint::decode(&bytes);
        if checkpoint.is_none() {
            log::warn!("ignoring damaged checkpoint {}", self.path.display());
        }
        Loaded {
            checkpoint,
            ours: bytes.starts_with(MAGIC),
        }
    }

    pub fn store(&self, cp: &Checkpoint) -> StoreResult<()> {
        let _writing = self.writing.lock();
        match self.replace(cp) {
            Err(StoreError::DiskFull(_)) if self.path.exists() => self.overwrite(cp),
            other => other,
        }
    }

    /// Write, fsync, rename: the old checkpoint stays whole until the new one is.
    fn replace(&self, cp: &Checkpoint) -> StoreResult<()> {
        state_file::write_atomic(&self.path, &cp.encode())
    }

    /// On a full file system a new file gets no space, but the existing one's block is
    /// already allocated. A torn overwrite fails its CRC, which only makes recovery start
    /// from the first segment.
    fn overwrite(&self, cp: &Checkpoint) -> StoreResult<()> {
        use std::os::unix::fs::FileExt;
        let io = |ctx, e| StoreError::io(ctx, &self.path, e);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.path)
            .map_err(|e| io("opening", e))?;
        f.write_all_at(&cp.encode(), 0)
            .map_err(|e| io("writing", e))?;
        f.sync_data().map_err(|e| io("syncing", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_stores_each_succeed_and_leave_a_whole_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let file = CheckpointFile::new(dir.path());
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let file = &file;
                s.spawn(move || {
                    for i in 0..200u64 {
                        let cp = Checkpoint {
                            commit_log_flushed: t * 1_000 + i,
                            logics_flushed: i,
                            index_flushed: i,
                            written_at_ms: i as i64,
                        };
                        file.store(&cp).expect("store");
                        let seen = file
                            .load()
                            .checkpoint
                            .expect("a whole checkpoint at every moment");
                        assert_eq!(seen.commit_log_flushed % 1_000, seen.logics_flushed);
                    }
                });
            }
        });
        let last = file.load().checkpoint.unwrap();
        assert_eq!(last.logics_flushed, 199);
    }
}
