//! One put whose messages go to several queues: delays rewritten to the schedule topic,
//! prepared transactions kept out of every queue, and each queue's offsets consecutive in
//! the order the messages were given.

mod common;

use common::{body, born, config};
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
