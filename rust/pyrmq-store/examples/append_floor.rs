//! The 128 B `put_batch` append against its floor on this machine, in one process.
//!
//! `cargo run --release -p pyrmq-store --example append_floor [rounds] [body bytes]`
//!
//! The floor does only what a stored record needs: the body CRC, the record written into a
//! mapped CommitLog file whose pages a second thread populates ahead, a 20-byte queue unit, and
//! a group CRC per batch of 32. The store round appends the same records through
//! `MessageStore::put` (message index off, as in `benches/report.py`). Rounds alternate, each
//! writes 256 MiB after a page-cache warm-up, and each line gives msgs/s and the writer
//! thread's CPU (user + system) per message.

// A command-line measurement: printing its results is its job.
#![allow(clippy::print_stdout)]

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use pyrmq_store::message::{self, MessageInput};
use pyrmq_store::{MessageStore, StoreConfig};

const ROUND_BYTES: usize = 256 << 20;
const WARM_BYTES: usize = 512 << 20;
const BATCH: usize = 32;
const AHEAD: usize = 32 << 20;
const STEP: usize = 64 << 10;
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// A shared writable mapping of a new file of `len` bytes in `dir`.
struct Mapped {
    ptr: *mut u8,
    len: usize,
    _file: std::fs::File,
}

