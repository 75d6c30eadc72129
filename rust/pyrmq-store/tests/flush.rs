//! `put_nowait` under SYNC_FLUSH: the append returns before its fsync, and the flushed eventfd
//! reports the flush that covers it, whether the group-commit thread or an explicit flush runs it.

mod common;

use std::time::{Duration, Instant};

use common::{config, plain_inputs};
use pyrmq_store::{FlushDiskType, MessageStore, PutStatus};

fn readable(fd: i32, timeout: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: polls one live pollfd for the given time.
    let n = unsafe { libc::poll(&raw mut pfd, 1, timeout.as_millis() as i32) };
    n == 1 && pfd.revents & libc::POLLIN != 0
}

#[test]
fn a_nowait_put_is_visible_at_once_and_signalled_when_an_explicit_flush_covers_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.flush_disk_type = FlushDiskType::Sync;
    let store = MessageStore::open(cfg).unwrap();
    let fd = store.flushed_fd();
    let bodies = vec![vec![7u8; 300], vec![8u8; 40]];
    let out = store
        .put_nowait(&plain_inputs("TopicF", &bodies, 1), false)
        .unwrap();
    assert_eq!(out.status, PutStatus::PutOk);
    assert_eq!(out.end_offset, store.max_phy_offset());
    assert!(store.flushed_phy_offset() < out.end_offset);
    assert_eq!(store.max_offset("TopicF", 0), 2);
    assert!(!readable(fd, Duration::ZERO));

    store.flush().unwrap();
    assert!(readable(fd, Duration::from_secs(5)));
    assert!(store.drain_flushed() >= out.end_offset);
    assert!(!readable(fd, Duration::ZERO));
}

#[test]
fn the_group_commit_thread_covers_nowait_puts_and_signals_until_all_are_durable() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.flush_disk_type = FlushDiskType::Sync;
    cfg.background_services = true;
    let store = MessageStore::open(cfg).unwrap();
    let fd = store.flushed_fd();
    let mut ends = Vec::new();
    for i in 0..200 {
        let bodies = vec![vec![i as u8; 100 + i]];
        let out = store
            .put_nowait(&plain_inputs("TopicF", &bodies, 1), false)
            .unwrap();
        ends.push(out.end_offset);
    }
    let last = *ends.last().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut flushed = 0;
    while flushed < last {
        assert!(Instant::now() < deadline, "flushed {flushed} of {last}");
        if readable(fd, Duration::from_secs(1)) {
            flushed = store.drain_flushed();
        }
    }
    assert!(store.flushed_phy_offset() >= last);
    assert!(ends.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn a_waiting_sync_put_returns_once_any_flush_covers_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.flush_disk_type = FlushDiskType::Sync;
    // No group-commit thread: only the explicit flush below can make the put durable.
    cfg.sync_flush_timeout_ms = 60_000;
    let store = MessageStore::open(cfg).unwrap();
    std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            let bodies = vec![vec![1u8; 64]];
            store
                .put(&plain_inputs("TopicW", &bodies, 1), false)
                .unwrap()
        });
        while store.max_offset("TopicW", 0) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        store.flush().unwrap();
        // Released by the flush: after its timeout the put would say FLUSH_DISK_TIMEOUT.
        let out = waiting.join().unwrap();
        assert_eq!(out.status, PutStatus::PutOk);
        assert!(store.flushed_phy_offset() >= out.end_offset);
    });
}
