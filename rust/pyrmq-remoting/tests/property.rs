//! Encode/decode round trips for both serialize types.

use std::collections::BTreeMap;

use proptest::prelude::*;
use pyrmq_remoting::{
    decode_frames, encode_frame, Header, SerializeType, DEFAULT_MAX_FRAME_BYTES, LANGUAGES,
};

fn language() -> impl Strategy<Value = String> {
    prop::sample::select(LANGUAGES.map(|(name, _)| name).to_vec()).prop_map(str::to_owned)
}

fn header(binary: bool) -> impl Strategy<Value = Header> {
    let (code, version) = if binary {
        (
            any::<i16>().prop_map(i32::from).boxed(),
            any::<i16>().prop_map(i32::from).boxed(),
        )
    } else {
        (any::<i32>().boxed(), any::<i32>().boxed())
    };
    (
        code,
        language(),
        version,
        any::<i32>(),
        any::<i32>(),
        prop::option::of(".{0,40}"),
        prop::collection::btree_map(".{0,12}", ".{0,40}", 0..8),
    )
        .prop_map(
            |(code, language, version, opaque, flag, remark, ext_fields)| Header {
                code,
                language,
                version,
                opaque,
                flag,
                remark,
                ext_fields,
            },
        )
}

/// What a header looks like after a binary trip: an empty remark has the length of none.
fn binary_normal(mut h: Header) -> Header {
    if h.remark.as_deref() == Some("") {
        h.remark = None;
    }
    h
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn json_frames_round_trip(h in header(false), body in prop::collection::vec(any::<u8>(), 0..256)) {
        let bytes = encode_frame(&h, SerializeType::Json, &body).expect("encodable");
        let (frames, consumed) = decode_frames(&bytes, DEFAULT_MAX_FRAME_BYTES).expect("decodable");
        prop_assert_eq!(consumed, bytes.len());
        prop_assert_eq!(frames.len(), 1);
        prop_assert_eq!(&frames[0].header, &h);
        prop_assert_eq!(frames[0].serialize_type, SerializeType::Json);
        prop_assert_eq!(frames[0].body, &body[..]);
    }

    #[test]
    fn binary_frames_round_trip(h in header(true), body in prop::collection::vec(any::<u8>(), 0..256)) {
        let bytes = encode_frame(&h, SerializeType::RocketMq, &body).expect("encodable");
        let (frames, consumed) = decode_frames(&bytes, DEFAULT_MAX_FRAME_BYTES).expect("decodable");
        prop_assert_eq!(consumed, bytes.len());
        prop_assert_eq!(frames.len(), 1);
        prop_assert_eq!(&frames[0].header, &binary_normal(h));
        prop_assert_eq!(frames[0].serialize_type, SerializeType::RocketMq);
        prop_assert_eq!(frames[0].body, &body[..]);
    }

    #[test]
    fn streams_split_identically_at_any_cut(
        headers in prop::collection::vec(header(true), 1..5),
        binary in prop::collection::vec(any::<bool>(), 5),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut stream = Vec::new();
        for (i, h) in headers.iter().enumerate() {
            let st = if binary[i] { SerializeType::RocketMq } else { SerializeType::Json };
            stream.extend(encode_frame(h, st, &[i as u8; 3]).expect("encodable"));
        }
        let cut = cut.index(stream.len() + 1);
        let (first, used) = decode_frames(&stream[..cut], DEFAULT_MAX_FRAME_BYTES).expect("prefix");
        let (rest, used_rest) = decode_frames(&stream[used..], DEFAULT_MAX_FRAME_BYTES).expect("rest");
        prop_assert_eq!(used + used_rest, stream.len());
        prop_assert_eq!(first.len() + rest.len(), headers.len());
        let opaques: Vec<i32> = first.iter().chain(rest.iter()).map(|f| f.header.opaque).collect();
        let want: Vec<i32> = headers.iter().map(|h| h.opaque).collect();
        prop_assert_eq!(opaques, want);
    }
}

#[test]
fn ext_fields_are_sorted_in_json_answers() {
    let mut ext = BTreeMap::new();
    ext.insert("queueOffset".to_owned(), "0".to_owned());
    ext.insert("MSG_REGION".to_owned(), "DefaultRegion".to_owned());
    let h = Header {
        ext_fields: ext,
        ..Header::default()
    };
    let bytes = encode_frame(&h, SerializeType::Json, b"").expect("encodable");
    let text = std::str::from_utf8(&bytes[8..]).expect("utf-8");
    assert!(text.find("MSG_REGION") < text.find("queueOffset"), "{text}");
}
