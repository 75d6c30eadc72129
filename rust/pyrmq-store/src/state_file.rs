//! Small JSON state files of the store (delay offsets, deleted topics), replaced atomically.

use std::path::Path;

use crate::error::{StoreError, StoreResult};

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

/// Writes `value` through a temporary file that is synced, then renamed over `path`: a crash
/// leaves the old file or the new one, whole.
pub(crate) fn write_json(path: &Path, value: &serde_json::Value) -> StoreResult<()> {
    use std::io::Write;
    let data = serde_json::to_vec(value).expect("a JSON value serializes");
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| StoreError::io("creating directory", dir, e))?;
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::File::create(&tmp).map_err(|e| StoreError::io("creating", &tmp, e))?;
    f.write_all(&data)
        .and_then(|()| f.sync_all())
        .map_err(|e| StoreError::io("writing", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| StoreError::io("renaming", &tmp, e))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io("syncing directory", dir, e))
}
