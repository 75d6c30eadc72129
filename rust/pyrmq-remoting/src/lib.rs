//! RocketMQ 4.x "remoting" wire codec: frame splitting, and decoding and encoding of the JSON
//! and ROCKETMQ binary command headers. Pure Rust, no I/O: callers feed bytes they have read
//! and write the bytes they get back.
//!
//! # Frame
//!
//! Every integer is big-endian. A frame is `L + 4` bytes in all:
//!
//! | offset | size  | field | notes |
//! |-------:|------:|-------|-------|
//! | 0      | 4     | `L` (uint32) | length of everything after this field: `4 + H + body`. At least 4. `L + 4` must not exceed the maximum frame size (16 MiB by default, Java's `frameMaxLength`); the check runs on these 4 bytes alone, before anything is buffered for the frame. |
//! | 4      | 4     | header-length word | high byte `T` = serialize type (0 JSON, 1 ROCKETMQ); low 24 bits `H` = header length. `H <= L - 4`. |
//! | 8      | `H`   | header | a command without its body, encoded as `T` says |
//! | 8 + H  | `L - 4 - H` | body | opaque bytes; may be empty |
//!
//! # JSON header (T = 0)
//!
//! A JSON object. Members are read by name; unknown members are ignored.
//!
//! | member | JSON type | decoding |
//! |--------|-----------|----------|
//! | `code` | number | required; int32. A numeric string is accepted too. |
//! | `language` | string | the LanguageCode name (`"JAVA"`, `"CPP"`, ...); `"JAVA"` when missing or null |
//! | `version` | number | MQVersion ordinal; 0 when missing |
//! | `opaque` | number | required; int32 request id |
//! | `flag` | number | bit 0 = response, bit 1 = oneway; 0 when missing |
//! | `remark` | string | optional; null and missing both mean none |
//! | `extFields` | object | optional; values may be strings, numbers or booleans and each becomes its string form (`4` -> `"4"`, `true` -> `"true"`); null values are dropped |
//! | `serializeTypeCurrentRPC` | string | ignored |
//!
//! Whitespace after the object is allowed: the C++ client ends its headers with `\n`, which
//! counts in `H`. Encoding writes the shape a Java 4.9.7 broker answers with: compact, keys sorted,
//! `remark` left out when there is none, `extFields` left out when empty, every extFields value a
//! JSON string, and `"serializeTypeCurrentRPC":"JSON"`:
//!
//! ```text
//! {"code":0,"extFields":{"queueId":"1"},"flag":1,"language":"JAVA","opaque":7,"remark":"...","serializeTypeCurrentRPC":"JSON","version":407}
//! ```
//!
//! # ROCKETMQ binary header (T = 1)
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0 | 2 | code (int16) |
//! | 2 | 1 | language (LanguageCode byte, see [`LANGUAGES`]) |
//! | 3 | 2 | version (int16) |
//! | 5 | 4 | opaque (int32) |
//! | 9 | 4 | flag (int32) |
//! | 13 | 4 | remark length `R` (int32); 0 = none |
//! | 17 | `R` | remark, UTF-8 |
//! | 17 + R | 4 | extFields length `E` (int32) in bytes; 0 = none |
//! | 21 + R | `E` | entries: key length (int16), key, value length (int32), value; UTF-8 |
//!
//! The entries must fill `E` exactly and the header must end at `H`. Negative lengths are
//! refused. An empty remark encodes as length 0, so it decodes as none.
//!
//! Decoding never panics on any input; every failure is a [`DecodeError`] naming what is wrong.

mod binary;
mod compression;
mod error;
mod frame;
mod header;
mod json;

pub use binary::{decode_binary_header, encode_binary_header};
pub use compression::{inflate_body, BodyError, Compression, COMPRESSED_FLAG};
pub use error::{DecodeError, EncodeError};
pub use frame::{
    decode_frames, encode_frame, encode_frame_prefix, split_frame, DecodedFrame, Frame,
    FrameSplitter, DEFAULT_MAX_FRAME_BYTES, LENGTH_FIELD_BYTES,
};
pub use header::{
    language_byte, language_name, Header, SerializeType, LANGUAGES, ONEWAY_FLAG, RESPONSE_FLAG,
};
pub use json::{decode_json_header, encode_json_header};
