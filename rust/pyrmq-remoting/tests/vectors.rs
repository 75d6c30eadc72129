//! Every captured frame in `tests/vectors/remoting/` decodes to the header its `.json` records.

use std::fs;
use std::path::PathBuf;

use pyrmq_remoting::{
    decode_frames, language_name, split_frame, SerializeType, DEFAULT_MAX_FRAME_BYTES,
};
use serde_json::Value;

fn vector_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors/remoting");
    assert!(dir.is_dir(), "captured vectors missing: {}", dir.display());
    dir
}

/// The recorded header's extFields with numbers and booleans in their string form.
fn ext_as_strings(header: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = header
        .get("extFields")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let s = match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (k.clone(), s)
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

#[test]
fn test_every_captured_frame_decodes_to_its_recorded_header() {
    let mut checked = 0;
    let mut entries: Vec<_> = fs::read_dir(vector_dir())
        .expect("readable vector dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    entries.sort();
    for path in entries {
        let meta: Value =
            serde_json::from_slice(&fs::read(&path).expect("readable json")).expect("valid json");
        for side in ["request", "response"] {
            let Some(rec) = meta.get(side).filter(|v| !v.is_null()) else {
                continue;
            };
            let file = rec["file"].as_str().expect("file name");
            let bytes = fs::read(vector_dir().join(file)).expect("readable frame");
            let (frames, consumed) = decode_frames(&bytes, DEFAULT_MAX_FRAME_BYTES)
                .unwrap_or_else(|e| panic!("{file}: {e}"));
            assert_eq!(consumed, bytes.len(), "{file}");
            assert_eq!(frames.len(), 1, "{file}");
            let f = &frames[0];
            let want = &rec["header"];
            assert_eq!(
                i64::from(f.header.code),
                want["code"].as_i64().expect("code"),
                "{file}"
            );
            assert_eq!(
                i64::from(f.header.opaque),
                want["opaque"].as_i64().expect("opaque"),
                "{file}"
            );
            assert_eq!(
                i64::from(f.header.flag),
                want["flag"].as_i64().expect("flag"),
                "{file}"
            );
            assert_eq!(
                i64::from(f.header.version),
                want["version"].as_i64().expect("version"),
                "{file}"
            );
            let language = match &want["language"] {
                Value::String(s) => s.clone(),
                Value::Number(n) => {
                    let byte = u8::try_from(n.as_u64().expect("byte")).expect("byte");
                    language_name(byte).expect("known language").to_owned()
                }
                other => panic!("{file}: language {other}"),
            };
            assert_eq!(f.header.language, language, "{file}");
            assert_eq!(
                f.header.remark.as_deref(),
                want.get("remark").and_then(Value::as_str),
                "{file}"
            );
            let got: Vec<(String, String)> = f.header.ext_fields.clone().into_iter().collect();
            assert_eq!(got, ext_as_strings(want), "{file}");
            assert_eq!(
                f.body.len() as u64,
                rec["body_length"].as_u64().expect("body_length"),
                "{file}"
            );
            let st = rec["serialize_type"].as_u64().expect("serialize_type");
            assert_eq!(u64::from(f.serialize_type.as_byte()), st, "{file}");
            // Fed one byte short, the frame is incomplete rather than wrong.
            assert_eq!(
                split_frame(&bytes[..bytes.len() - 1], DEFAULT_MAX_FRAME_BYTES),
                Ok(None)
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 79, "40 requests and 39 responses (034 is oneway)");
}

#[test]
fn test_the_binary_answer_of_vector_040_is_binary() {
    let bytes =
        fs::read(vector_dir().join("040-NEGATIVE-route-binary-header.resp.bin")).expect("frame");
    let frame = split_frame(&bytes, DEFAULT_MAX_FRAME_BYTES)
        .expect("valid")
        .expect("whole");
    assert_eq!(frame.serialize_type, SerializeType::RocketMq);
    assert_eq!(frame.header.len(), 21);
    assert!(frame.body.starts_with(b"{\"brokerDatas\""));
}
