//! Frame splitting and whole-frame encoding. See the crate docs for the frame layout.

use crate::binary::{decode_binary_header, encode_binary_header};
use crate::error::{DecodeError, EncodeError};
use crate::header::{Header, SerializeType};
use crate::json::{decode_json_header, encode_json_header};

/// Java's default `frameMaxLength`: the largest frame, length field included.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;
/// Size of the leading length field `L`.
pub const LENGTH_FIELD_BYTES: usize = 4;
/// Length field plus header-length word.
const PREFIX_BYTES: usize = 8;
/// The largest `H` the 24 low bits of the header-length word can hold.
const MAX_HEADER_BYTES: usize = 0x00FF_FFFF;

/// One whole frame, borrowed from the buffer it was split from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// How `header` is encoded.
    pub serialize_type: SerializeType,
    /// The `H` header bytes.
    pub header: &'a [u8],
    /// The body bytes; may be empty.
    pub body: &'a [u8],
}

impl Frame<'_> {
    /// Bytes the frame takes in the stream: `L + 4`.
    pub fn frame_bytes(&self) -> usize {
        PREFIX_BYTES + self.header.len() + self.body.len()
    }

    /// Decodes the header as its serialize type says.
    pub fn decode_header(&self) -> Result<Header, DecodeError> {
        match self.serialize_type {
            SerializeType::Json => decode_json_header(self.header),
            SerializeType::RocketMq => decode_binary_header(self.header),
        }
    }
}

/// Splits the frame at the start of `buf`.
///
/// Returns `Ok(None)` while the frame is incomplete. The checks run as soon as the bytes they
/// need are there: the size limit and `L >= 4` on the first 4 bytes, the serialize type and
/// `H <= L - 4` on the first 8. So an oversized frame is refused before any of it is buffered.
pub fn split_frame(buf: &[u8], max_frame_bytes: usize) -> Result<Option<Frame<'_>>, DecodeError> {
    let Some(length) = read_u32(buf, 0) else {
        return Ok(None);
    };
    if length < 4 {
        return Err(DecodeError::FrameTooShort { length });
    }
    let frame_bytes = u64::from(length) + LENGTH_FIELD_BYTES as u64;
    if frame_bytes > max_frame_bytes as u64 {
        return Err(DecodeError::FrameTooLarge {
            length,
            frame_bytes,
            max_frame_bytes,
        });
    }
    let Some(word) = read_u32(buf, 4) else {
        return Ok(None);
    };
    let type_byte = (word >> 24) as u8;
    let serialize_type =
        SerializeType::from_byte(type_byte).ok_or(DecodeError::UnknownSerializeType(type_byte))?;
    let header_bytes = word & 0x00FF_FFFF;
    let available_bytes = length - 4;
    if header_bytes > available_bytes {
        return Err(DecodeError::HeaderLengthExceedsFrame {
            header_bytes,
            available_bytes,
        });
    }
    // frame_bytes <= max_frame_bytes, so it fits a usize.
    let frame_bytes = frame_bytes as usize;
    if buf.len() < frame_bytes {
        return Ok(None);
    }
    let header_end = PREFIX_BYTES + header_bytes as usize;
    Ok(Some(Frame {
        serialize_type,
        header: &buf[PREFIX_BYTES..header_end],
        body: &buf[header_end..frame_bytes],
    }))
}

fn read_u32(buf: &[u8], at: usize) -> Option<u32> {
    let b = buf.get(at..at + 4)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Iterates over the whole frames at the start of a buffer.
///
/// Stops at the first incomplete frame; [`FrameSplitter::consumed`] then tells how many bytes
/// the returned frames took. After an error the iterator yields nothing more: the stream has
/// lost its framing.
#[derive(Debug, Clone)]
pub struct FrameSplitter<'a> {
    buf: &'a [u8],
    consumed: usize,
    max_frame_bytes: usize,
    done: bool,
}

impl<'a> FrameSplitter<'a> {
    /// A splitter over `buf` that refuses frames above `max_frame_bytes` (length field included).
    pub fn new(buf: &'a [u8], max_frame_bytes: usize) -> Self {
        Self {
            buf,
            consumed: 0,
            max_frame_bytes,
            done: false,
        }
    }

