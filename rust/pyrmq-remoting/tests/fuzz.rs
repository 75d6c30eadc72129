//! A bounded fuzzer on stable Rust: arbitrary and mutated input never panics the splitter or the
//! header decoders, and every failure is a typed [`DecodeError`].

use proptest::prelude::*;
use pyrmq_remoting::{
    decode_binary_header, decode_frames, decode_json_header, encode_frame, DecodeError, Header,
    SerializeType,
};

/// Small enough that random length fields hit the limit, the incomplete case and whole frames.
const MAX_FRAME_BYTES: usize = 4096;

fn check(bytes: &[u8]) {
    match decode_frames(bytes, MAX_FRAME_BYTES) {
        Ok((frames, consumed)) => {
            assert!(consumed <= bytes.len());
            let taken: usize = frames.iter().map(|f| 8 + f.body.len()).sum();
            assert!(taken <= consumed);
        }
        Err(e) => {
            // Exhaustive on purpose: a new variant must be looked at here.
            let known = match &e {
                DecodeError::FrameTooLarge { .. }
                | DecodeError::FrameTooShort { .. }
                | DecodeError::HeaderLengthExceedsFrame { .. }
                | DecodeError::UnknownSerializeType(_)
                | DecodeError::Json(_)
                | DecodeError::Binary(_) => true,
            };
            assert!(known && !e.to_string().is_empty());
        }
    }
}

fn valid_frame() -> impl Strategy<Value = Vec<u8>> {
    (
        any::<i16>(),
        any::<i32>(),
        any::<i32>(),
        prop::option::of("[a-z\\\\\"\u{1}é]{0,8}"),
        prop::collection::btree_map("[a-zA-Z]{0,6}", "[0-9a-z\u{2}]{0,6}", 0..4),
        any::<bool>(),
        prop::collection::vec(any::<u8>(), 0..16),
    )
        .prop_map(|(code, opaque, flag, remark, ext_fields, binary, body)| {
            let h = Header {
                code: i32::from(code),
                opaque,
                flag,
                remark,
                ext_fields,
                ..Header::default()
            };
            let st = if binary {
                SerializeType::RocketMq
            } else {
                SerializeType::Json
            };
            encode_frame(&h, st, &body).expect("encodable")
        })
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(prop::sample::Index, u8),
    Truncate(prop::sample::Index),
    Insert(prop::sample::Index, Vec<u8>),
    Remove(prop::sample::Index, prop::sample::Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<prop::sample::Index>(), 1u8..).prop_map(|(i, x)| Mutation::Flip(i, x)),
        any::<prop::sample::Index>().prop_map(Mutation::Truncate),
        (
            any::<prop::sample::Index>(),
            prop::collection::vec(any::<u8>(), 1..8)
        )
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<prop::sample::Index>(), any::<prop::sample::Index>())
            .prop_map(|(i, j)| Mutation::Remove(i, j)),
    ]
}

fn apply(bytes: &mut Vec<u8>, mutation: &Mutation) {
    if bytes.is_empty() {
        return;
    }
    match mutation {
        Mutation::Flip(at, mask) => {
            let at = at.index(bytes.len());
            bytes[at] ^= mask;
        }
        Mutation::Truncate(at) => bytes.truncate(at.index(bytes.len())),
        Mutation::Insert(at, inserted) => {
            let at = at.index(bytes.len() + 1);
            bytes.splice(at..at, inserted.iter().copied());
        }
        Mutation::Remove(from, to) => {
            let (from, to) = (from.index(bytes.len()), to.index(bytes.len()));
            bytes.drain(from.min(to)..from.max(to));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        check(&bytes);
        let _ = decode_json_header(&bytes);
        let _ = decode_binary_header(&bytes);
    }

    #[test]
    fn mutated_valid_frames_never_panic(
        frames in prop::collection::vec(valid_frame(), 1..4),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let mut bytes = frames.concat();
        for mutation in &mutations {
            apply(&mut bytes, mutation);
        }
        check(&bytes);
    }

    #[test]
    fn headers_with_a_plausible_prefix_never_panic(
        len in 0u32..64,
        word_type in 0u8..3,
        header_len in 0u32..64,
        tail in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut bytes = len.to_be_bytes().to_vec();
        bytes.extend_from_slice(&((u32::from(word_type) << 24) | header_len).to_be_bytes());
        bytes.extend(tail);
        check(&bytes);
    }

    #[test]
    fn json_shaped_text_never_panics(text in "[{}\\[\\]\":,0-9a-zA-Z\\\\. \n-]{0,120}") {
        let _ = decode_json_header(text.as_bytes());
        let _ = decode_json_header(format!("{{\"code\":1,\"opaque\":2,{text}").as_bytes());
    }
}
