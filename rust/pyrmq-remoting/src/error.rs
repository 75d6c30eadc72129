//! Decode and encode errors. A decode error means the peer sent a malformed frame: the stream
//! has lost its framing and the connection must be closed.

/// What is wrong with a received frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// `L + 4` is above the maximum frame size; nothing of the frame was buffered.
    #[error(
        "frame of {frame_bytes} bytes (length field {length}) exceeds the maximum frame size of \
         {max_frame_bytes} bytes"
    )]
    FrameTooLarge {
        length: u32,
        frame_bytes: u64,
        max_frame_bytes: usize,
    },
    /// `L` is below 4, so there is no room for the header-length word.
    #[error("length field {length} is below 4: no room for the header-length word")]
    FrameTooShort { length: u32 },
    /// `H` is larger than the `L - 4` bytes that follow the header-length word.
    #[error(
        "header length {header_bytes} exceeds the {available_bytes} bytes of the frame after the \
         header-length word"
    )]
    HeaderLengthExceedsFrame {
        header_bytes: u32,
        available_bytes: u32,
    },
    /// The high byte of the header-length word is neither 0 (JSON) nor 1 (ROCKETMQ).
    #[error("unknown serialize type {0} in the header-length word (0 = JSON, 1 = ROCKETMQ)")]
    UnknownSerializeType(u8),
    /// The JSON header is not valid JSON or does not have the members a command needs.
    #[error("invalid JSON header: {0}")]
    Json(String),
    /// The ROCKETMQ binary header is truncated or inconsistent.
    #[error("invalid ROCKETMQ binary header: {0}")]
    Binary(String),
}

/// Why a command cannot be put on the wire.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// A field does not fit the int16 the ROCKETMQ binary header has for it.
    #[error("{field} {value} does not fit the int16 of the ROCKETMQ binary header")]
    OutOfRange { field: &'static str, value: i32 },
    /// The language has no LanguageCode byte, so it cannot go into a binary header.
    #[error("language {0:?} has no LanguageCode byte")]
    UnknownLanguage(String),
    /// A string does not fit the length field the binary header has for it.
    #[error("{what} of {len_bytes} bytes does not fit its length field")]
    FieldTooLong {
        what: &'static str,
        len_bytes: usize,
    },
    /// The encoded header is longer than the 24 bits of `H` allow.
    #[error("header of {0} bytes exceeds the 24-bit header length (at most 16777215)")]
    HeaderTooLarge(usize),
    /// The frame is longer than the int32 length field allows.
    #[error("frame of {0} bytes exceeds the int32 length field")]
    FrameTooLarge(usize),
}
