//! One put whose messages go to several queues: delays rewritten to the schedule topic,
//! prepared transactions kept out of every queue, and each queue's offsets consecutive in
//! the order the messages were given.

mod common;

use common::{body, born, config, plain_inputs, read_all};
use pyrmq_store::message::{self, MessageInput};
use pyrmq_store::store::SCHEDULE_TOPIC;
use pyrmq_store::MessageStore;

const PREPARED: i32 = 0x4; // TRANSACTION_PREPARED_TYPE

#[test]
fn a_put_across_queues_numbers_each_queue_in_order_and_units_point_at_their_records() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    let plain = message::encode_properties([("TAGS", "T")]);
    let delayed = message::encode_properties([("TAGS", "T"), ("DELAY", "2")]);
    // (topic, queue id, delayed, prepared)
    let plan = [
        ("TopicA", 0, false, false),
        ("TopicA", 1, false, false),
        ("TopicA", 0, false, false),
        ("TopicB", 0, true, false),
        ("TopicB", 0, false, false),
        ("TopicA", 1, false, true),
        ("TopicA", 0, false, false),
        ("TopicB", 0, true, false),
    ];
    let bodies: Vec<Vec<u8>> = (0..plan.len()).map(|i| body(i, 20 + i)).collect();
    let inputs: Vec<MessageInput<'_>> = plan
        .iter()
        .zip(&bodies)
        .map(|(&(topic, queue_id, delay, prepared), b)| MessageInput {
            topic,
            queue_id,
            flag: 0,
            body: b,
            properties: if delay { &delayed } else { &plain },
            sys_flag: if prepared { PREPARED } else { 0 },
            born_timestamp_ms: 1,
            born_host: born(),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
        })
        .collect();
    let out = store.put(&inputs, false).unwrap();
    let offsets: Vec<i64> = out.entries.iter().map(|e| e.queue_offset).collect();
    // A0: 0, 1, 2; A1: 0 (the prepared one gets none); B0: 0; schedule level 2 (queue 1): 0, 1.
    assert_eq!(offsets, vec![0, 0, 1, 0, 0, 0, 2, 1]);
    let queue_ids: Vec<i32> = out.entries.iter().map(|e| e.queue_id).collect();
    assert_eq!(queue_ids, vec![0, 1, 0, 1, 0, 1, 0, 1]);
    assert_eq!(store.max_offset("TopicA", 0), 3);
    assert_eq!(store.max_offset("TopicA", 1), 1);
    assert_eq!(store.max_offset("TopicB", 0), 1);
    assert_eq!(store.max_offset(SCHEDULE_TOPIC, 1), 2);

    let expect = |topic: &str, queue_id: i32, which: &[usize]| {
        let units = store.consume_queue_units(topic, queue_id, 0, 100);
        let got: Vec<(u64, u64, u32)> = units
            .iter()
            .map(|u| (u.queue_offset, u.phy_offset, u.size))
            .collect();
        let want: Vec<(u64, u64, u32)> = which
            .iter()
            .enumerate()
            .map(|(n, &i)| {
                let e = out.entries[i];
                (n as u64, e.phy_offset as u64, e.size)
            })
            .collect();
        assert_eq!(got, want, "{topic}:{queue_id}");
    };
    expect("TopicA", 0, &[0, 2, 6]);
    expect("TopicA", 1, &[1]);
    expect("TopicB", 0, &[4]);
    expect(SCHEDULE_TOPIC, 1, &[3, 7]);
    for (i, e) in out.entries.iter().enumerate() {
        let raw = store
            .look_message_by_offset(e.phy_offset as u64)
            .unwrap()
            .unwrap();
        assert_eq!(raw.len(), e.size as usize);
        let m = message::decode(&raw, true).unwrap();
        assert_eq!(m.body, bodies[i].as_slice(), "message {i}");
        assert_eq!(m.queue_offset, e.queue_offset);
    }
    store.close().unwrap();
}

