//! Index files on a full file system: a private tmpfs, mounted in a user and mount namespace
//! by a child run of the same test. Entries get their blocks a chunk at a time, so the chunk
//! that cannot be had must fail the index's put (never kill the process with SIGBUS), and the
//! store must go on storing, and index the records again once there is room.

mod common;

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{born, config, read_all};
use pyrmq_store::index::IndexService;
use pyrmq_store::mapped_file::RESERVE_CHUNK;
use pyrmq_store::message::{self, MessageInput};
use pyrmq_store::{MessageStore, StoreConfig, StoreError};

const MOUNT_ENV: &str = "PYRMQ_TEST_TMPFS";
const SLOTS: u32 = 1000;
/// 20 MB files: larger than the file systems they are made on.
const ENTRIES: u32 = 1_000_000;
/// Entries that fit below the end of the first chunk (header, slots, then 20-byte entries
/// numbered from 1).
const FIRST_CHUNK_ENTRIES: u64 = (RESERVE_CHUNK - 40 - 4 * SLOTS as u64) / 20 - 1;

/// In the child: the mounted tmpfs. In the parent: runs the test `name` as that child on a
/// tmpfs of `size` and returns `None` once it passed, or at once where no tmpfs can be mounted.
fn on_tmpfs(name: &str, size: &str) -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(MOUNT_ENV) {
        return Some(dir.into());
    }
    let mnt = tempfile::tempdir().unwrap();
    let ns = ["--user", "--map-root-user", "--mount", "sh", "-c"];
    let probe = Command::new("unshare")
        .args(ns)
        .arg("mount -t tmpfs -o size=64k none \"$1\"")
        .args(["sh", &mnt.path().to_string_lossy()])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: cannot mount a private tmpfs here");
        return None;
    }
    let script = "mount -t tmpfs -o size=\"$1\" none \"$2\" && \
                  exec env PYRMQ_TEST_TMPFS=\"$2\" \"$3\" --exact \"$4\" --nocapture";
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("unshare")
        .args(ns)
        .arg(script)
        .arg("sh")
        .arg(size)
        .arg(mnt.path())
        .arg(exe)
        .arg(name)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "child run {}:\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    None
}

/// Takes all but `keep` bytes of the file system holding `dir` with one file.
fn fill_leaving(dir: &Path, keep: u64) -> PathBuf {
    let path = dir.join("filler");
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a plain C struct, for which all zeros is a value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs fills the struct it is given.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &raw mut st) }, 0);
    let free = st.f_bavail * st.f_frsize;
    assert!(free > keep, "{free} free");
    let f = std::fs::File::create(&path).unwrap();
    // SAFETY: plain syscall on an open descriptor.
    let r = unsafe {
        libc::fallocate(
            std::os::fd::AsRawFd::as_raw_fd(&f),
            0,
            0,
            (free - keep) as libc::off_t,
        )
    };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    path
}

fn put_key(index: &IndexService, i: u64) -> Result<(), StoreError> {
    let key = format!("T#k{i}");
    index.put([key.as_str()], i as i64 * 100, 1_000 + i as i64, || 1)
}

fn found(index: &IndexService, i: u64) -> bool {
    let (phys, _) = index.query(&format!("T#k{i}"), 0, i64::MAX, 64);
    phys.contains(&(i as i64 * 100))
}

