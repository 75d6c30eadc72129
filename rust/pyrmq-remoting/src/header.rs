//! The command header: every member of a RemotingCommand except its body.

use std::collections::BTreeMap;

/// `flag` bit 0: the command is a response.
pub const RESPONSE_FLAG: i32 = 1;
/// `flag` bit 1: the request is oneway and gets no response.
pub const ONEWAY_FLAG: i32 = 1 << 1;

/// LanguageCode names and their bytes in binary headers (Java's `LanguageCode`).
pub const LANGUAGES: [(&str, u8); 14] = [
    ("JAVA", 0),
    ("CPP", 1),
    ("DOTNET", 2),
    ("PYTHON", 3),
    ("DELPHI", 4),
    ("ERLANG", 5),
    ("RUBY", 6),
    ("OTHER", 7),
    ("HTTP", 8),
    ("GO", 9),
    ("PHP", 10),
    ("OMS", 11),
    ("RUST", 12),
    ("NODE_JS", 13),
];

/// The LanguageCode byte of `name`, if it is a known language.
pub fn language_byte(name: &str) -> Option<u8> {
    LANGUAGES.iter().find(|(n, _)| *n == name).map(|&(_, b)| b)
}

/// The LanguageCode name of `byte`, if it is a known language.
pub fn language_name(byte: u8) -> Option<&'static str> {
    LANGUAGES.iter().find(|&&(_, b)| b == byte).map(|&(n, _)| n)
}

/// How a header is encoded: the high byte of the header-length word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum SerializeType {
    /// A JSON object (what every 4.x client sends by default, and the only type C++ reads).
    #[default]
    Json = 0,
    /// RocketMQ's own binary layout (`rocketmq.serialize.type=ROCKETMQ`).
    RocketMq = 1,
}

impl SerializeType {
    /// The serialize type of a header-length word's high byte.
    pub fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            0 => Some(Self::Json),
            1 => Some(Self::RocketMq),
            _ => None,
        }
    }

    /// The byte that goes into the high byte of the header-length word.
    pub fn as_byte(self) -> u8 {
        self as u8
    }
}

/// A command header. `ext_fields` holds the command's custom header, every value a string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The request code in a request, the response code in a response.
    pub code: i32,
    /// The sender's LanguageCode name, e.g. `"JAVA"` or `"CPP"`.
    pub language: String,
    /// The sender's MQVersion ordinal (407 = V4_9_7, 63 = V3_1_8).
    pub version: i32,
    /// The request id; a response copies it from its request.
    pub opaque: i32,
    /// Bit field: [`RESPONSE_FLAG`], [`ONEWAY_FLAG`].
    pub flag: i32,
    /// Free text, usually an error message.
    pub remark: Option<String>,
    /// The custom header fields, sorted by name.
    pub ext_fields: BTreeMap<String, String>,
}

impl Default for Header {
    fn default() -> Self {
        Self {
            code: 0,
            language: "JAVA".to_owned(),
            version: 0,
            opaque: 0,
            flag: 0,
            remark: None,
            ext_fields: BTreeMap::new(),
        }
    }
}

impl Header {
    /// Whether `flag` marks a response.
    pub fn is_response(&self) -> bool {
        self.flag & RESPONSE_FLAG != 0
    }

    /// Whether `flag` marks a oneway request.
    pub fn is_oneway(&self) -> bool {
        self.flag & ONEWAY_FLAG != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_language_table_round_trips_every_entry() {
        for (name, byte) in LANGUAGES {
            assert_eq!(language_byte(name), Some(byte));
            assert_eq!(language_name(byte), Some(name));
        }
        assert_eq!(language_byte("COBOL"), None);
        assert_eq!(language_name(200), None);
    }

    #[test]
    fn test_flag_bits_are_read_independently() {
        let h = Header {
            flag: RESPONSE_FLAG | ONEWAY_FLAG,
            ..Header::default()
        };
        assert!(h.is_response() && h.is_oneway());
        assert!(!Header::default().is_response());
        assert!(!Header::default().is_oneway());
    }

    #[test]
    fn test_serialize_type_bytes() {
        assert_eq!(SerializeType::from_byte(0), Some(SerializeType::Json));
        assert_eq!(SerializeType::from_byte(1), Some(SerializeType::RocketMq));
        assert_eq!(SerializeType::from_byte(2), None);
        assert_eq!(SerializeType::RocketMq.as_byte(), 1);
    }
}
