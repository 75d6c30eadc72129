//! Background services: CommitLog flush (periodic, or group commit under SYNC_FLUSH), the
//! ConsumeQueue/index flush that advances the checkpoint, CommitLog and ConsumeQueue pages
//! populated ahead of their writers, delayed-message delivery, and retention with the disk
//! check.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::clock;
use crate::config::{BrokerRole, FlushDiskType};
use crate::error::{StoreError, StoreResult};
use crate::store::Inner;

struct Stop {
    flag: AtomicBool,
    lock: Mutex<()>,
    cv: Condvar,
}

impl Stop {
    /// Sleeps up to `d`; returns true once stopping.
    fn sleep(&self, d: Duration) -> bool {
        let deadline = Instant::now() + d;
        let mut g = self.lock.lock();
        while !self.flag.load(Ordering::Acquire) {
            if self.cv.wait_until(&mut g, deadline).timed_out() {
                break;
            }
        }
        self.flag.load(Ordering::Acquire)
    }
}

pub(crate) struct Services {
    stop: Arc<Stop>,
    inner: Arc<Inner>,
    threads: Vec<JoinHandle<()>>,
}

/// Rate limit for errors a service loop may repeat every turn.
const ERROR_LOG_INTERVAL: Duration = Duration::from_secs(10);

impl Services {
    /// Starts every service, or none: a thread that cannot be spawned (a thread limit) stops
    /// the ones already running and fails the open.
    pub(crate) fn start(inner: &Arc<Inner>) -> StoreResult<Self> {
        let mut services = Self {
            stop: Arc::new(Stop {
                flag: AtomicBool::new(false),
                lock: Mutex::new(()),
                cv: Condvar::new(),
            }),
            inner: inner.clone(),
            threads: Vec::new(),
        };
        match services.spawn_all() {
            Ok(()) => Ok(services),
            Err(e) => {
                services.stop();
                Err(e)
            }
        }
    }

    fn spawn(&mut self, name: &str, f: impl FnOnce() + Send + 'static) -> StoreResult<()> {
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(f)
            .map_err(|e| {
                StoreError::io(
                    "starting a service thread for",
                    &self.inner.config.store_path_root_dir,
                    e,
                )
            })?;
        self.threads.push(thread);
        Ok(())
    }

    fn spawn_all(&mut self) -> StoreResult<()> {
        let (stop, inner) = (self.stop.clone(), self.inner.clone());
        let inner = &inner;

        let (s, i) = (stop.clone(), inner.clone());
        self.spawn("pyrmq-flush-commitlog", move || {
            let mut last_error: Option<Instant> = None;
            loop {
                let result = match i.config.flush_disk_type {
                    FlushDiskType::Sync => {
                        if s.flag.load(Ordering::Acquire) {
                            break;
                        }
                        i.commit_log.group_commit_once(Duration::from_millis(10))
                    }
                    FlushDiskType::Async => {
                        if s.sleep(Duration::from_millis(i.config.flush_interval_commit_log_ms)) {
                            break;
                        }
                        i.flush_commit_log().map(|_| ())
                    }
                };
                if let Err(e) = result {
                    if last_error.is_none_or(|t| t.elapsed() > ERROR_LOG_INTERVAL) {
                        log::error!("commit log flush failed: {e}");
                        last_error = Some(Instant::now());
                    }
                    if s.sleep(Duration::from_millis(100)) {
                        break;
                    }
                }
            }
        })?;

        let (s, i) = (stop.clone(), inner.clone());
        self.spawn("pyrmq-flush-logics", move || {
            let mut last_error: Option<Instant> = None;
            while !s.sleep(Duration::from_millis(
                i.config.flush_interval_consume_queue_ms,
            )) {
                if let Err(e) = i.flush_all() {
                    if last_error.is_none_or(|t| t.elapsed() > ERROR_LOG_INTERVAL) {
                        log::error!("consume queue / checkpoint flush failed: {e}");
                        last_error = Some(Instant::now());
                    }
                }
            }
        })?;

        let i = inner.clone();
        self.spawn("pyrmq-populate", move || {
            i.commit_log.populator().run();
        })?;

        // A slave delivers nothing itself: its master's deliveries reach it as records.
        if inner.config.broker_role != BrokerRole::Slave {
            let (s, i) = (stop.clone(), inner.clone());
            self.spawn("pyrmq-schedule", move || {
                // As RocketMQ's ScheduleMessageService: look again within 100 ms, sooner when a
                // message falls due; after a failed put (a full disk), in 10 s.
                loop {
                    let now = clock::now_ms();
                    let pass = i.deliver_due(now);
                    let wait_ms = if pass.failed {
                        10_000
                    } else {
                        pass.next_due_ms
                            .map_or(100, |due| (due - now).clamp(1, 100))
                            as u64
                    };
                    if s.sleep(Duration::from_millis(wait_ms)) {
                        break;
                    }
                }
            })?;
        }

        let (s, i) = (stop.clone(), inner.clone());
        self.spawn("pyrmq-clean", move || {
            while !s.sleep(Duration::from_millis(i.config.clean_resource_interval_ms)) {
                i.update_disk_full();
                if let Err(e) = i.delete_expired_files(clock::now_ms(), false) {
                    log::error!("retention pass failed: {e}");
                }
            }
        })?;

        Ok(())
    }

    pub(crate) fn stop(self) {
        self.stop.flag.store(true, Ordering::Release);
        {
            let _g = self.stop.lock.lock();
            self.stop.cv.notify_all();
        }
        self.inner.commit_log.wake_flusher();
        self.inner.commit_log.populator().stop();
        // A log handler on one of these threads may close the store: that thread ends when
        // it returns, and joining it from itself would fail.
        let me = std::thread::current().id();
        for t in self.threads {
            if t.thread().id() != me && t.join().is_err() {
                log::error!("a store service thread panicked");
            }
        }
    }
}
