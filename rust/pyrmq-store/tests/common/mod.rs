#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use pyrmq_store::message::{self, MessageInput};
use pyrmq_store::{GetRequest, MessageStore, StoreConfig};

pub fn config(root: &Path) -> StoreConfig {
    StoreConfig {
        store_path_root_dir: root.to_owned(),
        mapped_file_size_commit_log: 64 * 1024,
        mapped_file_size_consume_queue: 20 * 256,
        max_hash_slot_num: 64,
        max_index_num: 1024,
        background_services: false,
        ..StoreConfig::default()
    }
}

pub fn born() -> SocketAddr {
    "192.168.0.7:4321".parse().unwrap()
}

/// Deterministic body for message `i`.
pub fn body(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| ((i * 131 + j * 7) % 251) as u8).collect()
}

pub fn props(i: usize) -> Vec<u8> {
    let tag = format!("Tag{}", i % 3);
    let key = format!("key-{i}");
    message::encode_properties([("TAGS", tag.as_str()), ("KEYS", key.as_str())])
}

/// Puts one message; returns (queue offset, phy offset, group end offset).
pub fn put_one(
    store: &MessageStore,
    topic: &str,
    queue_id: i32,
    body: &[u8],
    props: &[u8],
) -> (u64, u64, u64) {
    let input = MessageInput {
        topic,
        queue_id,
        flag: 0,
        body,
        properties: props,
        sys_flag: 0,
        born_timestamp_ms: 1_700_000_000_000,
        born_host: born(),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
    };
    let out = store.put(&[input], false).expect("put");
    let e = out.entries[0];
    (
        e.queue_offset as u64,
        e.phy_offset as u64,
        e.phy_offset as u64 + out.wrote_bytes,
    )
}

/// One plain message per body, all to `topic` queue 0, to put as one group.
pub fn plain_inputs<'a>(
    topic: &'a str,
    bodies: &'a [Vec<u8>],
    born_timestamp_ms: i64,
) -> Vec<MessageInput<'a>> {
    bodies
        .iter()
        .map(|b| MessageInput {
            topic,
            queue_id: 0,
            flag: 0,
            body: b,
            properties: b"",
            sys_flag: 0,
            born_timestamp_ms,
            born_host: born(),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
        })
        .collect()
}

/// The raw record at the head of a queue, read through the public get path.
pub fn first_record(store: &MessageStore, topic: &str, queue_id: i32) -> Vec<u8> {
    let got = store
        .get(&GetRequest {
            topic,
            queue_id,
            queue_offset: store.min_offset(topic, queue_id) as i64,
            max_count: 1,
            max_bytes: None,
            tags_codes: None,
        })
        .unwrap();
    got.records[0].bytes().to_vec()
}

/// All bodies of a queue, read through the public get path.
pub fn read_all(store: &MessageStore, topic: &str, queue_id: i32) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut offset = store.min_offset(topic, queue_id);
    loop {
        let got = store
            .get(&GetRequest {
                topic,
                queue_id,
                queue_offset: offset as i64,
                max_count: 32,
                max_bytes: None,
                tags_codes: None,
            })
            .unwrap();
        assert!(
            got.corrupt_offsets.is_empty(),
            "corrupt records in {topic}:{queue_id}"
        );
        if got.records.is_empty() {
            break;
        }
        for r in &got.records {
            let rec = message::decode(r.bytes(), true).unwrap();
            assert_eq!(rec.queue_offset as u64, r.queue_offset);
            out.push(rec.body.to_vec());
        }
        offset = got.next_begin_offset;
    }
    out
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target: PathBuf = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

pub fn segment_path(root: &Path, start: u64) -> PathBuf {
    root.join("commitlog").join(format!("{start:020}"))
}
