//! Recalling timer messages (RocketMQ 5's RecallMessage): a recalled message never reaches its
//! topic, its neighbours do, and the recall holds across a reopen that replays the schedule.

mod common;

use common::{born, config, first_record, put_one, read_all};
use pyrmq_store::{message, MessageStore, StoreError};

const TOPIC: &str = "TopicRecall";

fn put_timer(store: &MessageStore, uniq: &str, due_ms: i64) {
    put_one(
        store,
        TOPIC,
        0,
        uniq.as_bytes(),
        &message::encode_properties([
            ("UNIQ_KEY", uniq),
            ("TIMER_DELIVER_MS", due_ms.to_string().as_str()),
        ]),
    );
}

fn recall(store: &MessageStore, uniq: &str, due_ms: i64) {
    store
        .recall(TOPIC, uniq, due_ms, "PG", born(), true)
        .unwrap();
}

/// Schedule passes every 100 ms of the store's clock from `from_ms` to `to_ms`.
fn run(store: &MessageStore, from_ms: i64, to_ms: i64) {
    let mut now = from_ms;
    while now <= to_ms {
        store.deliver_due(now).unwrap();
        now += 100;
    }
}

#[test]
fn a_recalled_timer_message_never_arrives_and_its_neighbours_do() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    let now = pyrmq_store::clock::now_ms();
    let due = now + 12_000;
    for uniq in ["KEEP-1", "GONE", "KEEP-2"] {
        put_timer(&store, uniq, due);
    }
    // One hop through a long level first: the recall meets the message wherever it is parked.
    store.deliver_due(now + 10_000).unwrap();
    recall(&store, "GONE", due);
    assert_eq!(store.pending_recalls(), 1);
    run(&store, now + 10_000, due + 2_000);
    assert_eq!(
        read_all(&store, TOPIC, 0),
        vec![b"KEEP-1".to_vec(), b"KEEP-2".to_vec()]
    );
    assert_eq!(store.pending_recalls(), 0);
}

#[test]
fn a_recall_holds_when_a_reopened_store_replays_the_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let now = pyrmq_store::clock::now_ms();
    let due = now + 5_000;
    {
        let store = MessageStore::open(config(dir.path())).unwrap();
        put_timer(&store, "KEEP", due);
        put_timer(&store, "GONE", due);
        recall(&store, "GONE", due);
        run(&store, now, due + 2_000);
        assert_eq!(read_all(&store, TOPIC, 0), vec![b"KEEP".to_vec()]);
        store.close().unwrap();
    }
    // As after a crash before the schedule's progress was saved: every level starts over.
    std::fs::remove_file(dir.path().join("config").join("delayOffset.json")).unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    assert_eq!(store.pending_recalls(), 1);
    run(&store, now, due + 2_000);
    // At least once for the message kept, never for the one recalled.
    let got = read_all(&store, TOPIC, 0);
    assert!(got.len() >= 2, "{got:?}");
    assert!(got.iter().all(|b| b == b"KEEP"), "{got:?}");
}

#[test]
fn a_recall_is_kept_until_no_parked_record_can_be_its_message() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    let now = pyrmq_store::clock::now_ms();
    put_timer(&store, "LATE", now + 20_000);
    recall(&store, "NEVER-SENT", now + 3_000);
    // Long past its due time, but LATE was parked before it and could be another copy.
    run(&store, now, now + 8_000);
    assert_eq!(store.pending_recalls(), 1);
    // LATE's next park lies past the recall's horizon: nothing parked can be it any more.
    run(&store, now + 8_100, now + 21_000);
    assert_eq!(read_all(&store, TOPIC, 0), vec![b"LATE".to_vec()]);
    assert_eq!(store.pending_recalls(), 0);
    store.close().unwrap();
    // Reopened, its marker is read back and forgotten again by the first pass.
    let store = MessageStore::open(config(dir.path())).unwrap();
    assert_eq!(store.pending_recalls(), 1);
    store.deliver_due(now + 21_100).unwrap();
    assert_eq!(store.pending_recalls(), 0);
}

#[test]
fn every_copy_of_a_recalled_message_is_dropped_but_not_one_sent_for_another_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    let now = pyrmq_store::clock::now_ms();
    let due = now + 6_000;
    // A producer's retry stores the message twice; then the same message for another time.
    put_timer(&store, "DUP", due);
    put_timer(&store, "DUP", due);
    recall(&store, "DUP", due);
    put_timer(&store, "DUP", due + 2_000);
    run(&store, now, due + 4_000);
    assert_eq!(read_all(&store, TOPIC, 0), vec![b"DUP".to_vec()]);
    let raw = first_record(&store, TOPIC, 0);
    let rec = message::decode(&raw, true).unwrap();
    let later = (due + 2_000).to_string();
    assert_eq!(rec.property("TIMER_DELIVER_MS"), Some(later.as_str()));
}

#[test]
fn a_recall_holds_for_a_message_parked_late_by_a_store_clock_ahead_of_the_pass() {
    // A pass that runs long while sends stamp later store times parks a message to fall due
    // after its time by more than a shortest level: the recall must wait for that park, not
    // only for the time.
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.message_delay_level_ms = vec![100, 1_000];
    let store = MessageStore::open(cfg).unwrap();
    let real = pyrmq_store::clock::now_ms();
    let due = real + 1_100;
    put_timer(&store, "LAGGED", due);
    std::thread::sleep(std::time::Duration::from_millis(1_400));
    // A send stamps the store's clock past the pass below.
    put_one(&store, "TopicStamp", 0, b"x", b"");
    let stamped = message::decode(&first_record(&store, "TopicStamp", 0), true)
        .unwrap()
        .store_timestamp_ms;
    // LAGGED (1 s level) comes early, and is parked for 100 ms at the send's store time.
    let pass = store.deliver_due(real + 1_050).unwrap();
    assert_eq!(pass.parked_again, 1);
    recall(&store, "LAGGED", due);
    // From the stamp on, a shortest level past its due time, until well after the park.
    run(&store, stamped, stamped + 2_000);
    assert!(read_all(&store, TOPIC, 0).is_empty());
}

#[test]
fn recalls_and_marker_topic_refuse_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    let due = pyrmq_store::clock::now_ms() + 5_000;
    for (topic, uniq) in [("bad topic", "U"), (TOPIC, ""), (TOPIC, "a\u{1}b")] {
        let err = store
            .recall(topic, uniq, due, "", born(), true)
            .unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::InvalidTopic { .. } | StoreError::IllegalMessage(_)
            ),
            "{err:?}"
        );
    }
    assert_eq!(store.pending_recalls(), 0);
    // Clients cannot forge markers.
    let props = message::encode_properties([("TIMER_DEL_UNIQKEY", "TopicRecall+U")]);
    let input = message::MessageInput {
        topic: pyrmq_store::recall::RECALL_TOPIC,
        queue_id: 0,
        flag: 0,
        body: b"0",
        properties: &props,
        sys_flag: 0,
        born_timestamp_ms: 0,
        born_host: born(),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
    };
    assert!(matches!(
        store.put(&[input], false),
        Err(StoreError::SystemTopic(_))
    ));
}
