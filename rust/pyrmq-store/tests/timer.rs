//! Timer messages (RocketMQ 5's `TIMER_DELIVER_MS`, `TIMER_DELAY_SEC`, `TIMER_DELAY_MS`) ride the
//! delay levels: they reach their topic once due, never before, and at most one shortest level
//! late. Each test drives the schedule with its own clock, from one due time to the next, as the
//! schedule service does.

mod common;

use common::{config, put_one, read_all};
use pyrmq_store::message;
use pyrmq_store::MessageStore;

fn put(store: &MessageStore, topic: &str, body: &[u8], props: &[(&str, &str)]) {
    put_one(
        store,
        topic,
        0,
        body,
        &message::encode_properties(props.iter().copied()),
    );
}

/// Runs schedule passes from `start_ms`, each at the due time the last one reported (or 100 ms
/// later when none), until `topic` holds `count` messages; returns the clock then.
fn run_until_arrived(store: &MessageStore, topic: &str, count: usize, start_ms: i64) -> i64 {
    let mut now = start_ms;
    for _ in 0..10_000 {
        let pass = store.deliver_due(now).unwrap();
        if read_all(store, topic, 0).len() >= count {
            return now;
        }
        now = pass.next_due_ms.map_or(now + 100, |due| due.max(now + 1));
    }
    panic!("{topic} never got its {count} messages");
}

#[test]
fn a_timer_message_arrives_when_due_and_less_than_a_second_late() {
    for (topic, delay_ms) in [
        ("TopicT3500", 3_500),
        ("TopicT61000", 61_000),
        ("TopicTDay", 86_400_000),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let store = MessageStore::open(config(dir.path())).unwrap();
        let now = pyrmq_store::clock::now_ms();
        let due = now + delay_ms;
        put(
            &store,
            topic,
            b"timed",
            &[("TIMER_DELIVER_MS", &due.to_string())],
        );
        assert!(read_all(&store, topic, 0).is_empty());
        let arrived = run_until_arrived(&store, topic, 1, now);
        assert!(arrived >= due, "{topic}: {arrived} before {due}");
        assert!(arrived <= due + 1_000, "{topic}: {} ms late", arrived - due);
        let got = store
            .get(&pyrmq_store::GetRequest {
                topic,
                queue_id: 0,
                queue_offset: 0,
                max_count: 1,
                max_bytes: None,
                tags_codes: None,
            })
            .unwrap();
        let rec = message::decode(got.records[0].bytes(), true).unwrap();
        assert_eq!(rec.body, b"timed");
        assert_eq!(
            rec.property("TIMER_DELIVER_MS"),
            Some(due.to_string().as_str())
        );
        assert_eq!(rec.property("DELAY"), None);
    }
}

#[test]
fn a_relative_timer_is_fixed_at_the_put_and_a_past_one_is_stored_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    let before = pyrmq_store::clock::now_ms();
    put(&store, "TopicRel", b"sec", &[("TIMER_DELAY_SEC", "2")]);
    put(&store, "TopicRel", b"ms", &[("TIMER_DELAY_MS", "1500")]);
    let after = pyrmq_store::clock::now_ms();
    put(
        &store,
        "TopicPast",
        b"past",
        &[("TIMER_DELIVER_MS", "1000")],
    );
    assert_eq!(read_all(&store, "TopicPast", 0), vec![b"past".to_vec()]);
    let arrived = run_until_arrived(&store, "TopicRel", 2, after);
    assert!(
        arrived >= before + 2_000 && arrived <= after + 3_000,
        "{arrived}"
    );
    for raw in read_all(&store, "TopicRel", 0) {
        assert!(raw == b"sec" || raw == b"ms");
    }
    let got = store
        .get(&pyrmq_store::GetRequest {
            topic: "TopicRel",
            queue_id: 0,
            queue_offset: 0,
            max_count: 2,
            max_bytes: None,
            tags_codes: None,
        })
        .unwrap();
    for record in &got.records {
        let rec = message::decode(record.bytes(), true).unwrap();
        // The delay was turned into a time once: a later hop does not start it again.
        assert_eq!(rec.property("TIMER_DELAY_SEC"), None);
        assert_eq!(rec.property("TIMER_DELAY_MS"), None);
        let due: i64 = rec.property("TIMER_DELIVER_MS").unwrap().parse().unwrap();
        assert!(due >= before + 1_500 && due <= after + 2_000);
    }
}

#[test]
fn a_timer_message_waiting_at_a_restart_still_arrives_once() {
    let dir = tempfile::tempdir().unwrap();
    let now = pyrmq_store::clock::now_ms();
    let due = now + 40_000;
    {
        let store = MessageStore::open(config(dir.path())).unwrap();
        put(
            &store,
            "TopicRestart",
            b"kept",
            &[("TIMER_DELIVER_MS", &due.to_string())],
        );
        // One hop happens before the stop.
        store.deliver_due(now + 30_000).unwrap();
        assert!(read_all(&store, "TopicRestart", 0).is_empty());
        store.close().unwrap();
    }
    let store = MessageStore::open(config(dir.path())).unwrap();
    let arrived = run_until_arrived(&store, "TopicRestart", 1, now + 30_000);
    assert!(arrived >= due && arrived <= due + 1_000);
    store.deliver_due(due + 10_000_000).unwrap();
    assert_eq!(read_all(&store, "TopicRestart", 0), vec![b"kept".to_vec()]);
}

#[test]
fn a_clock_gone_back_delivers_no_timer_message_early_and_ends_every_pass() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    let now = pyrmq_store::clock::now_ms();
    let due = now + 61_000;
    put(
        &store,
        "TopicBack",
        b"back",
        &[("TIMER_DELIVER_MS", &due.to_string())],
    );
    // The store's timestamps run ahead of the pass's clock, as after a clock step back.
    store.deliver_due(now + 60_000).unwrap();
    for back in [now - 3_600_000, now - 60_000, now] {
        // Each level's units are those there when the pass reached it: a message parked
        // again waits for a later pass, so a pass ends whatever the clock says.
        let pass = store.deliver_due(back).unwrap();
        assert_eq!(pass.delivered, 0, "{pass:?}");
        assert!(pass.parked_again <= 18, "{pass:?}");
        assert!(read_all(&store, "TopicBack", 0).is_empty());
    }
    let arrived = run_until_arrived(&store, "TopicBack", 1, now + 60_000);
    assert!(arrived >= due);
    store.deliver_due(due + 10_000_000).unwrap();
    assert_eq!(read_all(&store, "TopicBack", 0), vec![b"back".to_vec()]);
}

#[test]
fn a_delay_level_on_a_message_whose_timer_is_past_still_delays_it() {
    // A consumer hands back a delivered timer message for a retry at level 3 (10 s).
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    let now = pyrmq_store::clock::now_ms();
    put(
        &store,
        "%RETRY%G",
        b"retry",
        &[
            ("TIMER_DELIVER_MS", &(now - 5_000).to_string()),
            ("DELAY", "3"),
        ],
    );
    assert!(read_all(&store, "%RETRY%G", 0).is_empty());
    // Passes from after the put: one given a time before the store time would read the
    // level's due time as a clock gone back.
    let arrived = run_until_arrived(&store, "%RETRY%G", 1, pyrmq_store::clock::now_ms());
    assert!(arrived >= now + 10_000, "{}", arrived - now);
}
