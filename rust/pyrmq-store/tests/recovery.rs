//! Recovery scenarios at the file level: torn tails at every byte, corruption in place,
//! roll-over, and a lost checkpoint.

mod common;

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};

use common::{body, config, copy_dir, plain_inputs, props, put_one, read_all, segment_path};
use pyrmq_store::message;
use pyrmq_store::{FlushDiskType, GetRequest, MessageStore, PutStatus, StoreConfig};

/// Writes `n` small single-message groups to one queue and closes the store. Returns each
/// group's (start, end) CommitLog offsets.
fn template(root: &std::path::Path, n: usize) -> Vec<(u64, u64)> {
    let store = MessageStore::open(config(root)).unwrap();
    let mut groups = Vec::new();
    for i in 0..n {
        let (_, phy, end) = put_one(&store, "TopicTorn", 0, &body(i, 10 + i % 17), &props(i));
        groups.push((phy, end));
    }
    store.close().unwrap();
    groups
}

fn damage(root: &std::path::Path, from: u64, to: u64, garble: bool, seed: u64) {
    let mut f = OpenOptions::new()
        .write(true)
        .open(segment_path(root, 0))
        .unwrap();
    f.seek(SeekFrom::Start(from)).unwrap();
    let len = (to - from) as usize;
    let bytes: Vec<u8> = if garble {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                // xorshift: cheap deterministic noise, never all zero.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x as u8) | 1
            })
            .collect()
    } else {
        vec![0u8; len]
    };
    f.write_all(&bytes).unwrap();
}

