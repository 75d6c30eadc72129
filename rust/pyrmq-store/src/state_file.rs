//! The store's small state files (checkpoint, delay offsets, deleted topics), each replaced
//! whole: a crash leaves the old file or the new one, never a mix.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{StoreError, StoreResult};

/// Replaces `path` with `data`: written to `<path>.tmp`, synced, renamed over `path`, then the
/// directory synced. Writers of one path must not overlap: they share the temporary file.
pub(crate) fn write_atomic(path: &Path, data: &[u8]) -> StoreResult<()> {
    let mut name = path.as_os_str().to_owned();
    name.push(".tmp");
    let tmp = PathBuf::from(name);
    let io = |ctx, e| StoreError::io(ctx, &tmp, e);
    let written = std::fs::File::create(&tmp)
        .map_err(|e| io("creating", e))
        .and_then(|mut f| {
            f.write_all(data).map_err(|e| io("writing", e))?;
            f.sync_data().map_err(|e| io("syncing", e))
        });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, path).map_err(|e| StoreError::io("renaming", path, e))?;
    if let Some(dir) = path.parent() {
        // The rename is on disk once the directory is; failing that only keeps the old file.
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// The file's JSON, or `None` when it does not exist; a file that is not JSON is a
/// [`StoreError::Config`] naming it.
pub(crate) fn read_json(path: &Path) -> StoreResult<Option<serde_json::Value>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StoreError::Config(format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StoreError::io("reading", path, e)),
    }
}

/// [`write_atomic`] of `value` as JSON, creating the directory if needed.
pub(crate) fn write_json(path: &Path, value: &serde_json::Value) -> StoreResult<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| StoreError::io("creating directory", dir, e))?;
    write_atomic(
        path,
        &serde_json::to_vec(value).expect("a JSON value serializes"),
    )
}
