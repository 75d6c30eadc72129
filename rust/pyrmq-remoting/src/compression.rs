//! Message body compression as RocketMQ's sys flag records it.
//!
//! Bit 0 of a message's sys flag says its body is compressed; bits 8–10 (RocketMQ 4.9.4 on)
//! say with what: 1 an LZ4 frame, 2 a Zstandard frame, 3 zlib, and 0 zlib too, as every
//! producer before 4.9.4 wrote it. The body stays compressed from producer to consumer: the
//! broker stores it as sent, and the consumer inflates it.

use std::cell::RefCell;
use std::io::Read;

use miniz_oxide::inflate::TINFLStatus;

use thiserror::Error;

/// Sys flag bit: the body is compressed.
pub const COMPRESSED_FLAG: i32 = 0x1;
const TYPE_SHIFT: u32 = 8;
const TYPE_MASK: i32 = 0x7 << TYPE_SHIFT;

/// A compression a body may be stored with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    Zlib,
    Lz4,
    Zstd,
}

/// Why a compressed body cannot be read.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum BodyError {
    #[error("compression type {0} in the sys flag is unknown")]
    UnknownType(i32),
    #[error("the {kind} body does not inflate: {detail}")]
    Corrupt { kind: &'static str, detail: String },
    #[error("the {kind} body inflates past {limit} bytes")]
    TooLarge { kind: &'static str, limit: usize },
}

impl Compression {
    /// The compression a compressed body's sys flag names.
    pub fn of_sys_flag(sys_flag: i32) -> Result<Self, BodyError> {
        match (sys_flag & TYPE_MASK) >> TYPE_SHIFT {
            0 | 3 => Ok(Self::Zlib),
            1 => Ok(Self::Lz4),
            2 => Ok(Self::Zstd),
            other => Err(BodyError::UnknownType(other)),
        }
    }

    /// The sys flag bits of a body compressed this way. zlib keeps bits 8–10 clear, so
    /// that clients older than RocketMQ 4.9.4 read it too.
    pub fn sys_flag(self) -> i32 {
        COMPRESSED_FLAG
            | match self {
                Self::Zlib => 0,
                Self::Lz4 => 1 << TYPE_SHIFT,
                Self::Zstd => 2 << TYPE_SHIFT,
            }
    }

    /// The name RocketMQ's `CompressionType` gives it, lower-cased.
    pub fn name(self) -> &'static str {
        match self {
            Self::Zlib => "zlib",
            Self::Lz4 => "lz4",
            Self::Zstd => "zstd",
        }
    }

    /// The compression named `name` (any case), as RocketMQ's `compressType` names it.
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::Zlib, Self::Lz4, Self::Zstd]
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(name))
    }

    /// `body` compressed. `level` applies to zlib (0–9, clamped); LZ4 has no levels here, and
    /// Zstandard is written at its fastest level, the one this encoder has.
    pub fn compress(self, body: &[u8], level: i32) -> Vec<u8> {
        match self {
            Self::Zlib => miniz_oxide::deflate::compress_to_vec_zlib(body, level.clamp(0, 9) as u8),
            Self::Lz4 => {
                let mut encoder = lz4_flex::frame::FrameEncoder::new(Vec::new());
                std::io::Write::write_all(&mut encoder, body).expect("writing to a Vec");
                encoder.finish().expect("writing to a Vec")
            }
            Self::Zstd => {
                ruzstd::encoding::compress_to_vec(body, ruzstd::encoding::CompressionLevel::Fastest)
            }
        }
    }

    /// `body` inflated; refused past `limit` bytes, so that a small body cannot take the
    /// reader's memory.
    pub fn inflate(self, body: &[u8], limit: usize) -> Result<Vec<u8>, BodyError> {
        let kind = self.name();
        let corrupt = |detail: String| BodyError::Corrupt { kind, detail };
        if body.is_empty() {
            // An LZ4 reader takes no bytes for no frames; every compressor writes one.
            return Err(corrupt("the body is empty".to_owned()));
        }
        let out = match self {
            Self::Zlib => inflate_zlib(body, limit).map_err(|status| match status {
                TINFLStatus::HasMoreOutput => BodyError::TooLarge { kind, limit },
                TINFLStatus::FailedCannotMakeProgress => corrupt("it is truncated".to_owned()),
                TINFLStatus::Adler32Mismatch => corrupt("its checksum does not match".to_owned()),
                _ => corrupt("it is not a zlib stream".to_owned()),
            })?,
            Self::Lz4 => {
                // The decoder takes input ending between blocks as the frame's end.
                if !lz4_frames_end(body) {
                    return Err(corrupt("a frame has no end mark".to_owned()));
                }
                read_limited(lz4_flex::frame::FrameDecoder::new(body), limit)
                    .map_err(|e| corrupt(e.to_string()))?
            }
            Self::Zstd => {
                let decoder = ruzstd::decoding::StreamingDecoder::new(body)
                    .map_err(|e| corrupt(e.to_string()))?;
                read_limited(decoder, limit).map_err(|e| corrupt(e.to_string()))?
            }
        };
        if out.len() > limit {
            return Err(BodyError::TooLarge { kind, limit });
        }
        Ok(out)
    }
}