#[test]
fn torn_tail_at_every_byte_keeps_exactly_the_complete_prefix() {
    let base = tempfile::tempdir().unwrap();
    let tpl = base.path().join("template");
    let groups = template(&tpl, 12);
    let data_end = groups.last().unwrap().1;
    let first_damaged_group = groups.len() - 3;
    let from = groups[first_damaged_group].0;
    let original = std::fs::read(segment_path(&tpl, 0)).unwrap();
    for garble in [false, true] {
        for p in from..data_end {
            let dir = base.path().join(format!("case-{garble}-{p}"));
            copy_dir(&tpl, &dir);
            // As after a crash before any checkpoint covered these groups: abort marker present,
            // no checkpoint.
            std::fs::write(dir.join("abort"), b"").unwrap();
            std::fs::remove_file(dir.join("checkpoint")).unwrap();
            damage(&dir, p, data_end, garble, p);
            // Zeroing changes nothing where a byte was zero already: the damage starts at the
            // first byte it really changed. (Garbling sets bit 0 of every byte, so a byte
            // already equal to its garbled value is a real possibility too.)
            let after = std::fs::read(segment_path(&dir, 0)).unwrap();
            let changed = (p..data_end)
                .find(|q| after[*q as usize] != original[*q as usize])
                .unwrap_or(data_end);
            let kept: Vec<_> = groups.iter().filter(|(_, end)| *end <= changed).collect();
            let store = MessageStore::open(config(&dir)).unwrap();
            assert_eq!(
                store.max_phy_offset(),
                kept.last().unwrap().1,
                "p={p} garble={garble}"
            );
            assert_eq!(
                store.max_offset("TopicTorn", 0),
                kept.len() as u64,
                "p={p} garble={garble}"
            );
            let bodies = read_all(&store, "TopicTorn", 0);
            let expected: Vec<Vec<u8>> = (0..kept.len()).map(|i| body(i, 10 + i % 17)).collect();
            assert_eq!(bodies, expected, "p={p} garble={garble}");
            // The store accepts writes after recovery, at the recovered end.
            let (q, phy, _) = put_one(&store, "TopicTorn", 0, b"after", b"");
            assert_eq!((q, phy), (kept.len() as u64, kept.last().unwrap().1));
            store.close().unwrap();
            drop(store);
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}

#[test]
fn a_long_torn_tail_is_cleared_and_counted_whole_under_either_flush() {
    for flush in [FlushDiskType::Async, FlushDiskType::Sync] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = StoreConfig {
            flush_disk_type: flush,
            // The group-commit thread, which SYNC_FLUSH puts wait for.
            background_services: flush == FlushDiskType::Sync,
            mapped_file_size_commit_log: 1 << 20,
            ..config(dir.path())
        };
        let store = MessageStore::open(cfg.clone()).unwrap();
        let mut ends = Vec::new();
        while ends.last().is_none_or(|e| *e < 200 * 1024) {
            let i = ends.len();
            ends.push(put_one(&store, "TopicTorn", 0, &body(i, 900), &props(i)).2);
        }
        store.close().unwrap();
        drop(store);
        // Garbage well past one reservation chunk (64 KiB) beyond the last intact group.
        let kept = ends.iter().filter(|e| **e <= 40 * 1024).count();
        let (from, to) = (ends[kept - 1], *ends.last().unwrap());
        std::fs::write(dir.path().join("abort"), b"").unwrap();
        std::fs::remove_file(dir.path().join("checkpoint")).unwrap();
        damage(dir.path(), from, to, true, 7);

        let store = MessageStore::open(cfg).unwrap();
        assert_eq!(store.max_phy_offset(), from, "{flush:?}");
        assert_eq!(store.recovery.truncated_bytes, to - from, "{flush:?}");
        let log = std::fs::read(segment_path(dir.path(), 0)).unwrap();
        assert!(log[from as usize..].iter().all(|b| *b == 0), "{flush:?}");
        assert_eq!(store.max_offset("TopicTorn", 0), kept as u64);
        let (q, phy, _) = put_one(&store, "TopicTorn", 0, b"after", b"");
        assert_eq!((q, phy), (kept as u64, from));
    }
}

#[test]
fn a_torn_batch_is_dropped_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    put_one(&store, "TopicBatch", 0, b"before", b"");
    let bodies: Vec<Vec<u8>> = (0..5).map(|i| body(i, 40)).collect();
    let inputs = plain_inputs("TopicBatch", &bodies, 1);
    let out = store.put(&inputs, false).unwrap();
    let start = out.entries[0].phy_offset as u64;
    let end = start + out.wrote_bytes;
    store.close().unwrap();
    drop(store);
    std::fs::write(dir.path().join("abort"), b"").unwrap();
    std::fs::remove_file(dir.path().join("checkpoint")).unwrap();
    // Tear the batch inside its third record's properties: the first two records are intact
    // but the group's fence no longer verifies.
    damage(
        dir.path(),
        out.entries[2].phy_offset as u64 + 50,
        end,
        false,
        0,
    );
    let store = MessageStore::open(config(dir.path())).unwrap();
    assert_eq!(store.max_offset("TopicBatch", 0), 1);
    assert_eq!(store.max_phy_offset(), start);
    assert_eq!(read_all(&store, "TopicBatch", 0), vec![b"before".to_vec()]);
}

#[test]
fn a_flipped_body_byte_mid_log_is_reported_and_not_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let groups = template(dir.path(), 20);
    // Flip a body byte of record 5 (body starts 88 bytes into the record).
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(segment_path(dir.path(), 0))
        .unwrap();
    f.seek(SeekFrom::Start(groups[5].0 + 90)).unwrap();
    f.write_all(&[0xEE]).unwrap();
    drop(f);
    // Recovery must scan across the damage: no checkpoint, abnormal stop.
    std::fs::remove_file(dir.path().join("checkpoint")).unwrap();
    std::fs::write(dir.path().join("abort"), b"").unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    assert_eq!(store.max_offset("TopicTorn", 0), 20);
    assert_eq!(store.max_phy_offset(), groups[19].1);
    assert_eq!(
        store.recovery.corrupt_ranges,
        vec![(groups[5].0, groups[6].0)]
    );
    let got = store
        .get(&GetRequest {
            topic: "TopicTorn",
            queue_id: 0,
            queue_offset: 0,
            max_count: 32,
            max_bytes: None,
            tags_codes: None,
        })
        .unwrap();
    assert_eq!(got.corrupt_offsets, vec![5]);
    assert_eq!(got.records.len(), 19);
    assert!(store.look_message_by_offset(groups[5].0).is_err());
    assert!(store.look_message_by_offset(groups[6].0).unwrap().is_some());
}

