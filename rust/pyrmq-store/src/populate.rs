//! Pages of mapped files populated ahead of their writer, on a background thread.
//!
//! A file's first write to each page costs a fault, a zeroed page and a block reservation.
//! Paid by the writer under the put lock, that was most of a small append's cost. The populator
//! keeps a window of pages ready past each writer's position: [`AHEAD`] bytes for the
//! CommitLog, [`CQ_AHEAD`] for each ConsumeQueue that has written as much into its current file
//! (small, and only for busy queues, since a broker may write to thousands of them).
//! A writer that outruns it still faults, or for the CommitLog populates for itself. Populating
//! never changes a byte, so it may overlap the writer; a full disk still reaches the append,
//! through the writer's own reservation.
//!
//! A `SYNC_FLUSH` segment ([`Allocation::Written`]) instead has [`ZEROED_AHEAD`] bytes written
//! with zeros and sent to disk, while the group-commit service reports small rounds
//! ([`Populator::set_large_rounds`]); zeroing takes the file's lock and never goes below what is
//! reserved, so it too may run beside the writer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::mapped_file::{Allocation, MappedFile};

/// CommitLog bytes kept populated past the write position.
pub const AHEAD: u64 = 32 * 1024 * 1024;
/// The CommitLog writer asks again when fewer requested bytes than this remain ahead of it.
pub const LOW_WATER: u64 = 16 * 1024 * 1024;
/// The same for a `Written` segment whose pages are zeroed: its zeros go to disk, so a window
/// is small enough that writing it does not hold up the fsyncs of the appends. Against no
/// zeroing, 8 appenders got 6–17% more puts in 6 s runs with 4 MiB, and with 32 MiB 4–10% fewer
/// in three runs of four.
pub const ZEROED_AHEAD: u64 = 4 * 1024 * 1024;
pub const ZEROED_LOW_WATER: u64 = 3 * 1024 * 1024;
/// ConsumeQueue bytes kept populated past the write position (6,553 units).
pub const CQ_AHEAD: u64 = 128 * 1024;
/// A ConsumeQueue writer asks again below this many requested bytes ahead.
pub const CQ_LOW_WATER: u64 = 64 * 1024;
/// Pages populated per step, so the writer benefits before a whole request is done.
const STEP: u64 = 64 * 1024;

/// Whose writer a request serves: a newer request of the same lane replaces the older one (a
/// CommitLog segment roll moves the window to the next file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    CommitLog,
    /// The head of the CommitLog segment after the writer's, once the window reaches past the
    /// end of the writer's: the writer rolls into populated pages, as RocketMQ's writer rolls
    /// into a file its allocate service prepared.
    NextSegment,
    /// A ConsumeQueue, by the address of its shared state.
    Queue(usize),
    /// The head of the file after a busy ConsumeQueue's current one, likewise.
    NextQueueFile(usize),
}

impl Lane {
    /// The order [`Populator::run`] serves lanes in, lowest first.
    fn rank(self) -> u8 {
        match self {
            Lane::Queue(_) => 0,
            Lane::NextQueueFile(_) => 1,
            Lane::CommitLog => 2,
            Lane::NextSegment => 3,
        }
    }
}

struct Job {
    lane: Lane,
    file: Arc<MappedFile>,
    /// Where its writer was: pages below are written (or the writer faulted them in already).
    from: u64,
    to: u64,
}

#[derive(Default)]
pub struct Populator {
    jobs: Mutex<Vec<Job>>,
    wake: Condvar,
    stopped: AtomicBool,
    /// Set while the `SYNC_FLUSH` rounds are large: `Written` segments are then populated,
    /// not zeroed (see [`crate::mapped_file::Allocation`]).
    large_rounds: AtomicBool,
}

impl Populator {
    /// Whether pages of `file` are reserved by writing zeros over them.
    fn zeroes(&self, file: &MappedFile) -> bool {
        file.allocation() == Allocation::Written && !self.large_rounds.load(Ordering::Relaxed)
    }

    /// The group-commit service's verdict on its recent rounds, which the next windows follow.
    pub fn set_large_rounds(&self, large: bool) {
        self.large_rounds.store(large, Ordering::Relaxed);
    }

    #[cfg(test)]
    pub(crate) fn large_rounds(&self) -> bool {
        self.large_rounds.load(Ordering::Relaxed)
    }

    /// The window kept ahead of a CommitLog segment's writer, and its low-water mark.
    fn commit_log_window(&self, file: &MappedFile) -> (u64, u64) {
        if self.zeroes(file) {
            (ZEROED_AHEAD, ZEROED_LOW_WATER)
        } else {
            (AHEAD, LOW_WATER)
        }
    }

    /// Called by the CommitLog writer after reserving `..end` of `file`.
    pub fn after_write(&self, file: &Arc<MappedFile>, end: u64) {
        let (ahead, low_water) = self.commit_log_window(file);
        self.request(Lane::CommitLog, file, end, ahead, low_water);
    }

