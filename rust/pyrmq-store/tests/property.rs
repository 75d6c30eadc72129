//! Property tests: the record codec round-trips; a ConsumeQueue scan equals a naive filter.

use std::net::SocketAddr;

use proptest::prelude::*;
use pyrmq_store::consume_queue::{ConsumeQueue, CqUnit};
use pyrmq_store::message::{self, Assigned, MessageInput};

fn host() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::from((ip, port))),
        (any::<[u8; 16]>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::from((ip, port))),
    ]
}

fn topic() -> impl Strategy<Value = String> {
    "[%|a-zA-Z0-9_-]{1,127}"
}

fn properties() -> impl Strategy<Value = Vec<(String, String)>> {
    prop::collection::vec(("[A-Za-z_]{1,12}", "[ -~]{0,40}"), 0..6)
}

/// Bytes built mostly from the separators and a few letters, with now and then a byte that is
/// not UTF-8 on its own: every odd shape of a properties field.
fn raw_properties() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![
            Just(1u8),
            Just(2u8),
            Just(b'A'),
            Just(b'B'),
            Just(b'x'),
            Just(0xC3u8),
            Just(0xFFu8)
        ],
        0..40,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn property_lookup_finds_what_the_pair_iterator_finds(
        props in raw_properties(),
        name in prop_oneof![Just(""), Just("A"), Just("AB"), Just("A\u{1}B"), Just("x\u{2}")],
    ) {
        let expected = message::iter_properties(&props).filter(|(n, _)| *n == name).last().map(|(_, v)| v);
        prop_assert_eq!(message::property(&props, name), expected);
        let named = |n: &str| {
            props.split(|b| *b == 2).any(|pair| {
                pair.iter().position(|b| *b == 1).is_some_and(|sep| &pair[..sep] == n.as_bytes())
            })
        };
        prop_assert_eq!(message::has_any_property(&props, &[name]), named(name));
        prop_assert_eq!(message::has_any_property(&props, &["B", name]), named("B") || named(name));
        let naive: Vec<(&str, &str)> = props
            .split(|b| *b == 2)
            .filter(|s| !s.is_empty())
            .filter_map(|pair| {
                let sep = pair.iter().position(|b| *b == 1)?;
                Some((std::str::from_utf8(&pair[..sep]).ok()?, std::str::from_utf8(&pair[sep + 1..]).ok()?))
            })
            .collect();
        prop_assert_eq!(message::iter_properties(&props).collect::<Vec<_>>(), naive);
        prop_assert_eq!(
            message::properties_named(&props, [name, "B", "A"]),
            [message::property(&props, name), message::property(&props, "B"), message::property(&props, "A")]
        );
    }

    #[test]
    fn java_string_hash_folds_utf16_units(s in any::<String>(), ascii in "[ -~]{0,40}") {
        for text in [s.as_str(), ascii.as_str()] {
            let units = text.encode_utf16().fold(0i32, |h, u| h.wrapping_mul(31).wrapping_add(i32::from(u)));
            prop_assert_eq!(message::java_string_hash(text), units);
        }
    }

    #[test]
    fn record_codec_round_trips(
        topic in topic(),
        body in prop::collection::vec(any::<u8>(), 0..2048),
        props in properties(),
        queue_id in 0i32..1024,
        flag in any::<i32>(),
        sys_flag in 0i32..16,
        born_ts in any::<i64>(),
        born_host in host(),
        store_host in host(),
        reconsume in any::<i32>(),
        prepared in any::<i64>(),
        queue_offset in 0i64..i64::MAX,
        phy in 0i64..i64::MAX,
        store_ts in any::<i64>(),
    ) {
        let encoded_props = message::encode_properties(props.iter().map(|(a, b)| (a.as_str(), b.as_str())));
        let input = MessageInput {
            topic: &topic, queue_id, flag, body: &body, properties: &encoded_props, sys_flag,
            born_timestamp_ms: born_ts, born_host, reconsume_times: reconsume,
            prepared_transaction_offset: prepared,
        };
        let mut flags = sys_flag;
        if born_host.is_ipv6() { flags |= message::SYSFLAG_BORNHOST_V6; }
        if store_host.is_ipv6() { flags |= message::SYSFLAG_STOREHOST_V6; }
        let len = message::record_len(body.len(), topic.len(), encoded_props.len(), flags);
        let mut buf = vec![0u8; len];
        let at = Assigned { queue_offset, phy_offset: phy, store_timestamp_ms: store_ts, store_host };
        message::encode_into(&mut buf, &input, message::body_crc(&body), &at);
        let rec = message::decode(&buf, true).unwrap();
        prop_assert_eq!(rec.total_size as usize, len);
        prop_assert_eq!(rec.topic, topic.as_str());
        prop_assert_eq!(rec.body, &body[..]);
        prop_assert_eq!(rec.properties, &encoded_props[..]);
        prop_assert_eq!(rec.queue_id, queue_id);
        prop_assert_eq!(rec.flag, flag);
        prop_assert_eq!(rec.queue_offset, queue_offset);
        prop_assert_eq!(rec.phy_offset, phy);
        prop_assert_eq!(rec.born_timestamp_ms, born_ts);
        prop_assert_eq!(rec.born_host, born_host);
        prop_assert_eq!(rec.store_timestamp_ms, store_ts);
        prop_assert_eq!(rec.store_host, store_host);
        prop_assert_eq!(rec.reconsume_times, reconsume);
        prop_assert_eq!(rec.prepared_transaction_offset, prepared);
        let map = message::properties_map(rec.properties);
        for (k, v) in &props {
            // Later duplicates win in a map; check the last value given for each name.
            let last = props.iter().rev().find(|(n, _)| n == k).map(|(_, v)| v).unwrap();
            prop_assert_eq!(map.get(k), Some(last));
            let _ = v;
        }
        // Any truncation is refused, never misread.
        for cut in [0, 1, len / 2, len - 1] {
            prop_assert!(message::decode(&buf[..cut], false).is_err());
        }
    }

    #[test]
    fn a_record_copied_from_its_predecessor_equals_one_encoded_alone(
        topic in topic(),
        first in prop::collection::vec(any::<u8>(), 0..600),
        second in prop::collection::vec(any::<u8>(), 0..600),
        props in properties(),
        flag in any::<i32>(),
        born_host in host(),
        store_host in host(),
        queue_offset in 0i64..i64::MAX - 1,
        phy in 0i64..i64::MAX / 2,
    ) {
        let encoded_props = message::encode_properties(props.iter().map(|(a, b)| (a.as_str(), b.as_str())));
        let input = |body| MessageInput {
            topic: &topic, queue_id: 3, flag, body, properties: &encoded_props, sys_flag: 0,
            born_timestamp_ms: 7, born_host, reconsume_times: 1, prepared_transaction_offset: 0,
        };
        let (a, b) = (input(&first[..]), input(&second[..]));
        prop_assert!(message::same_but_body(&a, &b));
        let mut flags = 0;
        if born_host.is_ipv6() { flags |= message::SYSFLAG_BORNHOST_V6; }
        if store_host.is_ipv6() { flags |= message::SYSFLAG_STOREHOST_V6; }
        let len = |body: &[u8]| message::record_len(body.len(), topic.len(), encoded_props.len(), flags);
        let (len_a, len_b) = (len(&first), len(&second));
        let at = |queue_offset, phy_offset| Assigned { queue_offset, phy_offset, store_timestamp_ms: 9, store_host };

        let mut both = vec![0u8; len_a + len_b];
        message::encode_into(&mut both[..len_a], &a, message::body_crc(&first), &at(queue_offset, phy));
        let phy_b = phy + len_a as i64;
        let wrote = message::encode_after(&mut both, 0, len_a, &second, message::body_crc(&second), queue_offset + 1, phy_b);
        prop_assert_eq!(wrote, len_b);

        let mut alone = vec![0u8; len_b];
        message::encode_into(&mut alone, &b, message::body_crc(&second), &at(queue_offset + 1, phy_b));
        prop_assert_eq!(&both[len_a..], &alone[..]);
        prop_assert_eq!(message::BodyCrc::new().of(&second), message::body_crc(&second));
    }

    #[test]
    fn client_batch_round_trips(items in prop::collection::vec((any::<i32>(), prop::collection::vec(any::<u8>(), 0..300), properties()), 1..20)) {
        let encoded: Vec<Vec<u8>> = items.iter().map(|(_, _, p)| message::encode_properties(p.iter().map(|(a, b)| (a.as_str(), b.as_str())))).collect();
        let batch: Vec<message::BatchItem<'_>> = items.iter().zip(&encoded).map(|((flag, body, _), props)| message::BatchItem { flag: *flag, body, properties: props }).collect();
        let bytes = message::encode_client_batch(&batch);
        prop_assert_eq!(message::decode_client_batch(&bytes).unwrap(), batch);
    }

    #[test]
    fn consume_queue_scan_equals_a_naive_filter(
        tags in prop::collection::vec(0i64..6, 1..700),
        start in 0u64..800,
        max_units in 0u64..900,
        max_matches in 1usize..64,
        filter in prop::option::of(prop::collection::vec(0i64..6, 0..3)),
    ) {
        let dir = tempfile::tempdir().unwrap();
        // Small files so scans cross file boundaries.
        let cq = ConsumeQueue::load(dir.path(), "T", 0, 20 * 64).unwrap();
        for (i, t) in tags.iter().enumerate() {
            cq.write_unit(i as u64, 1000 + i as u64 * 10, 10, *t).unwrap();
        }
        cq.publish(tags.len() as u64);
        let mut got = Vec::new();
        let next = cq.scan(start, max_units, filter.as_deref(), max_matches, &mut got);

        let end = (tags.len() as u64).min(start + max_units);
        let mut want = Vec::new();
        let mut want_next = start.max(end.min(start));
        for q in start..end {
            want_next = q + 1;
            if filter.as_ref().is_none_or(|f| f.contains(&tags[q as usize])) {
                want.push(CqUnit { queue_offset: q, phy_offset: 1000 + q * 10, size: 10, tags_code: tags[q as usize] });
                if want.len() >= max_matches { break; }
            }
        }
        if start >= end { want_next = start; }
        prop_assert_eq!(&got, &want);
        prop_assert_eq!(next, want_next);

        let (count, _) = cq.count_matching(start, max_units, filter.as_deref());
        let naive = (start..end).filter(|q| filter.as_ref().is_none_or(|f| f.contains(&tags[*q as usize]))).count() as u64;
        prop_assert_eq!(count, naive);
    }
}