#[test]
fn a_flipped_size_field_mid_log_resyncs_on_the_next_fence() {
    let dir = tempfile::tempdir().unwrap();
    let groups = template(dir.path(), 10);
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(segment_path(dir.path(), 0))
        .unwrap();
    f.seek(SeekFrom::Start(groups[3].0 + 1)).unwrap();
    f.write_all(&[0x7F]).unwrap();
    drop(f);
    std::fs::remove_file(dir.path().join("checkpoint")).unwrap();
    std::fs::write(dir.path().join("abort"), b"").unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    assert_eq!(store.max_phy_offset(), groups[9].1);
    assert_eq!(store.max_offset("TopicTorn", 0), 10);
    assert_eq!(
        store.recovery.corrupt_ranges,
        vec![(groups[3].0, groups[4].0)]
    );
}

#[test]
fn lost_consume_queues_are_rebuilt_from_the_commit_log() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    for i in 0..300 {
        put_one(
            &store,
            &format!("T{}", i % 3),
            (i % 2) as i32,
            &body(i, 100),
            &props(i),
        );
    }
    store.close().unwrap();
    drop(store);
    std::fs::remove_dir_all(dir.path().join("consumequeue")).unwrap();
    std::fs::remove_file(dir.path().join("checkpoint")).unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    for t in 0..3 {
        for q in 0..2 {
            let want: Vec<Vec<u8>> = (0..300)
                .filter(|i| i % 3 == t && i % 2 == q)
                .map(|i| body(i, 100))
                .collect();
            assert_eq!(read_all(&store, &format!("T{t}"), q as i32), want);
        }
    }
    // The key index was rebuilt too.
    assert_eq!(
        store
            .query_message("T1", "key-299", 10, 0, i64::MAX)
            .unwrap()
            .len(),
        0
    );
    assert_eq!(
        store
            .query_message("T1", "key-298", 10, 0, i64::MAX)
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn roll_over_closes_segments_with_a_blank_and_reads_span_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    let mut ends = Vec::new();
    for i in 0..200 {
        ends.push(put_one(&store, "TopicRoll", 0, &body(i, 1500), b"").1);
    }
    let size = 64 * 1024u64;
    let writing = store.max_phy_offset() / size;
    assert!(
        writing >= 3,
        "expected several segments, got {}",
        writing + 1
    );
    // Every segment before the writer's ends in a blank record that fills it exactly.
    for s in 0..writing {
        let data = std::fs::read(segment_path(dir.path(), s * size)).unwrap();
        let mut pos = 0usize;
        loop {
            let total = u32::from_be_bytes(data[pos..pos + 4].try_into().unwrap()) as usize;
            let magic = u32::from_be_bytes(data[pos + 4..pos + 8].try_into().unwrap());
            if magic == message::BLANK_MAGIC_CODE {
                assert_eq!(pos + total, data.len());
                break;
            }
            assert!(total > 0, "segment {s} has no record at {pos}");
            pos += total;
        }
    }
    let expected: Vec<Vec<u8>> = (0..200).map(|i| body(i, 1500)).collect();
    assert_eq!(read_all(&store, "TopicRoll", 0), expected);
    store.close().unwrap();
    drop(store);
    let store = MessageStore::open(config(dir.path())).unwrap();
    assert_eq!(read_all(&store, "TopicRoll", 0), expected);
}

#[test]
fn sync_flush_groups_written_through_the_file_roll_over_read_back_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = StoreConfig {
        flush_disk_type: FlushDiskType::Sync,
        background_services: true,
        ..config(dir.path())
    };
    let store = MessageStore::open(cfg.clone()).unwrap();
    let mut expected: Vec<Vec<u8>> = Vec::new();
    let mut i = 0;
    while i < 240 {
        // Singles and batches alike, so groups of every size meet the segment ends.
        let n = 1 + i % 5;
        let bodies: Vec<Vec<u8>> = (i..i + n).map(|j| body(j, 700 + j * 13 % 900)).collect();
        let inputs = plain_inputs("TopicSync", &bodies, 1_700_000_000_000);
        let out = store.put(&inputs, false).unwrap();
        assert_eq!(out.status, PutStatus::PutOk);
        assert!(store.flushed_phy_offset() >= store.max_phy_offset());
        expected.extend(bodies);
        i += n;
    }
    let segments = std::fs::read_dir(dir.path().join("commitlog"))
        .unwrap()
        .count();
    assert!(segments >= 3, "expected several segments, got {segments}");
    assert_eq!(read_all(&store, "TopicSync", 0), expected);
    store.close().unwrap();
    drop(store);

    // A full scan re-verifies every fence the staged writes sealed.
    std::fs::write(dir.path().join("checkpoint"), b"garbage").unwrap();
    std::fs::write(dir.path().join("abort"), b"").unwrap();
    let store = MessageStore::open(cfg).unwrap();
    assert_eq!(store.recovery.records, expected.len() as u64);
    assert!(store.recovery.corrupt_ranges.is_empty());
    assert_eq!(store.recovery.truncated_bytes, 0);
    assert_eq!(read_all(&store, "TopicSync", 0), expected);
}