    /// Whether the writer's window, at `end` of its segment `file`, reaches into the next
    /// segment: then [`Self::next_segment`] should be given that segment, once.
    pub fn wants_next_segment(&self, file: &MappedFile, end: u64) -> bool {
        end + self.commit_log_window(file).0 > file.file_size()
    }

    /// Asks for a window's worth of the segment after the writer's. Its pages come after the
    /// writer's own segment's.
    pub fn next_segment(&self, next: &Arc<MappedFile>) {
        let (ahead, low_water) = self.commit_log_window(next);
        self.request(Lane::NextSegment, next, 0, ahead, low_water);
    }

    /// Called by a ConsumeQueue writer after writing units up to byte `end` of `file`. Only a
    /// queue that has written a window's worth into the file gets one populated, so a broker's
    /// many quiet queues cost no memory ahead of their data.
    pub fn after_queue_write(&self, lane: usize, file: &Arc<MappedFile>, end: u64) {
        if end >= CQ_AHEAD {
            self.request(Lane::Queue(lane), file, end, CQ_AHEAD, CQ_LOW_WATER);
        }
    }

    /// Whether a ConsumeQueue writer at `end` of its file of `size` bytes should have the next
    /// file created and given to [`Self::next_queue_file`]: a busy queue (one with a window)
    /// whose window reaches past the end of its file.
    pub fn wants_next_queue_file(end: u64, size: u64) -> bool {
        end >= CQ_AHEAD && end + CQ_AHEAD > size
    }

    /// Asks for a window's worth of the file after a busy ConsumeQueue's current one.
    pub fn next_queue_file(&self, lane: usize, next: &Arc<MappedFile>) {
        self.request(Lane::NextQueueFile(lane), next, 0, CQ_AHEAD, CQ_LOW_WATER);
    }

    /// Asks for the pages of `file` up to `end + ahead` once the requested headroom drops
    /// under `low_water`. Cheap otherwise: one atomic load.
    fn request(&self, lane: Lane, file: &Arc<MappedFile>, end: u64, ahead: u64, low_water: u64) {
        let size = file.file_size();
        if file.populate_requested() >= (end + low_water).min(size) {
            return;
        }
        let to = (end + ahead).min(size);
        file.set_populate_requested(to);
        let job = Job {
            lane,
            file: file.clone(),
            from: end,
            to,
        };
        let mut jobs = self.jobs.lock();
        match jobs.iter_mut().find(|j| j.lane == lane) {
            Some(j) => *j = job,
            None => jobs.push(job),
        }
        drop(jobs);
        self.wake.notify_one();
    }

    /// The thread body: populates requested ranges a step at a time until [`Self::stop`].
    /// ConsumeQueue windows go first: each is a step or two, and their writer, unlike the
    /// CommitLog's, pays a fault for every page it finds unpopulated; then the heads of their
    /// next files. The next CommitLog segment goes last, after the rest of the writer's own.
    pub fn run(&self) {
        loop {
            let (lane, file, from, to) = {
                let mut jobs = self.jobs.lock();
                loop {
                    if self.stopped.load(Ordering::Acquire) {
                        return;
                    }
                    if !jobs.is_empty() {
                        let j = jobs
                            .iter()
                            .min_by_key(|j| j.lane.rank())
                            .expect("jobs is not empty");
                        break (j.lane, j.file.clone(), j.from, j.to);
                    }
                    self.wake.wait(&mut jobs);
                }
            };
            let at = file.populated_to().max(from);
            let step_end = (at + STEP).min(to);
            // An error (a full disk) is left for the writer's own reservation to report.
            let finished = at >= to || {
                let step = if self.zeroes(&file) {
                    file.write_zeros_ahead(at, step_end)
                } else {
                    file.populate(at, step_end)
                };
                step.is_err() || step_end >= to
            };
            if finished {
                let mut jobs = self.jobs.lock();
                // Unless a newer request replaced it meanwhile.
                if let Some(i) = jobs
                    .iter()
                    .position(|j| j.lane == lane && Arc::ptr_eq(&j.file, &file) && j.to == to)
                {
                    jobs.swap_remove(i);
                }
            }
        }
    }

    /// Ends [`Self::run`] and lets go of the files still requested.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.jobs.lock().clear();
        self.wake.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    fn file(
        dir: &std::path::Path,
        name: &str,
        size: u64,
        allocation: Allocation,
    ) -> Arc<MappedFile> {
        Arc::new(MappedFile::create(&dir.join(name), 0, size, allocation).unwrap())
    }

    /// A populator with its thread running; stop it and join the handle at the end.
    fn running() -> (Arc<Populator>, std::thread::JoinHandle<()>) {
        let p = Arc::new(Populator::default());
        let runner = {
            let p = p.clone();
            std::thread::spawn(move || p.run())
        };
        (p, runner)
    }

