//! JSON headers (serialize type 0). See the crate docs for the member table.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Serialize;

use crate::error::DecodeError;
use crate::header::Header;

/// Decodes a JSON header. Whitespace (the C++ client's trailing `\n`) may follow the object.
pub fn decode_json_header(bytes: &[u8]) -> Result<Header, DecodeError> {
    serde_json::from_slice::<JsonHeader>(bytes)
        .map(|h| h.0)
        .map_err(|e| DecodeError::Json(e.to_string()))
}

/// Appends `header` as compact JSON with sorted keys: the shape a Java 4.9.7 broker answers with.
///
/// `remark` is left out when it is `None` and `extFields` when it is empty; every extFields value
/// is written as a JSON string.
pub fn encode_json_header(header: &Header, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"code\":");
    put(out, &header.code);
    if !header.ext_fields.is_empty() {
        out.extend_from_slice(b",\"extFields\":{");
        for (i, (k, v)) in header.ext_fields.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            put(out, k.as_str());
            out.push(b':');
            put(out, v.as_str());
        }
        out.push(b'}');
    }
    out.extend_from_slice(b",\"flag\":");
    put(out, &header.flag);
    out.extend_from_slice(b",\"language\":");
    put(out, header.language.as_str());
    out.extend_from_slice(b",\"opaque\":");
    put(out, &header.opaque);
    if let Some(remark) = &header.remark {
        out.extend_from_slice(b",\"remark\":");
        put(out, remark.as_str());
    }
    out.extend_from_slice(b",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":");
    put(out, &header.version);
    out.push(b'}');
}

fn put<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    serde_json::to_writer(out, value)
        .expect("serializing a string or an integer into a Vec cannot fail");
}

struct JsonHeader(Header);

impl<'de> Deserialize<'de> for JsonHeader {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(HeaderVisitor)
    }
}

/// A top-level member name; `Other` covers `serializeTypeCurrentRPC` and anything unknown.
enum Member {
    Code,
    Language,
    Version,
    Opaque,
    Flag,
    Remark,
    ExtFields,
    Other,
}

impl<'de> Deserialize<'de> for Member {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MemberVisitor;
        impl Visitor<'_> for MemberVisitor {
            type Value = Member;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a header member name")
            }
            fn visit_str<E: de::Error>(self, name: &str) -> Result<Member, E> {
                Ok(match name {
                    "code" => Member::Code,
                    "language" => Member::Language,
                    "version" => Member::Version,
                    "opaque" => Member::Opaque,
                    "flag" => Member::Flag,
                    "remark" => Member::Remark,
                    "extFields" => Member::ExtFields,
                    _ => Member::Other,
                })
            }
        }
        deserializer.deserialize_identifier(MemberVisitor)
    }
}

struct HeaderVisitor;

impl<'de> Visitor<'de> for HeaderVisitor {
    type Value = JsonHeader;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object header")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<JsonHeader, A::Error> {
        let mut code = None;
        let mut opaque = None;
        let mut header = Header::default();
        // A repeated member keeps its last value, as Java's parser does.
        while let Some(member) = map.next_key::<Member>()? {
            match member {
                Member::Code => code = map.next_value::<Option<Int32>>()?.map(|v| v.0),
                Member::Opaque => opaque = map.next_value::<Option<Int32>>()?.map(|v| v.0),
                Member::Version => {
                    header.version = map.next_value::<Option<Int32>>()?.map_or(0, |v| v.0);
                }
                Member::Flag => header.flag = map.next_value::<Option<Int32>>()?.map_or(0, |v| v.0),
                Member::Language => {
                    header.language = map
                        .next_value::<Option<String>>()?
                        .unwrap_or_else(|| "JAVA".to_owned());
                }
                Member::Remark => header.remark = map.next_value::<Option<String>>()?,
                Member::ExtFields => {
                    header.ext_fields =
                        map.next_value::<Option<ExtFields>>()?.unwrap_or_default().0;
                }
                Member::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        header.code = code.ok_or_else(|| de::Error::missing_field("code"))?;
        header.opaque = opaque.ok_or_else(|| de::Error::missing_field("opaque"))?;
        Ok(JsonHeader(header))
    }
}

/// An int32 member: a JSON integer, or a string holding one.
struct Int32(i32);

impl<'de> Deserialize<'de> for Int32 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Int32Visitor;
        impl Visitor<'_> for Int32Visitor {
            type Value = Int32;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an int32")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Int32, E> {
                i32::try_from(v)
                    .map(Int32)
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Int32, E> {
                i32::try_from(v)
                    .map(Int32)
                    .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Int32, E> {
                v.parse::<i32>()
                    .map(Int32)
                    .map_err(|_| E::invalid_value(de::Unexpected::Str(v), &self))
            }
        }
        deserializer.deserialize_any(Int32Visitor)
    }
}