#[test]
fn a_damaged_checkpoint_falls_back_to_a_full_scan() {
    let dir = tempfile::tempdir().unwrap();
    let groups = template(dir.path(), 30);
    std::fs::write(dir.path().join("checkpoint"), b"garbage").unwrap();
    std::fs::write(dir.path().join("abort"), b"").unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    assert_eq!(store.max_phy_offset(), groups[29].1);
    assert_eq!(store.recovery.records, 30);
    assert_eq!(read_all(&store, "TopicTorn", 0).len(), 30);
}

#[test]
fn retention_moves_min_offsets_and_old_reads_get_offset_too_small() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    for i in 0..200 {
        put_one(&store, "TopicOld", 0, &body(i, 1500), b"");
    }
    let far_future = pyrmq_store::clock::now_ms() + 1000 * 3_600_000;
    let deleted = store.delete_expired_files(far_future, true).unwrap();
    assert!(deleted >= 3);
    assert!(store.min_phy_offset() > 0);
    let min = store.min_offset("TopicOld", 0);
    assert!(min > 0);
    let got = store
        .get(&GetRequest {
            topic: "TopicOld",
            queue_id: 0,
            queue_offset: 0,
            max_count: 32,
            max_bytes: None,
            tags_codes: None,
        })
        .unwrap();
    assert_eq!(got.status, pyrmq_store::GetMessageStatus::OffsetTooSmall);
    assert_eq!(got.next_begin_offset, min);
    let rest = read_all(&store, "TopicOld", 0);
    assert_eq!(rest.len() as u64, 200 - min);
    assert_eq!(rest[0], body(min as usize, 1500));
    store.close().unwrap();
    drop(store);
    let store = MessageStore::open(config(dir.path())).unwrap();
    assert_eq!(store.min_offset("TopicOld", 0), min);
}

#[test]
fn a_queue_rebuilt_after_retention_keeps_its_offsets_at_later_opens() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    for i in 0..200 {
        put_one(&store, "TopicOld", 0, &body(i, 1500), b"");
    }
    let far_future = pyrmq_store::clock::now_ms() + 1000 * 3_600_000;
    assert!(store.delete_expired_files(far_future, true).unwrap() >= 3);
    let (min, max) = (
        store.min_offset("TopicOld", 0),
        store.max_offset("TopicOld", 0),
    );
    assert!(min > 0);
    store.close().unwrap();
    drop(store);
    std::fs::remove_dir_all(dir.path().join("consumequeue")).unwrap();

    // The rebuilt queue's first unit lies mid-file, with never-written units before it.
    let store = MessageStore::open(config(dir.path())).unwrap();
    assert_eq!(store.min_offset("TopicOld", 0), min);
    assert_eq!(store.max_offset("TopicOld", 0), max);
    // Another queue written since gives recovery an end to start from at the next open.
    put_one(&store, "TopicNew", 0, &body(0, 10), b"");
    store.close().unwrap();
    drop(store);

    for crashed in [false, true] {
        if crashed {
            std::fs::write(dir.path().join("abort"), b"").unwrap();
        }
        let store = MessageStore::open(config(dir.path())).unwrap();
        assert_eq!(store.min_offset("TopicOld", 0), min);
        assert_eq!(store.max_offset("TopicOld", 0), max);
        let rest = read_all(&store, "TopicOld", 0);
        assert_eq!(rest.len() as u64, max - min);
        assert_eq!(rest[0], body(min as usize, 1500));
        store.close().unwrap();
    }
    let store = MessageStore::open(config(dir.path())).unwrap();
    let (queue_offset, _, _) = put_one(&store, "TopicOld", 0, &body(200, 10), b"");
    assert_eq!(queue_offset, max, "queue offsets go on, never back");
}

