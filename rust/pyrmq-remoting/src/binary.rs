//! ROCKETMQ binary headers (serialize type 1). See the crate docs for the byte table.

use std::collections::BTreeMap;

use crate::error::{DecodeError, EncodeError};
use crate::header::{language_byte, language_name, Header};

/// Bytes of the fixed part: code, language, version, opaque, flag, remark length.
const FIXED_BYTES: usize = 2 + 1 + 2 + 4 + 4 + 4;

/// Decodes a binary header that is exactly `bytes` long.
pub fn decode_binary_header(bytes: &[u8]) -> Result<Header, DecodeError> {
    let mut r = Reader { bytes, pos: 0 };
    let code = i32::from(r.i16("code")?);
    let language_at = r.pos;
    let language_code = r.take(1, "language")?[0];
    let language = language_name(language_code).ok_or_else(|| {
        DecodeError::Binary(format!(
            "unknown LanguageCode byte {language_code} at byte {language_at}"
        ))
    })?;
    let version = i32::from(r.i16("version")?);
    let opaque = r.i32("opaque")?;
    let flag = r.i32("flag")?;
    let remark_len = r.len_i32("remark length")?;
    let remark = if remark_len == 0 {
        None
    } else {
        Some(r.string(remark_len, "remark")?)
    };
    let ext_len = r.len_i32("extFields length")?;
    let ext_start = r.pos;
    let ext_end = ext_start
        .checked_add(ext_len)
        .filter(|&end| end <= bytes.len())
        .ok_or_else(|| {
            DecodeError::Binary(format!(
                "extFields length {ext_len} at byte {} runs past the {}-byte header",
                ext_start - 4,
                bytes.len()
            ))
        })?;
    let mut ext_fields = BTreeMap::new();
    let mut ext = Reader {
        bytes: &bytes[..ext_end],
        pos: ext_start,
    };
    while ext.pos < ext_end {
        let key_len = ext.i16("extFields key length")?;
        let key_len = usize::try_from(key_len).map_err(|_| {
            DecodeError::Binary(format!(
                "negative extFields key length {key_len} at byte {}",
                ext.pos - 2
            ))
        })?;
        let key = ext.string(key_len, "extFields key")?;
        let value_len = ext.len_i32("extFields value length")?;
        let value = ext.string(value_len, "extFields value")?;
        ext_fields.insert(key, value);
    }
    if ext_end != bytes.len() {
        return Err(DecodeError::Binary(format!(
            "{} unexpected bytes after the extFields, which end at byte {ext_end}",
            bytes.len() - ext_end
        )));
    }
    Ok(Header {
        code,
        language: language.to_owned(),
        version,
        opaque,
        flag,
        remark,
        ext_fields,
    })
}

/// Appends `header` in the binary layout.
pub fn encode_binary_header(header: &Header, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let code = i16::try_from(header.code).map_err(|_| EncodeError::OutOfRange {
        field: "code",
        value: header.code,
    })?;
    let version = i16::try_from(header.version).map_err(|_| EncodeError::OutOfRange {
        field: "version",
        value: header.version,
    })?;
    let language = language_byte(&header.language)
        .ok_or_else(|| EncodeError::UnknownLanguage(header.language.clone()))?;
    let remark = header.remark.as_deref().unwrap_or("");
    let remark_len = len_i32(remark.len(), "remark")?;
    let mut ext_len = 0usize;
    for (k, v) in &header.ext_fields {
        i16::try_from(k.len()).map_err(|_| EncodeError::FieldTooLong {
            what: "extFields key",
            len_bytes: k.len(),
        })?;
        len_i32(v.len(), "extFields value")?;
        ext_len = ext_len.saturating_add(2 + k.len() + 4 + v.len());
    }
    let ext_len_i32 = len_i32(ext_len, "extFields")?;

    out.reserve(FIXED_BYTES + remark.len() + 4 + ext_len);
    out.extend_from_slice(&code.to_be_bytes());
    out.push(language);
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(&header.opaque.to_be_bytes());
    out.extend_from_slice(&header.flag.to_be_bytes());
    out.extend_from_slice(&remark_len.to_be_bytes());
    out.extend_from_slice(remark.as_bytes());
    out.extend_from_slice(&ext_len_i32.to_be_bytes());
    for (k, v) in &header.ext_fields {
        // Both lengths were checked above.
        out.extend_from_slice(&(k.len() as i16).to_be_bytes());
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(&(v.len() as i32).to_be_bytes());
        out.extend_from_slice(v.as_bytes());
    }
    Ok(())
}

fn len_i32(len: usize, what: &'static str) -> Result<i32, EncodeError> {
    i32::try_from(len).map_err(|_| EncodeError::FieldTooLong {
        what,
        len_bytes: len,
    })
}

