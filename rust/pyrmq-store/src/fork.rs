//! Which process a store belongs to.
//!
//! A child forked from a process with an open store inherits its mappings, its directory lock
//! and a copy of its writer's state, but none of its threads. Appending there would overwrite
//! the parent's records at offsets the parent hands out too, and closing would remove the
//! parent's abort marker. So a store remembers the fork generation it was opened in, and a
//! store of an earlier generation refuses every call and closes without touching its files.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

static GENERATION: AtomicU64 = AtomicU64::new(0);
static WATCH: Once = Once::new();

extern "C" fn in_child() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// The current generation, counting forks from the first store opened on.
pub(crate) fn generation() -> u64 {
    WATCH.call_once(|| {
        // SAFETY: registers a handler that only touches an atomic, which is async-signal-safe
        // as a fork handler must be. A failure (ENOMEM) leaves forks unnoticed, as before.
        unsafe {
            libc::pthread_atfork(None, None, Some(in_child));
        }
    });
    GENERATION.load(Ordering::Relaxed)
}