/// Reopens a copy of the live store as after a crash: abort marker present, files as the
/// page cache holds them.
fn crashed_copy(live: &std::path::Path, to: &std::path::Path) -> MessageStore {
    copy_dir(live, to);
    std::fs::write(to.join("abort"), b"").unwrap();
    MessageStore::open(config(to)).unwrap()
}

#[test]
fn a_segment_prepared_before_the_roll_is_dropped_by_recovery_and_the_log_goes_on() {
    let base = tempfile::tempdir().unwrap();
    let live = base.path().join("live");
    let store = MessageStore::open(config(&live)).unwrap();
    let size = 64 * 1024u64;
    let expected: Vec<Vec<u8>> = (0..20).map(|i| body(i, 1500)).collect();
    for b in &expected {
        put_one(&store, "TopicNext", 0, b, b"");
    }
    let end = store.max_phy_offset();
    assert!(end < size, "still in the first segment");
    assert!(
        segment_path(&live, size).exists(),
        "the next segment is prepared"
    );

    for reopened in [crashed_copy(&live, &base.path().join("crashed")), {
        store.close().unwrap();
        MessageStore::open(config(&live)).unwrap()
    }] {
        assert_eq!(reopened.max_phy_offset(), end);
        assert_eq!(reopened.recovery.truncated_bytes, 0);
        assert_eq!(read_all(&reopened, "TopicNext", 0), expected);
        // Appends go on from the recovered end and roll into the next segment as usual.
        let more: Vec<Vec<u8>> = (20..80).map(|i| body(i, 1500)).collect();
        let (_, first_phy, _) = put_one(&reopened, "TopicNext", 0, &more[0], b"");
        assert_eq!(first_phy, end);
        for b in &more[1..] {
            put_one(&reopened, "TopicNext", 0, b, b"");
        }
        assert!(reopened.max_phy_offset() > size);
        let mut all = expected.clone();
        all.extend(more);
        assert_eq!(read_all(&reopened, "TopicNext", 0), all);
    }
}

#[test]
fn a_consume_queue_file_prepared_ahead_keeps_the_queue_end_on_reopen() {
    let base = tempfile::tempdir().unwrap();
    let live = base.path().join("live");
    // Files of 8,192 units, above the populator's window, so a busy queue's next file is
    // prepared before the writer needs it.
    let cfg = |root: &std::path::Path| StoreConfig {
        mapped_file_size_consume_queue: 20 * 8192,
        mapped_file_size_commit_log: 1 << 20,
        ..config(root)
    };
    let store = MessageStore::open(cfg(&live)).unwrap();
    let bodies: Vec<Vec<u8>> = (0..7000).map(|i| body(i, 8)).collect();
    for chunk in bodies.chunks(100) {
        store
            .put(&plain_inputs("TopicCq", chunk, 1_700_000_000_000), false)
            .unwrap();
    }
    let files = || {
        std::fs::read_dir(live.join("consumequeue").join("TopicCq").join("0"))
            .unwrap()
            .count()
    };
    assert_eq!(files(), 2, "the next queue file is prepared");

    let crashed = base.path().join("crashed");
    copy_dir(&live, &crashed);
    std::fs::write(crashed.join("abort"), b"").unwrap();
    store.close().unwrap();
    drop(store);
    for root in [crashed.as_path(), live.as_path()] {
        let reopened = MessageStore::open(cfg(root)).unwrap();
        assert_eq!(
            reopened.max_offset("TopicCq", 0),
            7000,
            "{}",
            root.display()
        );
        assert_eq!(read_all(&reopened, "TopicCq", 0), bodies);
        let out = reopened
            .put(
                &plain_inputs("TopicCq", &bodies[..1], 1_700_000_000_000),
                false,
            )
            .unwrap();
        assert_eq!(out.entries[0].queue_offset, 7000);
    }
}
