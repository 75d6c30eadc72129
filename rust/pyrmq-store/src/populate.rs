//! Pages of the CommitLog populated ahead of the writer, on a background thread.
//!
//! A segment's first write to each page costs a fault, a zeroed page and a block reservation.
//! Paid by the writer under the put lock, that was most of a small append's cost. The populator
//! keeps [`AHEAD`] bytes reserved past the write position, so the writer finds its pages ready
//! and only populates for itself when it outruns the populator (after a segment roll, or with
//! no services running). Populating never changes a byte, so it may overlap the writer; a full
//! disk still reaches the append, through the writer's own reservation.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::mapped_file::MappedFile;

/// Bytes kept populated past the write position.
pub const AHEAD: u64 = 32 * 1024 * 1024;
/// The writer asks again when fewer than this many requested bytes remain ahead of it.
pub const LOW_WATER: u64 = 16 * 1024 * 1024;
/// Pages populated per step, so the writer benefits before a whole request is done.
const STEP: u64 = 1024 * 1024;

#[derive(Default)]
pub struct Populator {
    want: Mutex<Option<(Arc<MappedFile>, u64)>>,
    wake: Condvar,
    stopped: AtomicBool,
}

impl Populator {
    /// Called by the writer after reserving `..end` of `file`: asks for pages up to
    /// `end + AHEAD` once the requested headroom drops under [`LOW_WATER`]. Cheap otherwise.
    pub fn after_write(&self, file: &Arc<MappedFile>, end: u64) {
        if file.populate_requested() >= (end + LOW_WATER).min(file.file_size()) {
            return;
        }
        let to = (end + AHEAD).min(file.file_size());
        file.set_populate_requested(to);
        *self.want.lock() = Some((file.clone(), to));
        self.wake.notify_one();
    }

    /// The thread body: populates requested ranges until [`Self::stop`].
    pub fn run(&self) {
        loop {
            let (file, to) = {
                let mut want = self.want.lock();
                loop {
                    if self.stopped.load(Ordering::Acquire) {
                        return;
                    }
                    if let Some(w) = want.take() {
                        break w;
                    }
                    self.wake.wait(&mut want);
                }
            };
            let mut at = file.writable_to();
            while at < to && !self.stopped.load(Ordering::Acquire) {
                let step_end = (at + STEP).min(to);
                // An error (a full disk) is left for the writer's own reservation to report.
                if file.populate(at, step_end).is_err() {
                    break;
                }
                // A newer request for another file (a segment roll) takes over.
                if self
                    .want
                    .lock()
                    .as_ref()
                    .is_some_and(|(f, _)| !Arc::ptr_eq(f, &file))
                {
                    break;
                }
                at = file.writable_to().max(step_end);
            }
        }
    }

    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        let _g = self.want.lock();
        self.wake.notify_all();
    }
}
