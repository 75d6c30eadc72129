//! Criterion benches of the store's hot paths: append, ConsumeQueue scan, batch reads.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pyrmq_store::message::{self, MessageInput};
use pyrmq_store::{GetRequest, MessageStore, StoreConfig};

fn config(root: &std::path::Path) -> StoreConfig {
    StoreConfig {
        store_path_root_dir: root.to_owned(),
        mapped_file_size_commit_log: 256 * 1024 * 1024,
        background_services: false,
        message_index_enable: false,
        ..StoreConfig::default()
    }
}

fn inputs<'a>(body: &'a [u8], props: &'a [u8], n: usize) -> Vec<MessageInput<'a>> {
    (0..n)
        .map(|_| MessageInput {
            topic: "BenchTopic",
            queue_id: 0,
            flag: 0,
            body,
            properties: props,
            sys_flag: 0,
            born_timestamp_ms: 1,
            born_host: "127.0.0.1:1".parse().unwrap(),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
        })
        .collect()
}

fn append(c: &mut Criterion) {
    let props = message::encode_properties([("TAGS", "TagA")]);
    let mut g = c.benchmark_group("append");
    for (size, batch) in [(128usize, 1usize), (128, 32), (4096, 32)] {
        let dir = tempfile::tempdir().unwrap();
        let store = MessageStore::open(config(dir.path())).unwrap();
        let body = vec![7u8; size];
        let msgs = inputs(&body, &props, batch);
        g.throughput(Throughput::Elements(batch as u64));
        g.bench_function(format!("{size}B x{batch}"), |b| {
            b.iter(|| black_box(store.put(&msgs, false).unwrap()));
        });
    }
    g.finish();
}

fn scan_and_get(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    let body = vec![1u8; 128];
    let a = message::encode_properties([("TAGS", "TagA")]);
    let b = message::encode_properties([("TAGS", "TagB")]);
    for i in 0..3125 {
        let props = if i % 10 == 0 { &a } else { &b };
        store.put(&inputs(&body, props, 32), false).unwrap();
    }
    let units = store.max_offset("BenchTopic", 0);
    let tag_a = [message::tags_code(Some("TagA"))];
    let mut g = c.benchmark_group("consume_queue_scan");
    g.throughput(Throughput::Elements(units));
    g.bench_function("all", |bch| {
        bch.iter(|| black_box(store.scan_consume_queue("BenchTopic", 0, 0, units, None)));
    });
    g.bench_function("tag filter", |bch| {
        bch.iter(|| black_box(store.scan_consume_queue("BenchTopic", 0, 0, units, Some(&tag_a))));
    });
    g.finish();
    let mut g = c.benchmark_group("get");
    g.throughput(Throughput::Elements(32));
    let mut offset = 0u64;
    g.bench_function("32 messages", |bch| {
        bch.iter(|| {
            let req = GetRequest {
                topic: "BenchTopic",
                queue_id: 0,
                queue_offset: offset as i64,
                max_count: 32,
                max_bytes: None,
                tags_codes: None,
            };
            let out = store.get(&req).unwrap();
            offset = if out.next_begin_offset + 32 >= units {
                0
            } else {
                out.next_begin_offset
            };
            black_box(out.records.len())
        });
    });
    g.finish();
}

criterion_group!(benches, append, scan_and_get);
criterion_main!(benches);