/// The extFields object, every value turned into its string form.
#[derive(Default)]
struct ExtFields(BTreeMap<String, String>);

impl<'de> Deserialize<'de> for ExtFields {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ExtFieldsVisitor;
        impl<'de> Visitor<'de> for ExtFieldsVisitor {
            type Value = ExtFields;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an extFields object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ExtFields, A::Error> {
                let mut fields = BTreeMap::new();
                while let Some(key) = map.next_key::<String>()? {
                    let value = map.next_value::<ExtValue>().map_err(|e| {
                        de::Error::custom(format_args!("extFields member {key:?}: {e}"))
                    })?;
                    match value.0 {
                        Some(v) => {
                            fields.insert(key, v);
                        }
                        None => {
                            fields.remove(&key);
                        }
                    }
                }
                Ok(ExtFields(fields))
            }
        }
        deserializer.deserialize_map(ExtFieldsVisitor)
    }
}

/// One extFields value: a string as is, a number or boolean as its literal text, null as none.
struct ExtValue(Option<String>);

impl<'de> Deserialize<'de> for ExtValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ExtValueVisitor;
        impl Visitor<'_> for ExtValueVisitor {
            type Value = ExtValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, number, boolean or null")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ExtValue, E> {
                Ok(ExtValue(Some(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<ExtValue, E> {
                Ok(ExtValue(Some(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ExtValue, E> {
                Ok(ExtValue(Some(v.to_string())))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ExtValue, E> {
                Ok(ExtValue(Some(v.to_string())))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<ExtValue, E> {
                Ok(ExtValue(Some(v.to_string())))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<ExtValue, E> {
                Ok(ExtValue(Some(v.to_string())))
            }
            fn visit_unit<E: de::Error>(self) -> Result<ExtValue, E> {
                Ok(ExtValue(None))
            }
        }
        deserializer.deserialize_any(ExtValueVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(text: &str) -> Result<Header, DecodeError> {
        decode_json_header(text.as_bytes())
    }

    #[test]
    fn test_decodes_cpp_request_with_trailing_newline_and_mixed_ext_types() {
        let h = decode(
            "{\"code\":10,\"extFields\":{\"batch\":\"0\",\"queueId\":0,\"sysFlag\":7,\
             \"unitMode\":false,\"rate\":1.5},\"flag\":0,\"language\":\"CPP\",\"opaque\":3,\
             \"remark\":\"\",\"version\":63}\n",
        )
        .expect("valid header");
        assert_eq!((h.code, h.opaque, h.flag, h.version), (10, 3, 0, 63));
        assert_eq!(h.language, "CPP");
        assert_eq!(h.remark.as_deref(), Some(""));
        assert_eq!(h.ext_fields["batch"], "0");
        assert_eq!(h.ext_fields["queueId"], "0");
        assert_eq!(h.ext_fields["sysFlag"], "7");
        assert_eq!(h.ext_fields["unitMode"], "false");
        assert_eq!(h.ext_fields["rate"], "1.5");
    }

    #[test]
    fn test_missing_optional_members_take_java_defaults() {
        let h = decode("{\"code\":105,\"opaque\":1,\"serializeTypeCurrentRPC\":\"JSON\"}")
            .expect("valid header");
        assert_eq!(h.language, "JAVA");
        assert_eq!((h.version, h.flag), (0, 0));
        assert_eq!(h.remark, None);
        assert!(h.ext_fields.is_empty());
    }

    #[test]
    fn test_null_remark_and_null_ext_values_mean_none() {
        let h = decode(
            "{\"code\":1,\"opaque\":1,\"remark\":null,\"extFields\":{\"a\":null,\"b\":\"x\"}}",
        )
        .expect("valid header");
        assert_eq!(h.remark, None);
        assert_eq!(h.ext_fields.len(), 1);
    }

    #[test]
    fn test_numeric_strings_are_accepted_for_int_members() {
        let h = decode("{\"code\":\"105\",\"opaque\":\"-4\"}").expect("valid header");
        assert_eq!((h.code, h.opaque), (105, -4));
    }

    #[test]
    fn test_rejects_missing_code_or_opaque() {
        let e = decode("{\"opaque\":1}").expect_err("code missing");
        assert!(e.to_string().contains("missing field `code`"), "{e}");
        let e = decode("{\"code\":1}").expect_err("opaque missing");
        assert!(e.to_string().contains("missing field `opaque`"), "{e}");
    }

    #[test]
    fn test_rejects_non_object_bad_types_and_garbage() {
        for text in [
            "[]",
            "\"x\"",
            "{\"code\":1,\"opaque\":1",
            "{\"code\":1.5,\"opaque\":1}",
            "{\"code\":4294967296,\"opaque\":1}",
            "{\"code\":1,\"opaque\":1,\"extFields\":{\"a\":[1]}}",
            "{\"code\":1,\"opaque\":1,\"extFields\":[]}",
            "{\"code\":1,\"opaque\":1,\"remark\":5}",
            "{\"code\":1,\"opaque\":1} x",
            "",
        ] {
            let e = decode(text).expect_err(text);
            assert!(matches!(e, DecodeError::Json(_)), "{text}: {e:?}");
        }
        let e = decode("{\"code\":1,\"opaque\":1,\"extFields\":{\"topic\":{}}}").expect_err("obj");
        assert!(e.to_string().contains("extFields member \"topic\""), "{e}");
    }

    #[test]
    fn test_encode_matches_the_java_answer_shape() {
        let mut h = Header {
            code: 0,
            version: 407,
            opaque: 1,
            flag: 1,
            ..Header::default()
        };
        h.ext_fields.insert("queueOffset".into(), "0".into());
        h.ext_fields.insert("msgId".into(), "7F00".into());
        let mut out = Vec::new();
        encode_json_header(&h, &mut out);
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            "{\"code\":0,\"extFields\":{\"msgId\":\"7F00\",\"queueOffset\":\"0\"},\"flag\":1,\
             \"language\":\"JAVA\",\"opaque\":1,\"serializeTypeCurrentRPC\":\"JSON\",\"version\":407}"
        );
    }

    #[test]
    fn test_encode_leaves_out_empty_ext_fields_and_keeps_remark() {
        let h = Header {
            code: 17,
            opaque: 8,
            flag: 1,
            version: 407,
            remark: Some("No topic route info\u{1}\"".into()),
            ..Header::default()
        };
        let mut out = Vec::new();
        encode_json_header(&h, &mut out);
        let text = String::from_utf8(out).expect("utf-8");
        assert_eq!(
            text,
            "{\"code\":17,\"flag\":1,\"language\":\"JAVA\",\"opaque\":8,\
             \"remark\":\"No topic route info\\u0001\\\"\",\"serializeTypeCurrentRPC\":\"JSON\",\
             \"version\":407}"
        );
        assert_eq!(decode(&text).expect("round trip"), h);
    }
}