/// A compressed body inflated as its sys flag says; refused past `limit` bytes.
pub fn inflate_body(body: &[u8], sys_flag: i32, limit: usize) -> Result<Vec<u8>, BodyError> {
    Compression::of_sys_flag(sys_flag)?.inflate(body, limit)
}

/// A zlib stream inflated, past `limit` bytes refused (`HasMoreOutput`).
fn inflate_zlib(body: &[u8], limit: usize) -> Result<Vec<u8>, TINFLStatus> {
    use miniz_oxide::inflate::core::{decompress, inflate_flags, DecompressorOxide};
    thread_local! {
        // Its tables are 11 KB: zeroed anew for each 4 KiB body, they took a third of the time.
        static DECOMPRESSOR: RefCell<Box<DecompressorOxide>> = RefCell::new(Box::default());
    }
    let flags = inflate_flags::TINFL_FLAG_PARSE_ZLIB_HEADER
        | inflate_flags::TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF;
    DECOMPRESSOR.with_borrow_mut(|d| {
        d.init();
        let mut input = body;
        let mut out = vec![0; body.len().saturating_mul(4).max(1024).min(limit.max(1))];
        let mut end = 0;
        loop {
            let (status, read, written) = decompress(d, input, &mut out, end, flags);
            end += written;
            input = &input[read.min(input.len())..];
            match status {
                TINFLStatus::Done => {
                    out.truncate(end);
                    return Ok(out);
                }
                TINFLStatus::HasMoreOutput if out.len() < limit => {
                    out.resize(out.len().saturating_mul(2).min(limit), 0);
                }
                failed => return Err(failed),
            }
        }
    })
}

/// Reads to the end, or one byte past `limit`, which the caller refuses.
fn read_limited(reader: impl Read, limit: usize) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    reader
        .take(limit.saturating_add(1) as u64)
        .read_to_end(&mut out)?;
    Ok(out)
}