/// The shapes a message of the property below may take: (topic, queue id, properties, sys flag,
/// born host). Runs of one shape are encoded by copying the record before; any change of shape
/// starts afresh.
fn shapes() -> Vec<(&'static str, i32, Vec<u8>, i32, std::net::SocketAddr)> {
    let v6: std::net::SocketAddr = "[2001:db8::7]:4321".parse().unwrap();
    vec![
        (
            "TopicA",
            0,
            message::encode_properties([("TAGS", "T1")]),
            0,
            born(),
        ),
        (
            "TopicA",
            0,
            message::encode_properties([("TAGS", "T2")]),
            0,
            born(),
        ),
        (
            "TopicA",
            1,
            message::encode_properties([("TAGS", "T1")]),
            0,
            v6,
        ),
        (
            "TopicB",
            0,
            message::encode_properties([("TAGS", "T1"), ("DELAY", "3")]),
            0,
            born(),
        ),
        (
            "TopicB",
            0,
            message::encode_properties([("KEYS", "k")]),
            PREPARED,
            born(),
        ),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    #[test]
    fn every_record_of_a_mixed_put_reads_back_as_its_message_and_recovers(
        plan in proptest::collection::vec((0usize..5, 0usize..300), 1..40),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let store = MessageStore::open(config(dir.path())).unwrap();
        let shapes = shapes();
        let bodies: Vec<Vec<u8>> = plan.iter().enumerate().map(|(i, &(_, len))| body(i, len)).collect();
        let inputs: Vec<MessageInput<'_>> = plan
            .iter()
            .zip(&bodies)
            .map(|(&(shape, _), b)| {
                let (topic, queue_id, props, sys_flag, host) = &shapes[shape];
                MessageInput {
                    topic,
                    queue_id: *queue_id,
                    flag: 5,
                    body: b,
                    properties: props,
                    sys_flag: *sys_flag,
                    born_timestamp_ms: 1,
                    born_host: *host,
                    reconsume_times: 2,
                    prepared_transaction_offset: 0,
                }
            })
            .collect();
        let out = store.put(&inputs, false).unwrap();
        proptest::prop_assert_eq!(out.entries.len(), inputs.len());
        let mut next = std::collections::HashMap::new();
        for ((m, e), &(shape, _)) in inputs.iter().zip(&out.entries).zip(&plan) {
            let raw = store.look_message_by_offset(e.phy_offset as u64).unwrap().unwrap();
            let rec = message::decode(&raw, true).unwrap();
            proptest::prop_assert_eq!(rec.body, m.body);
            proptest::prop_assert_eq!(rec.phy_offset, e.phy_offset);
            proptest::prop_assert_eq!(rec.queue_offset, e.queue_offset);
            proptest::prop_assert_eq!(rec.born_host, m.born_host);
            proptest::prop_assert_eq!((rec.flag, rec.reconsume_times), (5, 2));
            let delayed = shape == 3;
            let (topic, queue_id) = if delayed { (SCHEDULE_TOPIC, 2) } else { (m.topic, m.queue_id) };
            proptest::prop_assert_eq!((rec.topic, rec.queue_id), (topic, queue_id));
            if delayed {
                proptest::prop_assert_eq!(rec.property("REAL_TOPIC"), Some(m.topic));
            } else {
                proptest::prop_assert_eq!(rec.properties, m.properties);
            }
            if m.sys_flag == PREPARED {
                proptest::prop_assert_eq!(e.queue_offset, 0);
                continue;
            }
            // Each queue numbers its messages in the order given, and its unit points here.
            let expected = next.entry((topic, queue_id)).or_insert(0u64);
            proptest::prop_assert_eq!(e.queue_offset as u64, *expected);
            *expected += 1;
            let unit = store.consume_queue_units(topic, queue_id, e.queue_offset as u64, 1);
            proptest::prop_assert_eq!((unit[0].phy_offset, unit[0].size), (e.phy_offset as u64, e.size));
            // The tag's hash, or for a delayed message its due time (level 3 is 10 s).
            let tags_code = if delayed {
                rec.store_timestamp_ms + 10_000
            } else {
                message::tags_code(message::property(m.properties, "TAGS"))
            };
            proptest::prop_assert_eq!(unit[0].tags_code, tags_code);
        }
        // A full recovery scan verifies the group's fence over every byte written.
        store.close().unwrap();
        drop(store);
        std::fs::write(dir.path().join("checkpoint"), b"garbage").unwrap();
        std::fs::write(dir.path().join("abort"), b"").unwrap();
        let store = MessageStore::open(config(dir.path())).unwrap();
        proptest::prop_assert_eq!(store.recovery.records, inputs.len() as u64);
        proptest::prop_assert!(store.recovery.corrupt_ranges.is_empty());
        proptest::prop_assert_eq!(store.recovery.truncated_bytes, 0);
    }
}

#[test]
fn a_first_put_larger_than_a_queue_file_fills_several_new_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.mapped_file_size_commit_log = 1 << 20;
    let store = MessageStore::open(cfg).unwrap();
    // 256 units a queue file: the new queue needs three files at once.
    let bodies: Vec<Vec<u8>> = (0..600).map(|i| body(i, 16)).collect();
    let out = store
        .put(&plain_inputs("TopicWide", &bodies, 1), false)
        .unwrap();
    assert_eq!(out.entries.len(), 600);
    assert_eq!(store.max_offset("TopicWide", 0), 600);
    assert_eq!(read_all(&store, "TopicWide", 0), bodies);
    // The queue goes on from there.
    let more = vec![body(600, 16)];
    let out = store
        .put(&plain_inputs("TopicWide", &more, 1), false)
        .unwrap();
    assert_eq!(out.entries[0].queue_offset, 600);
}

#[test]
fn a_delayed_message_keeps_every_property_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.max_queue_nums_per_topic = 16;
    // Every pair but DELAY travels as it came, byte for byte.
    let props = "DELAY\x011\x02K\x01\u{e9}t\u{e9}\x02TAGS\x01t"
        .as_bytes()
        .to_vec();
    {
        let store = MessageStore::open(cfg.clone()).unwrap();
        let input = MessageInput {
            topic: "TopicLater",
            queue_id: 10,
            flag: 0,
            body: b"later",
            properties: &props,
            sys_flag: 0,
            born_timestamp_ms: 1,
            born_host: born(),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
        };
        store.put(&[input], false).unwrap();
        store.close().unwrap();
    }
    // Queues were fewer by the time it fell due: it still reaches the queue it was sent to.
    cfg.max_queue_nums_per_topic = 8;
    let store = MessageStore::open(cfg).unwrap();
    let pass = store
        .deliver_due(pyrmq_store::clock::now_ms() + 3_600_000)
        .unwrap();
    assert_eq!(pass.delivered, 1);
    let got = store
        .get(&pyrmq_store::GetRequest {
            topic: "TopicLater",
            queue_id: 10,
            queue_offset: 0,
            max_count: 32,
            max_bytes: None,
            tags_codes: None,
        })
        .unwrap();
    assert_eq!(got.records.len(), 1);
    let rec = message::decode(got.records[0].bytes(), true).unwrap();
    assert_eq!(rec.body, b"later");
    assert_eq!(
        rec.properties,
        "K\x01\u{e9}t\u{e9}\x02TAGS\x01t\x02REAL_TOPIC\x01TopicLater\x02REAL_QID\x0110\x02WAIT\x01false"
            .as_bytes()
    );
}