#[test]
fn a_chunk_the_disk_cannot_give_fails_the_index_put_until_there_is_room() {
    let Some(mnt) = on_tmpfs(
        "a_chunk_the_disk_cannot_give_fails_the_index_put_until_there_is_room",
        "8m",
    ) else {
        return;
    };
    let dir = mnt.join("index");
    let index = IndexService::load(&dir, SLOTS, ENTRIES).unwrap();
    for i in 0..FIRST_CHUNK_ENTRIES {
        put_key(&index, i).unwrap();
    }
    let filler = fill_leaving(&mnt, RESERVE_CHUNK / 2);
    // The next entry needs the second chunk; the failure writes nothing, every time.
    for _ in 0..3 {
        let err = put_key(&index, FIRST_CHUNK_ENTRIES).unwrap_err();
        assert!(matches!(err, StoreError::DiskFull(_)), "{err}");
        assert!(!found(&index, FIRST_CHUNK_ENTRIES));
        assert_eq!(
            index.last_indexed_phy(),
            Some((FIRST_CHUNK_ENTRIES as i64 - 1) * 100)
        );
    }
    assert!((0..FIRST_CHUNK_ENTRIES).all(|i| found(&index, i)));
    index.flush().unwrap();

    std::fs::remove_file(filler).unwrap();
    let n = FIRST_CHUNK_ENTRIES + 1000;
    for i in FIRST_CHUNK_ENTRIES..n {
        put_key(&index, i).unwrap();
    }
    drop(index);
    let index = IndexService::load(&dir, SLOTS, ENTRIES).unwrap();
    assert!((0..n).all(|i| found(&index, i)));
}

fn store_config(root: &Path) -> StoreConfig {
    StoreConfig {
        mapped_file_size_commit_log: 4 << 20,
        mapped_file_size_consume_queue: 20 * 100_000,
        max_hash_slot_num: SLOTS,
        max_index_num: ENTRIES,
        ..config(root)
    }
}

fn put_keyed(store: &MessageStore, i: u64) {
    let props = message::encode_properties([("KEYS", format!("key-{i}").as_str())]);
    let body = format!("body-{i}");
    let input = MessageInput {
        topic: "TopicIdx",
        queue_id: 0,
        flag: 0,
        body: body.as_bytes(),
        properties: &props,
        sys_flag: 0,
        born_timestamp_ms: 1_700_000_000_000,
        born_host: born(),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
    };
    store.put(&[input], false).expect("put");
}

fn indexed(store: &MessageStore, i: u64) -> bool {
    let got = store
        .query_message("TopicIdx", &format!("key-{i}"), 4, 0, i64::MAX)
        .unwrap();
    got.len() == 1
}

#[test]
fn a_store_whose_index_cannot_grow_stores_on_and_indexes_again_at_the_next_open() {
    let Some(mnt) = on_tmpfs(
        "a_store_whose_index_cannot_grow_stores_on_and_indexes_again_at_the_next_open",
        "48m",
    ) else {
        return;
    };
    let root = mnt.join("store");
    let store = MessageStore::open(store_config(&root)).unwrap();
    let start = FIRST_CHUNK_ENTRIES - 200;
    for i in 0..start {
        put_keyed(&store, i);
    }
    // Less than the index's next chunk, more than the log and queue need meanwhile.
    let filler = fill_leaving(&mnt, RESERVE_CHUNK * 3 / 4);
    let mut i = start;
    while indexed(&store, i.saturating_sub(1)) {
        assert!(i < start + 1000, "the index never ran out of room");
        put_keyed(&store, i);
        i += 1;
    }
    // Every put went through; the first one the index could not take is its chunk's first.
    let unindexed = i - 1;
    assert_eq!(unindexed, FIRST_CHUNK_ENTRIES);
    for j in i..i + 5 {
        put_keyed(&store, j);
        assert!(!indexed(&store, j));
    }
    let n = i + 5;
    assert_eq!(read_all(&store, "TopicIdx", 0).len() as u64, n);
    store.close().unwrap();
    drop(store);

    std::fs::remove_file(filler).unwrap();
    let store = MessageStore::open(store_config(&root)).unwrap();
    assert!((start..n).all(|j| indexed(&store, j)));
    assert!((0..start).step_by(97).all(|j| indexed(&store, j)));
    put_keyed(&store, n);
    assert!(indexed(&store, n));
    let index_dir = root.join("index");
    let used: u64 = std::fs::read_dir(&index_dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().blocks() * 512)
        .sum();
    assert!(used <= 2 * RESERVE_CHUNK + 64 * 1024, "{used}");
}