/// Whether `body` is whole LZ4 frames, each through its end mark (the block contents are
/// the decoder's to check).
fn lz4_frames_end(mut body: &[u8]) -> bool {
    const MAGIC: u32 = 0x184D_2204;
    const SKIPPABLE: u32 = 0x184D_2A50;
    fn take<'a>(body: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (body.len() >= n).then(|| body.split_at(n))?;
        *body = rest;
        Some(head)
    }
    fn word(body: &mut &[u8]) -> Option<u32> {
        take(body, 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn frame(body: &mut &[u8]) -> Option<()> {
        let magic = word(body)?;
        if magic & 0xFFFF_FFF0 == SKIPPABLE {
            let size = word(body)? as usize;
            return take(body, size).map(|_| ());
        }
        if magic != MAGIC {
            return None;
        }
        let flags = *take(body, 2)?.first()?;
        let block_checksums = flags & 0x10 != 0;
        let content_size = if flags & 0x08 != 0 { 8 } else { 0 };
        let dict_id = if flags & 0x01 != 0 { 4 } else { 0 };
        take(body, content_size + dict_id + 1)?;
        loop {
            let size = word(body)?;
            if size == 0 {
                break;
            }
            let data = (size & 0x7FFF_FFFF) as usize + if block_checksums { 4 } else { 0 };
            take(body, data)?;
        }
        let content_checksum = if flags & 0x04 != 0 { 4 } else { 0 };
        take(body, content_checksum).map(|_| ())
    }
    while !body.is_empty() {
        if frame(&mut body).is_none() {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Compression; 3] = [Compression::Zlib, Compression::Lz4, Compression::Zstd];

    fn sample(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| b"pyrmq body "[i % 11] ^ (i / 97) as u8)
            .collect()
    }

    #[test]
    fn each_compression_round_trips_through_its_sys_flag() {
        for c in ALL {
            for n in [0, 1, 4096, 300_000] {
                let body = sample(n);
                let packed = c.compress(&body, 5);
                assert_eq!(Compression::of_sys_flag(c.sys_flag()), Ok(c));
                assert_eq!(
                    inflate_body(&packed, c.sys_flag(), n).unwrap(),
                    body,
                    "{c:?} {n}"
                );
            }
        }
    }

    #[test]
    fn sys_flags_read_as_rocketmq_writes_them() {
        // 4.9.4+ producers set the type bits, zlib as 3; older ones leave them clear.
        assert_eq!(Compression::of_sys_flag(0x1), Ok(Compression::Zlib));
        assert_eq!(Compression::of_sys_flag(0x301), Ok(Compression::Zlib));
        assert_eq!(Compression::of_sys_flag(0x101), Ok(Compression::Lz4));
        assert_eq!(Compression::of_sys_flag(0x205), Ok(Compression::Zstd));
        assert_eq!(
            Compression::of_sys_flag(0x401),
            Err(BodyError::UnknownType(4))
        );
        assert_eq!(Compression::from_name("ZSTD"), Some(Compression::Zstd));
        assert_eq!(Compression::from_name("gzip"), None);
    }

    #[test]
    fn a_body_past_the_limit_is_refused() {
        let body = sample(10_000);
        for c in ALL {
            let packed = c.compress(&body, 5);
            assert_eq!(
                c.inflate(&packed, 9_999),
                Err(BodyError::TooLarge {
                    kind: c.name(),
                    limit: 9_999
                })
            );
            assert_eq!(c.inflate(&packed, 10_000).unwrap(), body);
        }
    }

    #[test]
    fn truncated_or_garbled_bodies_are_corrupt() {
        let body = sample(20_000);
        for c in ALL {
            let packed = c.compress(&body, 5);
            for cut in [0, 1, packed.len() / 2, packed.len() - 1] {
                assert!(
                    matches!(
                        c.inflate(&packed[..cut], 1 << 20),
                        Err(BodyError::Corrupt { .. })
                    ),
                    "{c:?} cut at {cut}"
                );
            }
            assert!(matches!(
                c.inflate(b"not compressed at all", 1 << 20),
                Err(BodyError::Corrupt { .. })
            ));
        }
    }

    #[test]
    fn a_body_cut_anywhere_never_inflates_to_less() {
        // Several blocks each (LZ4's are 64 KiB here, Zstandard's 128 KiB), so that cuts fall
        // between blocks as well as inside them.
        let body = sample(300_000);
        for c in ALL {
            let packed = c.compress(&body, 5);
            let mut cuts: Vec<usize> = (1..packed.len()).step_by(packed.len() / 400 + 1).collect();
            if c == Compression::Lz4 {
                // Just past the first block: header of 7 bytes, then size and data.
                let first = u32::from_le_bytes(packed[7..11].try_into().unwrap()) & 0x7FFF_FFFF;
                cuts.push(11 + first as usize);
            }
            for cut in cuts {
                assert!(
                    c.inflate(&packed[..cut], 1 << 20).is_err(),
                    "{c:?} cut at {cut}"
                );
            }
        }
    }
}