impl Mapped {
    fn new(dir: &std::path::Path, name: &str, len: usize) -> Self {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join(name))
            .expect("create mapped file");
        file.set_len(len as u64).expect("size mapped file");
        // SAFETY: a fresh shared mapping of our own file; checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert!(ptr != libc::MAP_FAILED, "mmap failed");
        Self {
            ptr: ptr.cast(),
            len,
            _file: file,
        }
    }

    fn populate(&self, from: usize, to: usize) {
        // SAFETY: the range lies in the mapping; populating changes no byte.
        unsafe { libc::madvise(self.ptr.add(from).cast(), to - from, MADV_POPULATE_WRITE) };
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is ours for its whole length while `self` lives.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// As the benchmarks do: dirty and free a throwaway file so appends reuse warm pages.
fn warm_page_cache(dir: &std::path::Path) {
    let mut m = Mapped::new(dir, "warm", WARM_BYTES);
    for b in m.bytes().iter_mut().step_by(4096) {
        *b = 1;
    }
    drop(m);
    std::fs::remove_file(dir.join("warm")).expect("remove warm-up file");
}

/// The writer thread's CPU time, user and system, in seconds.
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes into a timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

struct Round {
    msgs_per_s: f64,
    cpu_ns: f64,
}

fn floor_round(dir: &std::path::Path, body: &[u8], props: &[u8]) -> Round {
    let mut log = Mapped::new(dir, "log", ROUND_BYTES + (16 << 20));
    let mut cq = Mapped::new(dir, "cq", 64 << 20);
    cq.populate(0, cq.len);
    let log_addr = log.ptr as usize;
    let log_len = log.len;
    let written = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let populator = {
        let (written, stop) = (written.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut at = 0;
            while !stop.load(Ordering::Relaxed) {
                if at < log_len && at < written.load(Ordering::Relaxed) + AHEAD {
                    let to = (at + STEP).min(log_len);
                    // SAFETY: the mapping outlives this thread, which is joined before the drop.
                    unsafe {
                        libc::madvise(
                            (log_addr + at) as *mut libc::c_void,
                            to - at,
                            MADV_POPULATE_WRITE,
                        );
                    }
                    at = to;
                } else {
                    std::thread::sleep(std::time::Duration::from_micros(50));
                }
            }
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(20));
    let topic = b"BenchTopic";
    let fixed = message::FIXED_LEN_V4;
    let rec = fixed + body.len() + 1 + topic.len() + 2 + props.len();
    let mut head = vec![0u8; fixed];
    head[4..8].copy_from_slice(&message::MESSAGE_MAGIC_CODE.to_be_bytes());
    let mut tail = vec![topic.len() as u8];
    tail.extend_from_slice(topic);
    tail.extend_from_slice(&(props.len() as u16).to_be_bytes());
    tail.extend_from_slice(props);
    let crc = message::BodyCrc::new();
    let (out, units) = (log.bytes(), cq.bytes());
    let (mut pos, mut unit, mut n) = (0usize, 0usize, 0u64);
    let (t0, c0) = (Instant::now(), thread_cpu_s());
    while pos + rec * BATCH + 20 <= ROUND_BYTES {
        let start = pos;
        for _ in 0..BATCH {
            let r = &mut out[pos..pos + rec];
            r[..fixed].copy_from_slice(&head);
            r[0..4].copy_from_slice(&(rec as u32).to_be_bytes());
            r[8..12].copy_from_slice(&crc.of(body).to_be_bytes());
            r[20..28].copy_from_slice(&n.to_be_bytes());
            r[28..36].copy_from_slice(&(pos as u64).to_be_bytes());
            r[fixed - 4..fixed].copy_from_slice(&(body.len() as u32).to_be_bytes());
            r[fixed..fixed + body.len()].copy_from_slice(body);
            r[fixed + body.len()..].copy_from_slice(&tail);
            let u = &mut units[unit..unit + 20];
            u[..8].copy_from_slice(&(pos as u64).to_be_bytes());
            u[8..12].copy_from_slice(&(rec as u32).to_be_bytes());
            u[12..].copy_from_slice(&n.to_be_bytes());
            unit += 20;
            pos += rec;
            n += 1;
        }
        let group = crc32fast::hash(&out[start..pos]);
        out[pos..pos + 4].copy_from_slice(&group.to_be_bytes());
        pos += 20;
        written.store(pos, Ordering::Relaxed);
    }
    let (secs, cpu) = (t0.elapsed().as_secs_f64(), thread_cpu_s() - c0);
    stop.store(true, Ordering::Relaxed);
    populator.join().expect("populator thread");
    for name in ["log", "cq"] {
        std::fs::remove_file(dir.join(name)).expect("remove floor file");
    }
    Round {
        msgs_per_s: n as f64 / secs,
        cpu_ns: cpu / n as f64 * 1e9,
    }
}

fn store_round(store: &MessageStore, msgs: &[MessageInput<'_>], record_bytes: usize) -> Round {
    let ops = ROUND_BYTES / (record_bytes * BATCH);
    let (t0, c0) = (Instant::now(), thread_cpu_s());
    for _ in 0..ops {
        std::hint::black_box(store.put(msgs, false).expect("put"));
    }
    let (secs, cpu) = (t0.elapsed().as_secs_f64(), thread_cpu_s() - c0);
    let n = (ops * BATCH) as f64;
    Round {
        msgs_per_s: n / secs,
        cpu_ns: cpu / n * 1e9,
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(5, |a| a.parse().expect("rounds"));
    let body_len: usize = args.next().map_or(128, |a| a.parse().expect("body bytes"));
    let body: Vec<u8> = (0..body_len).map(|i| (i * 7 + 3) as u8).collect();
    let props = message::encode_properties([("TAGS", "TagA")]);
    let scratch = tempfile::tempdir().expect("scratch dir");
    let store = MessageStore::open(StoreConfig {
        store_path_root_dir: scratch.path().join("store"),
        mapped_file_size_commit_log: 128 << 20,
        mapped_file_size_consume_queue: 6_000_000,
        message_index_enable: false,
        ..StoreConfig::default()
    })
    .expect("open store");
    let msgs: Vec<MessageInput<'_>> = (0..BATCH)
        .map(|_| MessageInput {
            topic: "BenchTopic",
            queue_id: 0,
            flag: 0,
            body: &body,
            properties: &props,
            sys_flag: 0,
            born_timestamp_ms: 1,
            born_host: "127.0.0.1:1".parse().expect("address"),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
        })
        .collect();
    let record_bytes = message::record_len(body.len(), "BenchTopic".len(), props.len(), 0);
    let (mut floor, mut put) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        warm_page_cache(scratch.path());
        let f = floor_round(scratch.path(), &body, &props);
        warm_page_cache(scratch.path());
        let p = store_round(&store, &msgs, record_bytes);
        println!(
            "round {round}: floor {:>6.2}M msgs/s ({:5.1} ns CPU/msg) | store put {:>6.2}M msgs/s \
             ({:5.1} ns CPU/msg)",
            f.msgs_per_s / 1e6,
            f.cpu_ns,
            p.msgs_per_s / 1e6,
            p.cpu_ns
        );
        floor.push(f.msgs_per_s);
        put.push(p.msgs_per_s);
    }
    let best = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    println!(
        "best: floor {:.2}M, store {:.2}M msgs/s: the store at {:.2}x its floor",
        best(&floor) / 1e6,
        best(&put) / 1e6,
        best(&put) / best(&floor)
    );
    store.close().expect("close store");
}
