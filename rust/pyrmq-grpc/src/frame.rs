//! gRPC's length-prefixed messages, its `grpc-timeout` header and its status trailers.

use std::fmt::Write;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Flag byte and big-endian length before each message.
pub const PREFIX_LEN: usize = 5;

/// gRPC status codes this crate answers with itself.
pub mod code {
    pub const OK: u32 = 0;
    pub const CANCELLED: u32 = 1;
    pub const INTERNAL: u32 = 13;
    pub const RESOURCE_EXHAUSTED: u32 = 8;
    pub const UNIMPLEMENTED: u32 = 12;
}

/// One message framed for the wire (the only copy of `payload` made on the way out).
pub fn encode(payload: &[u8]) -> Bytes {
    encode_all([payload])
}

/// Messages framed one after another in one buffer, to be written together.
pub fn encode_all<'a>(messages: impl IntoIterator<Item = &'a [u8]>) -> Bytes {
    let mut out = BytesMut::new();
    for payload in messages {
        out.reserve(PREFIX_LEN + payload.len());
        out.put_u8(0);
        out.put_u32(payload.len() as u32);
        out.extend_from_slice(payload);
    }
    out.freeze()
}

/// Why a request's bytes cannot be read as messages; each is a status for the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The compressed flag without a `grpc-encoding` this server accepted.
    Compressed,
    /// A message longer than the limit.
    TooLarge { len: usize, max: usize },
}

impl DecodeError {
    pub fn status(&self) -> (u32, String) {
        match self {
            DecodeError::Compressed => (
                code::UNIMPLEMENTED,
                "compressed messages are not supported".to_owned(),
            ),
            DecodeError::TooLarge { len, max } => (
                code::RESOURCE_EXHAUSTED,
                format!("message of {len} bytes exceeds the maximum of {max}"),
            ),
        }
    }
}

/// Splits the bytes of a request stream, in whatever chunks they come, into messages.
pub struct Decoder {
    buf: BytesMut,
    max: usize,
}

impl Decoder {
    pub fn new(max_message_bytes: usize) -> Self {
        Decoder {
            buf: BytesMut::new(),
            max: max_message_bytes,
        }
    }

    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next whole message, if its bytes have all arrived.
    pub fn next_message(&mut self) -> Result<Option<Bytes>, DecodeError> {
        if self.buf.len() < PREFIX_LEN {
            return Ok(None);
        }
        if self.buf[0] != 0 {
            return Err(DecodeError::Compressed);
        }
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if len > self.max {
            return Err(DecodeError::TooLarge { len, max: self.max });
        }
        if self.buf.len() < PREFIX_LEN + len {
            // Grown as the bytes come, not to the length the client claims.
            self.buf
                .reserve((PREFIX_LEN + len - self.buf.len()).min(64 << 10));
            return Ok(None);
        }
        self.buf.advance(PREFIX_LEN);
        Ok(Some(self.buf.split_to(len).freeze()))
    }

    /// Whether part of a message is still waiting for its remaining bytes.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

/// A `grpc-timeout` value: at most 8 digits and a unit (H, M, S, m, u, n).
pub fn parse_timeout(value: &str) -> Option<Duration> {
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// `grpc-message`'s encoding: bytes outside printable ASCII, and `%`, as `%XX`.
pub fn percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for &b in message.as_bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_come_out_whole_whatever_the_chunks() {
        let mut wire = Vec::new();
        for payload in [&b""[..], b"a", &[7u8; 300][..]] {
            wire.extend_from_slice(&encode(payload));
        }
        assert_eq!(wire, encode_all([&b""[..], b"a", &[7u8; 300][..]]));
        for chunk in [1, 2, 5, 7, 64, wire.len()] {
            let mut decoder = Decoder::new(1 << 20);
            let mut got = Vec::new();
            for part in wire.chunks(chunk) {
                decoder.push(part);
                while let Some(m) = decoder.next_message().unwrap() {
                    got.push(m);
                }
            }
            assert!(decoder.is_empty());
            let lens: Vec<usize> = got.iter().map(Bytes::len).collect();
            assert_eq!(lens, [0, 1, 300], "chunks of {chunk}");
            assert!(got[2].iter().all(|&b| b == 7));
        }
    }

    #[test]
    fn compressed_and_oversized_messages_are_refused() {
        let mut decoder = Decoder::new(10);
        decoder.push(&[1, 0, 0, 0, 1, 9]);
        assert_eq!(decoder.next_message(), Err(DecodeError::Compressed));
        let mut decoder = Decoder::new(10);
        decoder.push(&[0, 0, 0, 0, 11]);
        assert_eq!(
            decoder.next_message(),
            Err(DecodeError::TooLarge { len: 11, max: 10 })
        );
        let mut partial = Decoder::new(10);
        partial.push(&[0, 0, 0, 0, 3, 1]);
        assert_eq!(partial.next_message(), Ok(None));
        assert!(!partial.is_empty());
    }

    #[test]
    fn timeouts_parse_as_grpc_writes_them() {
        assert_eq!(parse_timeout("20S"), Some(Duration::from_secs(20)));
        assert_eq!(parse_timeout("1500m"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_timeout("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(
            parse_timeout("99999999u"),
            Some(Duration::from_micros(99_999_999))
        );
        for bad in ["", "S", "123456789S", "10x", "-1S", "1.5S"] {
            assert_eq!(parse_timeout(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn status_messages_are_percent_encoded() {
        assert_eq!(percent_encode("no such topic"), "no such topic");
        assert_eq!(percent_encode("50% é\n"), "50%25 %C3%A9%0A");
    }
}