    fn wait_for(what: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !what() {
            assert!(Instant::now() < deadline, "populator made no progress");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn keeps_a_window_ahead_of_each_writer() {
        let dir = tempfile::tempdir().unwrap();
        let log = file(dir.path(), "log", 64 << 20, Allocation::OnDemand);
        let cq = file(dir.path(), "cq", 1 << 20, Allocation::Reserve);
        let (p, runner) = running();
        p.after_write(&log, 4096);
        // A queue with less than a window in this file asks for nothing.
        p.after_queue_write(1, &cq, CQ_AHEAD - 20);
        assert_eq!(cq.populate_requested(), 0);
        let at = CQ_AHEAD + 200;
        p.after_queue_write(1, &cq, at);
        wait_for(|| cq.populated_to() >= at + CQ_AHEAD && log.populated_to() >= 4096 + AHEAD);
        // Until the headroom falls under the low-water mark, a write asks for nothing more.
        p.after_queue_write(1, &cq, at + CQ_AHEAD - CQ_LOW_WATER);
        assert_eq!(cq.populate_requested(), at + CQ_AHEAD);
        p.after_queue_write(1, &cq, at + CQ_AHEAD - CQ_LOW_WATER + 20);
        let want = at + 2 * CQ_AHEAD - CQ_LOW_WATER + 20;
        assert_eq!(cq.populate_requested(), want);
        wait_for(|| cq.populated_to() >= want);
        // Never past the end of the file.
        p.after_queue_write(1, &cq, (1 << 20) - 20);
        wait_for(|| cq.populated_to() == 1 << 20);
        p.stop();
        runner.join().unwrap();
    }

    #[test]
    fn written_segments_get_a_zeroed_window_while_rounds_are_small() {
        let dir = tempfile::tempdir().unwrap();
        let a = file(dir.path(), "a", 64 << 20, Allocation::Written);
        let b = file(dir.path(), "b", 64 << 20, Allocation::Written);
        let plain = file(dir.path(), "c", 64 << 20, Allocation::OnDemand);
        let p = Populator::default();
        p.after_write(&a, 4096);
        assert_eq!(a.populate_requested(), 4096 + ZEROED_AHEAD);
        assert!(p.wants_next_segment(&a, (64 << 20) - ZEROED_AHEAD + 1));
        assert!(!p.wants_next_segment(&a, (64 << 20) - ZEROED_AHEAD));
        p.after_write(&plain, 4096);
        assert_eq!(plain.populate_requested(), 4096 + AHEAD);
        p.set_large_rounds(true);
        assert!(!p.zeroes(&a));
        p.after_write(&b, 4096);
        assert_eq!(b.populate_requested(), 4096 + AHEAD);
        p.set_large_rounds(false);
        assert!(p.zeroes(&b));
        assert!(!p.zeroes(&plain));
    }

    #[test]
    fn zeroing_ahead_never_overwrites_what_the_writer_wrote() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let size = 8u64 << 20;
        let log = file(dir.path(), "log", size, Allocation::Written);
        let (p, runner) = running();
        // Records of odd lengths, so that they straddle pages and the populator's steps, each
        // reserved and written through the file as a SYNC_FLUSH append is.
        let mut at = 0u64;
        let mut n = 0u32;
        while at + 400 <= size {
            let len = 97 + u64::from(n % 211);
            let record: Vec<u8> = (0..len).map(|i| (u64::from(n) + i) as u8 | 1).collect();
            log.ensure_writable(at, at + len).unwrap();
            p.after_write(&log, at + len);
            log.write_through(at, &record).unwrap();
            at += len;
            n += 1;
        }
        p.stop();
        runner.join().unwrap();
        let mut bytes = vec![0u8; size as usize];
        std::fs::File::open(dir.path().join("log"))
            .unwrap()
            .read_exact_at(&mut bytes, 0)
            .unwrap();
        let (mut pos, mut i) = (0usize, 0u32);
        while i < n {
            let len = 97 + (i % 211) as usize;
            let want: Vec<u8> = (0..len).map(|k| (i as usize + k) as u8 | 1).collect();
            assert_eq!(&bytes[pos..pos + len], &want[..], "record {i} at {pos}");
            pos += len;
            i += 1;
        }
        assert!(bytes[pos..].iter().all(|b| *b == 0));
    }

    #[test]
    fn a_newer_request_of_a_lane_replaces_the_older() {
        let dir = tempfile::tempdir().unwrap();
        let a = file(dir.path(), "a", 1 << 20, Allocation::Reserve);
        let b = file(dir.path(), "b", 1 << 20, Allocation::Reserve);
        let other = file(dir.path(), "c", 1 << 20, Allocation::Reserve);
        let p = Populator::default();
        p.after_queue_write(7, &a, CQ_AHEAD);
        p.after_queue_write(7, &b, CQ_AHEAD);
        p.after_queue_write(8, &other, CQ_AHEAD);
        let jobs = p.jobs.lock();
        assert_eq!(jobs.len(), 2);
        assert!(Arc::ptr_eq(&jobs[0].file, &b));
        assert!(Arc::ptr_eq(&jobs[1].file, &other));
    }
}
