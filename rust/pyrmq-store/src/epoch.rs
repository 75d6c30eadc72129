//! A counter that threads sleep on until it moves: group commit's signal between appenders and
//! the group-commit thread.
//!
//! Waiters sleep on the counter's own futex word, so one `FUTEX_WAKE` releases all of them and
//! the kernel queues them in a batch. A condvar releases its waiters one at a time (parking_lot
//! hands each the mutex in turn, and each hand-over is a wake-up of its own); on a small VM
//! every such wake-up of a halted vCPU costs microseconds. Where wake-ups are cheap, the
//! appenders released together contend for the put lock instead, for no clear change either way
//! (`docs/performance.md`, SYNC_FLUSH). A signaller that finds no waiter makes no system call.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

#[derive(Default)]
pub struct Epoch {
    word: AtomicU32,
    waiters: AtomicU32,
}

impl Epoch {
    pub fn new() -> Self {
        Self::default()
    }

    /// Blocks until `done()` holds or `deadline` passes; returns `done()`'s last answer.
    /// Whoever makes `done()` true must [`Self::advance`] afterwards.
    pub fn wait_until(&self, deadline: Instant, mut done: impl FnMut() -> bool) -> bool {
        if done() {
            return true;
        }
        // Counted before the epoch is read: an `advance` that finds no waiter comes before this
        // in their total order, so the epoch read below already shows it.
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let result = loop {
            let seen = self.word.load(Ordering::SeqCst);
            if done() {
                break true;
            }
            let now = Instant::now();
            if now >= deadline {
                break false;
            }
            futex_wait(&self.word, seen, deadline - now);
        };
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        result
    }

    /// Moves the epoch and wakes every waiter.
    pub fn advance(&self) {
        self.word.fetch_add(1, Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            futex_wake_all(&self.word);
        }
    }
}

/// Sleeps while `word` holds `seen`, for at most `timeout`. Returns early on any wake-up,
/// signal or a changed word; callers recheck their condition.
fn futex_wait(word: &AtomicU32, seen: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(timeout.subsec_nanos()),
    };
    // SAFETY: the word lives as long as `self`; FUTEX_WAIT only reads it and the timespec.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            seen,
            &raw const ts,
        );
    }
}

fn futex_wake_all(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE touches no memory; it wakes sleepers queued on this address.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    #[test]
    fn a_met_condition_returns_at_once() {
        let epoch = Epoch::new();
        assert!(epoch.wait_until(Instant::now(), || true));
    }

    #[test]
    fn an_unmet_condition_times_out() {
        let epoch = Epoch::new();
        let began = Instant::now();
        assert!(!epoch.wait_until(began + Duration::from_millis(30), || false));
        assert!(began.elapsed() >= Duration::from_millis(30));
    }

    #[test]
    fn one_advance_releases_every_waiter() {
        let epoch = Arc::new(Epoch::new());
        let value = Arc::new(AtomicU64::new(0));
        let waiters: Vec<_> = (1..=8u64)
            .map(|want| {
                let (epoch, value) = (epoch.clone(), value.clone());
                std::thread::spawn(move || {
                    let deadline = Instant::now() + Duration::from_secs(10);
                    epoch.wait_until(deadline, || value.load(Ordering::SeqCst) >= want)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20));
        value.store(8, Ordering::SeqCst);
        epoch.advance();
        for w in waiters {
            assert!(w.join().unwrap());
        }
    }

    #[test]
    fn no_wake_up_is_lost() {
        // Two threads take turns moving one value, each sleeping until it is its turn: a
        // wake-up lost between a check and the sleep would stall a turn until its deadline.
        let epoch = Arc::new(Epoch::new());
        let value = Arc::new(AtomicU64::new(0));
        let turns = 20_000u64;
        let play = |parity: u64| {
            let (epoch, value) = (epoch.clone(), value.clone());
            std::thread::spawn(move || {
                for turn in (parity..turns).step_by(2) {
                    let deadline = Instant::now() + Duration::from_secs(5);
                    if !epoch.wait_until(deadline, || value.load(Ordering::SeqCst) == turn) {
                        return Some(turn);
                    }
                    value.store(turn + 1, Ordering::SeqCst);
                    epoch.advance();
                }
                None
            })
        };
        let (even, odd) = (play(0), play(1));
        assert_eq!(even.join().unwrap(), None);
        assert_eq!(odd.join().unwrap(), None);
        assert_eq!(value.load(Ordering::SeqCst), turns);
    }
}
