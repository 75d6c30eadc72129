//! One error variant per decision a caller has to make.

use std::io;
use std::path::PathBuf;

pub type StoreResult<T> = Result<T, StoreError>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("invalid topic {topic:?}: {reason}")]
    InvalidTopic { topic: String, reason: &'static str },
    #[error("sending to topic {0:?} is forbidden: only the broker writes it")]
    SystemTopic(String),
    #[error("message of {size_bytes} bytes exceeds maxMessageSize {max_bytes}")]
    MessageTooLarge { size_bytes: u64, max_bytes: u64 },
    #[error(
        "a put of {size_bytes} bytes does not fit one CommitLog segment of {segment_bytes} bytes"
    )]
    GroupTooLarge { size_bytes: u64, segment_bytes: u64 },
    #[error("properties of {size_bytes} bytes exceed the 32767-byte limit")]
    PropertiesTooLarge { size_bytes: usize },
    #[error("queue id {queue_id} out of range [0, {max})")]
    InvalidQueueId { queue_id: i32, max: u32 },
    #[error("illegal message: {0}")]
    IllegalMessage(String),
    #[error("corrupt record at commit-log offset {phy_offset}: {reason}")]
    Corrupt { phy_offset: u64, reason: String },
    #[error("disk full, writes refused: {0}")]
    DiskFull(String),
    #[error("the store is closed")]
    Closed,
    #[error("the store was opened by the parent of this forked process; open it here instead")]
    Forked,
    #[error("store directory {0} is in use by another process")]
    Locked(PathBuf),
    #[error("{context} {path}: {source}")]
    Io {
        context: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("the store is a slave's: only replication from its master writes it")]
    ReadOnly,
    #[error("replication stream refused at commit-log offset {offset}: {reason}")]
    Replication { offset: u64, reason: String },
    #[error("bad store configuration: {0}")]
    Config(String),
}

impl StoreError {
    pub(crate) fn io(context: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        if is_disk_full(&source) {
            return Self::DiskFull(format!("{context} {}: {source}", path.into().display()));
        }
        Self::Io {
            context,
            path: path.into(),
            source,
        }
    }
}

fn is_disk_full(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG)
    )
}