/// A bounds-checked big-endian cursor whose errors name the field and its byte position.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| {
                DecodeError::Binary(format!(
                    "{what} ({n} bytes at byte {}) runs past the end at byte {}",
                    self.pos,
                    self.bytes.len()
                ))
            })?;
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn i16(&mut self, what: &str) -> Result<i16, DecodeError> {
        let b = self.take(2, what)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self, what: &str) -> Result<i32, DecodeError> {
        let b = self.take(4, what)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// An int32 length field; negative values are refused.
    fn len_i32(&mut self, what: &str) -> Result<usize, DecodeError> {
        let at = self.pos;
        let v = self.i32(what)?;
        usize::try_from(v)
            .map_err(|_| DecodeError::Binary(format!("negative {what} {v} at byte {at}")))
    }

    fn string(&mut self, n: usize, what: &str) -> Result<String, DecodeError> {
        let at = self.pos;
        let raw = self.take(n, what)?;
        String::from_utf8(raw.to_vec())
            .map_err(|_| DecodeError::Binary(format!("{what} at byte {at} is not UTF-8")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer header of vector 040: SUCCESS, JAVA, version 407, opaque 0, flag 1.
    const V040: &str = "000000019700000000000000010000000000000000";

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    #[test]
    fn test_decodes_the_captured_binary_answer() {
        let h = decode_binary_header(&unhex(V040)).expect("valid header");
        assert_eq!(
            h,
            Header {
                code: 0,
                language: "JAVA".into(),
                version: 407,
                opaque: 0,
                flag: 1,
                remark: None,
                ext_fields: BTreeMap::new(),
            }
        );
        let mut out = Vec::new();
        encode_binary_header(&h, &mut out).expect("encodable");
        assert_eq!(out, unhex(V040));
    }

    #[test]
    fn test_round_trips_remark_and_ext_fields() {
        let mut h = Header {
            code: -3,
            language: "CPP".into(),
            version: 63,
            opaque: i32::MAX,
            flag: 2,
            remark: Some("héllo".into()),
            ..Header::default()
        };
        h.ext_fields.insert("topic".into(), "TopicTest".into());
        h.ext_fields.insert(String::new(), String::new());
        let mut out = Vec::new();
        encode_binary_header(&h, &mut out).expect("encodable");
        assert_eq!(decode_binary_header(&out).expect("decodable"), h);
    }

    #[test]
    fn test_rejects_truncation_at_every_byte() {
        let mut h = Header {
            remark: Some("r".into()),
            ..Header::default()
        };
        h.ext_fields.insert("k".into(), "v".into());
        let mut out = Vec::new();
        encode_binary_header(&h, &mut out).expect("encodable");
        for cut in 0..out.len() {
            let e = decode_binary_header(&out[..cut]).expect_err("truncated");
            assert!(matches!(e, DecodeError::Binary(_)), "{cut}: {e:?}");
        }
    }

    #[test]
    fn test_rejects_negative_lengths_unknown_language_and_trailing_bytes() {
        let mut bad_remark = unhex(V040);
        bad_remark[13..17].copy_from_slice(&(-1i32).to_be_bytes());
        let e = decode_binary_header(&bad_remark).expect_err("negative remark length");
        assert!(
            e.to_string()
                .contains("negative remark length -1 at byte 13"),
            "{e}"
        );

        let mut bad_language = unhex(V040);
        bad_language[2] = 99;
        let e = decode_binary_header(&bad_language).expect_err("unknown language");
        assert!(e.to_string().contains("LanguageCode byte 99"), "{e}");

        let mut trailing = unhex(V040);
        trailing.push(0);
        let e = decode_binary_header(&trailing).expect_err("trailing byte");
        assert!(e.to_string().contains("1 unexpected bytes"), "{e}");

        let mut overrun = unhex(V040);
        overrun[17..21].copy_from_slice(&8i32.to_be_bytes());
        overrun.extend_from_slice(&[0, 1, b'k', 0, 0, 0, 9, b'v']);
        let e = decode_binary_header(&overrun).expect_err("value runs past extFields");
        assert!(e.to_string().contains("extFields value"), "{e}");
    }

    #[test]
    fn test_encode_refuses_what_the_layout_cannot_hold() {
        let h = Header {
            code: 200_050,
            ..Header::default()
        };
        assert_eq!(
            encode_binary_header(&h, &mut Vec::new()),
            Err(EncodeError::OutOfRange {
                field: "code",
                value: 200_050
            })
        );
        let h = Header {
            language: "COBOL".into(),
            ..Header::default()
        };
        assert_eq!(
            encode_binary_header(&h, &mut Vec::new()),
            Err(EncodeError::UnknownLanguage("COBOL".into()))
        );
        let mut h = Header::default();
        h.ext_fields.insert("k".repeat(40_000), String::new());
        assert!(matches!(
            encode_binary_header(&h, &mut Vec::new()),
            Err(EncodeError::FieldTooLong { .. })
        ));
    }
}