    /// Bytes taken by the frames returned so far.
    pub fn consumed(&self) -> usize {
        self.consumed
    }
}

impl<'a> Iterator for FrameSplitter<'a> {
    type Item = Result<Frame<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match split_frame(&self.buf[self.consumed..], self.max_frame_bytes) {
            Ok(Some(frame)) => {
                self.consumed += frame.frame_bytes();
                Some(Ok(frame))
            }
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// A frame with its header decoded; the body stays borrowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedFrame<'a> {
    /// The decoded header.
    pub header: Header,
    /// How the header was encoded; a response should use the same.
    pub serialize_type: SerializeType,
    /// The body, borrowed from the split buffer.
    pub body: &'a [u8],
}

/// Splits and decodes every whole frame at the start of `buf`.
///
/// Returns the frames and the bytes they took; an incomplete trailing frame is left for the
/// next call. The first malformed frame fails the whole call.
pub fn decode_frames(
    buf: &[u8],
    max_frame_bytes: usize,
) -> Result<(Vec<DecodedFrame<'_>>, usize), DecodeError> {
    let mut splitter = FrameSplitter::new(buf, max_frame_bytes);
    let mut out = Vec::new();
    for frame in splitter.by_ref() {
        let frame = frame?;
        out.push(DecodedFrame {
            header: frame.decode_header()?,
            serialize_type: frame.serialize_type,
            body: frame.body,
        });
    }
    Ok((out, splitter.consumed()))
}

/// The frame up to its body: length field, header-length word and header.
///
/// Callers append the `body_len` body bytes themselves, which saves a copy of large bodies.
pub fn encode_frame_prefix(
    header: &Header,
    serialize_type: SerializeType,
    body_len: usize,
) -> Result<Vec<u8>, EncodeError> {
    let mut out = vec![0u8; PREFIX_BYTES];
    match serialize_type {
        SerializeType::Json => encode_json_header(header, &mut out),
        SerializeType::RocketMq => encode_binary_header(header, &mut out)?,
    }
    let header_bytes = out.len() - PREFIX_BYTES;
    if header_bytes > MAX_HEADER_BYTES {
        return Err(EncodeError::HeaderTooLarge(header_bytes));
    }
    let length = (4 + header_bytes)
        .checked_add(body_len)
        .filter(|&l| i32::try_from(l).is_ok())
        .ok_or(EncodeError::FrameTooLarge(
            LENGTH_FIELD_BYTES
                .saturating_add(4 + header_bytes)
                .saturating_add(body_len),
        ))?;
    let word = (u32::from(serialize_type.as_byte()) << 24) | header_bytes as u32;
    out[..4].copy_from_slice(&(length as u32).to_be_bytes());
    out[4..8].copy_from_slice(&word.to_be_bytes());
    Ok(out)
}

/// The whole frame of a command.
pub fn encode_frame(
    header: &Header,
    serialize_type: SerializeType,
    body: &[u8],
) -> Result<Vec<u8>, EncodeError> {
    let mut out = encode_frame_prefix(header, serialize_type, body.len())?;
    out.extend_from_slice(body);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(header: &Header, body: &[u8]) -> Vec<u8> {
        encode_frame(header, SerializeType::Json, body).expect("encodable")
    }

    fn request(opaque: i32) -> Header {
        Header {
            code: 105,
            opaque,
            ..Header::default()
        }
    }

    #[test]
    fn test_encoded_frame_has_the_documented_prefix() {
        let bytes = frame(&request(0), b"xyz");
        let header_len = bytes.len() - 8 - 3;
        assert_eq!(
            u32::from_be_bytes(bytes[0..4].try_into().expect("4 bytes")) as usize,
            bytes.len() - 4
        );
        assert_eq!(
            u32::from_be_bytes(bytes[4..8].try_into().expect("4 bytes")) as usize,
            header_len
        );
        let bin = encode_frame(&request(0), SerializeType::RocketMq, b"").expect("encodable");
        assert_eq!(bin[4], 1, "serialize type in the high byte");
        assert_eq!(bin[7], 21, "fixed binary header of 21 bytes");
    }

    #[test]
    fn test_splits_back_to_back_frames_and_leaves_the_partial_tail() {
        let mut buf = frame(&request(1), b"a");
        buf.extend(frame(&request(2), b""));
        let whole = buf.len();
        let third = frame(&request(3), b"tail");
        buf.extend_from_slice(&third[..third.len() - 1]);
        let (frames, consumed) = decode_frames(&buf, DEFAULT_MAX_FRAME_BYTES).expect("valid");
        assert_eq!(consumed, whole);
        let opaques: Vec<i32> = frames.iter().map(|f| f.header.opaque).collect();
        assert_eq!(opaques, [1, 2]);
        assert_eq!(frames[0].body, b"a");
    }

    #[test]
    fn test_every_prefix_of_a_frame_is_incomplete_not_an_error() {
        let bytes = frame(&request(9), b"body");
        for cut in 0..bytes.len() {
            assert_eq!(
                split_frame(&bytes[..cut], DEFAULT_MAX_FRAME_BYTES),
                Ok(None)
            );
        }
        assert!(split_frame(&bytes, DEFAULT_MAX_FRAME_BYTES)
            .expect("valid")
            .is_some());
    }

    #[test]
    fn test_oversized_length_is_refused_from_the_length_field_alone() {
        let e = split_frame(&0x0100_0000u32.to_be_bytes(), DEFAULT_MAX_FRAME_BYTES)
            .expect_err("16 MiB + 4 bytes is over the limit");
        assert_eq!(
            e,
            DecodeError::FrameTooLarge {
                length: 0x0100_0000,
                frame_bytes: 0x0100_0004,
                max_frame_bytes: DEFAULT_MAX_FRAME_BYTES
            }
        );
        let just_fits = (DEFAULT_MAX_FRAME_BYTES as u32 - 4).to_be_bytes();
        assert_eq!(split_frame(&just_fits, DEFAULT_MAX_FRAME_BYTES), Ok(None));
        assert!(matches!(
            split_frame(&u32::MAX.to_be_bytes(), usize::MAX),
            Ok(None)
        ));
    }

    #[test]
    fn test_rejects_short_length_header_overrun_and_unknown_type() {
        assert_eq!(
            split_frame(&3u32.to_be_bytes(), 1024),
            Err(DecodeError::FrameTooShort { length: 3 })
        );
        let overrun = [0, 0, 0, 10, 0, 0, 0, 7];
        assert_eq!(
            split_frame(&overrun, 1024),
            Err(DecodeError::HeaderLengthExceedsFrame {
                header_bytes: 7,
                available_bytes: 6
            })
        );
        let unknown = [0, 0, 0, 4, 2, 0, 0, 0];
        assert_eq!(
            split_frame(&unknown, 1024),
            Err(DecodeError::UnknownSerializeType(2))
        );
    }

    #[test]
    fn test_a_bad_header_fails_the_whole_call() {
        let mut buf = frame(&request(1), b"");
        buf.extend_from_slice(&[0, 0, 0, 6, 0, 0, 0, 2, b'{', b'}']);
        let e = decode_frames(&buf, 1024).expect_err("second header lacks code");
        assert!(matches!(e, DecodeError::Json(_)), "{e:?}");
    }

    #[test]
    fn test_splitter_stops_after_an_error() {
        let buf = [0, 0, 0, 1, 0, 0, 0, 0];
        let mut s = FrameSplitter::new(&buf, 1024);
        assert!(matches!(s.next(), Some(Err(_))));
        assert!(s.next().is_none());
        assert_eq!(s.consumed(), 0);
    }

    #[test]
    fn test_encode_refuses_headers_over_24_bits() {
        let mut h = request(0);
        h.remark = Some("r".repeat(MAX_HEADER_BYTES));
        assert!(matches!(
            encode_frame_prefix(&h, SerializeType::Json, 0),
            Err(EncodeError::HeaderTooLarge(_))
        ));
        assert!(matches!(
            encode_frame_prefix(&request(0), SerializeType::Json, i32::MAX as usize),
            Err(EncodeError::FrameTooLarge(_))
        ));
    }
}
