"""Pure-Python store writing pyrmq's record and ConsumeQueue layouts.

It is the yardstick the benchmarks compare against: same record layout, same file layout, and
per message a CRC, offsets, a message id and a ConsumeQueue unit (pyrmq also seals each put with
a group fence, which this store does not write), written the way a careful Python
programmer would (preallocated mmap segments, ``struct.pack_into`` straight into the map, one lock
for writers, coalesced reads). It has no background services: async flush is left to the kernel
and ``flush()``; sync flush msyncs the dirty commit-log pages inside ``put``.

CommitLog record, message format V1, big-endian, IPv4 hosts (88 fixed bytes):

| off | size | field                | notes                                        |
|-----|------|----------------------|----------------------------------------------|
| 0   | 4    | TOTALSIZE            | whole record, counting this field            |
| 4   | 4    | MAGICCODE            | 0xDAA320A7 (blank record: 0xCBD43194)        |
| 8   | 4    | BODYCRC              | zlib.crc32(body) & 0x7FFFFFFF                |
| 12  | 4    | QUEUEID              |                                              |
| 16  | 4    | FLAG                 |                                              |
| 20  | 8    | QUEUEOFFSET          | unit index in the ConsumeQueue               |
| 28  | 8    | PHYSICALOFFSET       | byte position in the CommitLog               |
| 36  | 4    | SYSFLAG              |                                              |
| 40  | 8    | BORNTIMESTAMP        | ms                                           |
| 48  | 8    | BORNHOST             | IPv4 (4) + port (i32)                        |
| 56  | 8    | STORETIMESTAMP       | ms                                           |
| 64  | 8    | STOREHOST            | IPv4 (4) + port (i32)                        |
| 72  | 4    | RECONSUMETIMES       |                                              |
| 76  | 8    | PREPARED TX OFFSET   |                                              |
| 84  | 4    | BODYLEN              |                                              |
| 88  | B    | BODY                 |                                              |
|     | 1    | TOPICLEN             | signed, topic <= 127 bytes                   |
|     | T    | TOPIC                |                                              |
|     | 2    | PROPERTIESLEN        | signed i16                                   |
|     | P    | PROPERTIES           | name \\x01 value, pairs joined by \\x02        |

A record that does not fit in its segment with 8 bytes to spare is preceded by a blank record
(TOTALSIZE = bytes left in the segment, MAGICCODE 0xCBD43194) and goes to the next segment.

ConsumeQueue unit (20 bytes, big-endian): phy_offset i64 | size i32 | tags_code i64, where
tags_code is Java's String.hashCode of the TAGS property (0 without tags).

Crash story: ``flush()`` msyncs the commit log and the ConsumeQueues, then writes
``pystore.checkpoint`` (flushed commit-log offset u64 | crc32 of it u32, big-endian). ``open``
re-validates the log from the checkpoint (from the first segment without one): each record's CRC
is checked, records without a ConsumeQueue unit get one, and the log ends at the first bad
record. Units that point past that end are cleared, later segments are deleted.
"""

from __future__ import annotations

import itertools
import mmap
import os
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

MESSAGE_MAGIC = 0xDAA320A7
BLANK_MAGIC = 0xCBD43194
FIXED_BYTES = 88
END_FILE_MIN_BLANK_BYTES = 8
CQ_UNIT_BYTES = 20
MAX_TOPIC_BYTES = 127
MAX_PROPERTIES_BYTES = 32767
FILE_NAME_DIGITS = 20
SCAN_FILTER_MIN_UNITS = 800

HEAD = struct.Struct(">iIIiiqqiq4siq4siiqi")
UNIT = struct.Struct(">qiq")
TOTAL_MAGIC = struct.Struct(">iI")
CHECKPOINT = struct.Struct(">QI")
CHECKPOINT_NAME = "pystore.checkpoint"
assert HEAD.size == FIXED_BYTES
assert UNIT.size == CQ_UNIT_BYTES


@lru_cache(maxsize=4096)
def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for (unit,) in struct.iter_unpack(">H", data):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def encode_properties(properties: dict[str, str]) -> bytes:
    """``name\x01value`` pairs joined by ``\x02``, no separator after the last pair.

    That is what pyrmq's store and Java 4.9.7 write; older writers add a trailing ``\x02``,
    which ``decode_properties`` accepts too.
    """
    return b"\x02".join(k.encode() + b"\x01" + v.encode() for k, v in properties.items())


def decode_properties(raw: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in raw.split(b"\x02"):
        if not pair:
            continue
        name, sep, value = pair.partition(b"\x01")
        if sep:
            out[name.decode()] = value.decode()
    return out


def parse_host(host: str) -> tuple[bytes, int]:
    ip, _, port = host.rpartition(":")
    return socket.inet_aton(ip), int(port)


def record_size(body_len: int, topic_len: int, properties_len: int) -> int:
    return FIXED_BYTES + body_len + 1 + topic_len + 2 + properties_len


def tag_codes_for(tags: str | Sequence[str] | None) -> frozenset[int] | None:
    """``None``/``"*"`` -> no filter; ``"A || B"`` or ``["A", "B"]`` -> their hash codes."""
    if tags is None:
        return None
    names = [t.strip() for t in tags.split("||")] if isinstance(tags, str) else list(tags)
    names = [t for t in names if t]
    if not names or "*" in names:
        return None
    return frozenset(java_string_hash(t) for t in names)


class PutResult(NamedTuple):
    phy_offset: int
    queue_offset: int
    count: int
    msg_ids: list[str]
    wrote_bytes: int

    @property
    def msg_id(self) -> str:
        return self.msg_ids[0]


class GetResult(NamedTuple):
    buffer: bytes
    message_count: int
    next_begin_offset: int


class DecodedRecord(NamedTuple):
    phy_offset: int
    total_size: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    sys_flag: int
    born_timestamp_ms: int
    born_host: str
    store_timestamp_ms: int
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str]


def decode_records(buffer: bytes | memoryview) -> list[DecodedRecord]:
    """Decode records laid end to end (a PULL body); raises ValueError on a malformed record."""
    out: list[DecodedRecord] = []
    view = memoryview(buffer)
    pos = 0
    while pos < len(view):
        if len(view) - pos < FIXED_BYTES:
            raise ValueError(f"truncated record at byte {pos}")
        h = HEAD.unpack_from(view, pos)
        total, magic, crc = h[0], h[1], h[2]
        if magic != MESSAGE_MAGIC or total > len(view) - pos:
            raise ValueError(f"bad record at byte {pos}: total={total} magic={magic:#x}")
        body_len = h[16]
        p = pos + FIXED_BYTES
        body = bytes(view[p : p + body_len])
        p += body_len
        topic_len = view[p]
        topic = bytes(view[p + 1 : p + 1 + topic_len]).decode()
        p += 1 + topic_len
        (props_len,) = struct.unpack_from(">h", view, p)
        props = decode_properties(bytes(view[p + 2 : p + 2 + props_len]))
        if record_size(body_len, topic_len, props_len) != total:
            raise ValueError(f"record at byte {pos} has inconsistent lengths")
        out.append(
            DecodedRecord(
                phy_offset=h[6],
                total_size=total,
                body_crc=crc,
                queue_id=h[3],
                flag=h[4],
                queue_offset=h[5],
                sys_flag=h[7],
                born_timestamp_ms=h[8],
                born_host=f"{socket.inet_ntoa(h[9])}:{h[10]}",
                store_timestamp_ms=h[11],
                store_host=f"{socket.inet_ntoa(h[12])}:{h[13]}",
                reconsume_times=h[14],
                prepared_transaction_offset=h[15],
                body=body,
                topic=topic,
                properties=props,
            )
        )
        pos += total
    return out


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _file_name(start: int) -> str:
    return f"{start:0{FILE_NAME_DIGITS}d}"


class _Segment:
    """One preallocated file, mapped read-write for its whole life."""

    __slots__ = ("fd", "mm", "path", "size", "start")

    def __init__(self, path: Path, start: int, size: int, *, create: bool) -> None:
        self.path = path
        self.start = start
        self.size = size
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        try:
            actual = os.fstat(fd).st_size
            if create and actual == 0:
                os.ftruncate(fd, size)
                actual = size
            self.mm = mmap.mmap(fd, size) if actual == size else None
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        if self.mm is None:
            os.close(fd)
            raise ValueError(f"{path}: size {actual} != configured segment size {size}")

    def msync(self, start_rel: int, end_rel: int) -> None:
        aligned = start_rel - start_rel % mmap.PAGESIZE
        if end_rel > aligned:
            self.mm.flush(aligned, end_rel - aligned)

    def close(self) -> None:
        self.mm.close()
        os.close(self.fd)


def _load_segments(directory: Path, size: int) -> list[_Segment]:
    if not directory.is_dir():
        return []
    names = sorted(p.name for p in directory.iterdir() if p.name.isdigit())
    segments = [_Segment(directory / n, int(n), size, create=False) for n in names]
    for prev, nxt in itertools.pairwise(segments):
        if nxt.start != prev.start + size:
            raise ValueError(f"gap between {prev.path} and {nxt.path}")
    return segments


class CommitLog:
    def __init__(self, directory: Path, segment_bytes: int) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        directory.mkdir(parents=True, exist_ok=True)
        self.segments = _load_segments(directory, segment_bytes)
        first = self.segments[0].start if self.segments else 0
        self.wrote = first
        self.flushed = first

    @property
    def min_phy_offset(self) -> int:
        return self.segments[0].start if self.segments else 0

    def segment_for(self, phy_offset: int) -> _Segment:
        index = (phy_offset - self.segments[0].start) // self.segment_bytes
        return self.segments[index]

    def tail_for(self, size: int) -> tuple[_Segment, int]:
        """The segment and relative position for a ``size``-byte record, rolling over if needed."""
        if not self.segments:
            self._new_segment(self.wrote - self.wrote % self.segment_bytes)
        seg = self.segments[-1]
        rel = self.wrote - seg.start
        if rel >= self.segment_bytes:
            seg = self._new_segment(seg.start + self.segment_bytes)
            rel = 0
        elif size + END_FILE_MIN_BLANK_BYTES > self.segment_bytes - rel:
            TOTAL_MAGIC.pack_into(seg.mm, rel, self.segment_bytes - rel, BLANK_MAGIC)
            self.wrote = seg.start + self.segment_bytes
            seg = self._new_segment(self.wrote)
            rel = 0
        return seg, rel

    def _new_segment(self, start: int) -> _Segment:
        seg = _Segment(self.directory / _file_name(start), start, self.segment_bytes, create=True)
        self.segments.append(seg)
        self.wrote = max(self.wrote, start)
        return seg

    def read(self, phy_offset: int, size: int) -> bytes:
        seg = self.segment_for(phy_offset)
        rel = phy_offset - seg.start
        return seg.mm[rel : rel + size]

    def flush(self) -> None:
        """msync every page between the flushed and written positions."""
        end = self.wrote
        if not self.segments or self.flushed >= end:
            return
        first = self.segments[0].start
        index = max(0, (self.flushed - first) // self.segment_bytes)
        while index < len(self.segments):
            seg = self.segments[index]
            if seg.start >= end:
                break
            lo = max(self.flushed, seg.start) - seg.start
            hi = min(end, seg.start + self.segment_bytes) - seg.start
            seg.msync(lo, hi)
            index += 1
        self.flushed = end

    def truncate(self, end: int) -> None:
        """Drop everything from ``end``: later segments are deleted, the next header is zeroed."""
        while self.segments and self.segments[-1].start > end:
            seg = self.segments.pop()
            seg.close()
            seg.path.unlink()
        if self.segments and self.segments[-1].start + self.segment_bytes == end:
            pass
        elif self.segments:
            seg = self.segments[-1]
            rel = end - seg.start
            zeros = min(END_FILE_MIN_BLANK_BYTES, self.segment_bytes - rel)
            seg.mm[rel : rel + zeros] = bytes(zeros)
        self.wrote = end
        self.flushed = min(self.flushed, end)

    def close(self) -> None:
        for seg in self.segments:
            seg.close()
        self.segments = []


class ConsumeQueue:
    """20-byte units of one (topic, queue id); files are named by their first unit's byte offset."""

    def __init__(self, directory: Path, segment_bytes: int) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.units_per_segment = segment_bytes // CQ_UNIT_BYTES
        self.segments = _load_segments(directory, segment_bytes)
        self.min_offset = self.segments[0].start // CQ_UNIT_BYTES if self.segments else 0
        self.max_offset = self.min_offset
        if self.segments:
            self.max_offset = self._find_end()

    def _find_end(self) -> int:
        """First unit with size 0 in the last segment (units are written in order)."""
        while self.segments:
            seg = self.segments[-1]
            lo, hi = 0, self.units_per_segment
            while lo < hi:
                mid = (lo + hi) // 2
                _, size, _ = UNIT.unpack_from(seg.mm, mid * CQ_UNIT_BYTES)
                if size > 0:
                    lo = mid + 1
                else:
                    hi = mid
            if lo > 0 or len(self.segments) == 1:
                return seg.start // CQ_UNIT_BYTES + lo
            self.segments.pop().close()
        return self.min_offset

    def append(self, queue_offset: int, phy_offset: int, size: int, tags_code: int) -> None:
        if queue_offset != self.max_offset:
            raise ValueError(
                f"{self.directory}: unit for queue_offset={queue_offset}, "
                f"expected {self.max_offset}"
            )
        index = queue_offset - self.min_offset
        seg_index, unit_index = divmod(index, self.units_per_segment)
        if seg_index == len(self.segments):
            start = (self.min_offset + seg_index * self.units_per_segment) * CQ_UNIT_BYTES
            self.directory.mkdir(parents=True, exist_ok=True)
            self.segments.append(
                _Segment(self.directory / _file_name(start), start, self.segment_bytes, create=True)
            )
        UNIT.pack_into(
            self.segments[seg_index].mm, unit_index * CQ_UNIT_BYTES, phy_offset, size, tags_code
        )
        self.max_offset = queue_offset + 1

    def units(self, start: int, count: int) -> list[tuple[int, int, int]]:
        """Up to ``count`` units from queue offset ``start`` (fewer at the end of the queue)."""
        start = max(start, self.min_offset)
        end = min(self.max_offset, start + count)
        out: list[tuple[int, int, int]] = []
        pos = start
        while pos < end:
            seg_index, unit_index = divmod(pos - self.min_offset, self.units_per_segment)
            take = min(end - pos, self.units_per_segment - unit_index)
            off = unit_index * CQ_UNIT_BYTES
            view = memoryview(self.segments[seg_index].mm)[off : off + take * CQ_UNIT_BYTES]
            out.extend(UNIT.iter_unpack(view))
            view.release()
            pos += take
        return out

    def last_end(self) -> int | None:
        """Commit-log position just after the last dispatched record, or None if empty."""
        if self.max_offset == self.min_offset:
            return None
        phy, size, _ = self.units(self.max_offset - 1, 1)[0]
        return phy + size

    def truncate_after_phy(self, end: int) -> None:
        while self.max_offset > self.min_offset:
            phy, _, _ = self.units(self.max_offset - 1, 1)[0]
            if phy < end:
                break
            index = self.max_offset - 1 - self.min_offset
            seg_index, unit_index = divmod(index, self.units_per_segment)
            off = unit_index * CQ_UNIT_BYTES
            self.segments[seg_index].mm[off : off + CQ_UNIT_BYTES] = bytes(CQ_UNIT_BYTES)
            self.max_offset -= 1

    def flush(self) -> None:
        for seg in self.segments:
            seg.mm.flush()

    def close(self) -> None:
        for seg in self.segments:
            seg.close()
        self.segments = []


class PyStore:
    """Commit log + ConsumeQueues in pure Python. Writers are serialised by one lock."""

    def __init__(
        self,
        root: Path,
        *,
        segment_size: int,
        cq_segment_size: int,
        sync_flush: bool,
        store_host: str,
        max_message_size: int,
        check_crc_on_recover: bool,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        if cq_segment_size % CQ_UNIT_BYTES:
            raise ValueError(f"cq_segment_size={cq_segment_size} is not a multiple of 20")
        self.root = root
        self.segment_size = segment_size
        self.cq_segment_size = cq_segment_size
        self.sync_flush = sync_flush
        self.store_host = store_host
        self.max_message_size = max_message_size
        self.check_crc_on_recover = check_crc_on_recover
        self._clock_ms = clock_ms or _wall_clock_ms
        self._store_ip, self._store_port = parse_host(store_host)
        self._msg_id_prefix = (self._store_ip + self._store_port.to_bytes(4, "big")).hex().upper()
        self._lock = threading.Lock()
        self._tails: dict[tuple[str, bytes], bytes] = {}
        self._closed = False
        self.commit_log = CommitLog(root / "commitlog", segment_size)
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._load_queues()
        self._recover()

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        segment_size: int = 1 << 30,
        cq_segment_size: int = 6_000_000,
        sync_flush: bool = False,
        store_host: str = "127.0.0.1:10911",
        max_message_size: int = 4 * 1024 * 1024,
        check_crc_on_recover: bool = True,
        clock_ms: Callable[[], int] | None = None,
    ) -> PyStore:
        return cls(
            Path(path),
            segment_size=segment_size,
            cq_segment_size=cq_segment_size,
            sync_flush=sync_flush,
            store_host=store_host,
            max_message_size=max_message_size,
            check_crc_on_recover=check_crc_on_recover,
            clock_ms=clock_ms,
        )

    def __enter__(self) -> PyStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def min_phy_offset(self) -> int:
        return self.commit_log.min_phy_offset

    @property
    def max_phy_offset(self) -> int:
        return self.commit_log.wrote

    @property
    def flushed_phy_offset(self) -> int:
        return self.commit_log.flushed

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get((topic, queue_id))
        return cq.min_offset if cq else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get((topic, queue_id))
        return cq.max_offset if cq else 0

    def _queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            cq = ConsumeQueue(
                self.root / "consumequeue" / topic / str(queue_id), self.cq_segment_size
            )
            self.queues[(topic, queue_id)] = cq
        return cq

    def _load_queues(self) -> None:
        base = self.root / "consumequeue"
        if not base.is_dir():
            return
        for topic_dir in sorted(base.iterdir()):
            for queue_dir in sorted(topic_dir.iterdir()):
                if queue_dir.name.isdigit():
                    self._queue(topic_dir.name, int(queue_dir.name))

    def _tail(self, topic: str, props: bytes) -> bytes:
        key = (topic, props)
        tail = self._tails.get(key)
        if tail is None:
            topic_b = topic.encode()
            if not topic_b or len(topic_b) > MAX_TOPIC_BYTES:
                raise ValueError(f"topic {topic!r} must be 1..127 bytes")
            if len(props) > MAX_PROPERTIES_BYTES:
                raise ValueError(f"properties of {len(props)} bytes exceed {MAX_PROPERTIES_BYTES}")
            tail = bytes((len(topic_b),)) + topic_b + len(props).to_bytes(2, "big") + props
            if len(self._tails) < 4096:
                self._tails[key] = tail
        return tail

    @staticmethod
    def _properties(
        tags: str | None, keys: str | None, properties: dict[str, str] | None
    ) -> tuple[bytes, int]:
        props: dict[str, str] = {}
        if tags:
            props["TAGS"] = tags
        if keys:
            props["KEYS"] = keys
        if properties:
            props.update(properties)
        tags_code = java_string_hash(props["TAGS"]) if props.get("TAGS") else 0
        return encode_properties(props), tags_code

    def _append_locked(
        self,
        cq: ConsumeQueue,
        queue_id: int,
        body: bytes,
        tail: bytes,
        tags_code: int,
        flag: int,
        sys_flag: int,
        born_ts: int,
        born_ip: bytes,
        born_port: int,
        store_ts: int,
    ) -> tuple[int, int, int]:
        body_len = len(body)
        size = FIXED_BYTES + body_len + len(tail)
        seg, rel = self.commit_log.tail_for(size)
        phy = seg.start + rel
        queue_offset = cq.max_offset
        mm = seg.mm
        HEAD.pack_into(
            mm, rel, size, MESSAGE_MAGIC, zlib.crc32(body) & 0x7FFFFFFF, queue_id, flag,
            queue_offset, phy, sys_flag, born_ts, born_ip, born_port, store_ts,
            self._store_ip, self._store_port, 0, 0, body_len,
        )  # fmt: skip
        p = rel + FIXED_BYTES
        mm[p : p + body_len] = body
        p += body_len
        mm[p : p + len(tail)] = tail
        self.commit_log.wrote = phy + size
        cq.append(queue_offset, phy, size, tags_code)
        return phy, queue_offset, size

    def _check_open(self, queue_id: int) -> None:
        if self._closed:
            raise RuntimeError(f"store at {self.root} is closed")
        if not 0 <= queue_id < 1024:
            raise ValueError(f"queue_id={queue_id} out of range [0, 1024)")

    def put(
        self,
        topic: str,
        body: bytes,
        queue_id: int = 0,
        tags: str | None = None,
        properties: dict[str, str] | None = None,
        *,
        keys: str | None = None,
        flag: int = 0,
        sys_flag: int = 0,
        born_timestamp_ms: int | None = None,
        born_host: str = "127.0.0.1:0",
    ) -> PutResult:
        return self.put_batch(
            topic, (body,), queue_id, tags, properties=properties, keys=keys, flag=flag,
            sys_flag=sys_flag, born_timestamp_ms=born_timestamp_ms, born_host=born_host,
        )  # fmt: skip

    def put_batch(
        self,
        topic: str,
        bodies: Sequence[bytes],
        queue_id: int = 0,
        tags: str | None = None,
        *,
        properties: dict[str, str] | None = None,
        keys: str | None = None,
        flag: int = 0,
        sys_flag: int = 0,
        born_timestamp_ms: int | None = None,
        born_host: str = "127.0.0.1:0",
    ) -> PutResult:
        """Append every body to one (topic, queue) with contiguous queue offsets."""
        self._check_open(queue_id)
        props, tags_code = self._properties(tags, keys, properties)
        tail = self._tail(topic, props)
        largest = max(map(len, bodies), default=0)
        too_large = FIXED_BYTES + largest + len(tail) + END_FILE_MIN_BLANK_BYTES > self.segment_size
        if largest > self.max_message_size or too_large:
            raise ValueError(f"body of {largest} bytes is too large; nothing was written")
        born_ip, born_port = parse_host(born_host)
        store_ts = self._clock_ms()
        born_ts = store_ts if born_timestamp_ms is None else born_timestamp_ms
        prefix = self._msg_id_prefix
        msg_ids: list[str] = []
        wrote = 0
        with self._lock:
            cq = self._queue(topic, queue_id)
            first_phy = first_qoff = -1
            for body in bodies:
                phy, qoff, size = self._append_locked(
                    cq, queue_id, body, tail, tags_code, flag, sys_flag, born_ts, born_ip,
                    born_port, store_ts,
                )  # fmt: skip
                if first_phy < 0:
                    first_phy, first_qoff = phy, qoff
                msg_ids.append(f"{prefix}{phy:016X}")
                wrote += size
            if self.sync_flush:
                self.commit_log.flush()
        return PutResult(first_phy, first_qoff, len(msg_ids), msg_ids, wrote)

    def get(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_count: int = 32,
        tags: str | Sequence[str] | None = None,
        max_bytes: int | None = None,
    ) -> GetResult:
        """Up to ``max_count`` whole records from ``queue_offset``, end to end (a PULL body)."""
        cq = self.queues.get((topic, queue_id))
        if cq is None or queue_offset >= cq.max_offset:
            return GetResult(b"", 0, max(queue_offset, 0))
        codes = tag_codes_for(tags)
        limit = max_count if codes is None else max(max_count, SCAN_FILTER_MIN_UNITS)
        start = max(queue_offset, cq.min_offset)
        units = cq.units(start, limit)
        budget = max_bytes if max_bytes is not None else 1 << 62
        chunks: list[bytes] = []
        run_start = run_end = -1
        count = 0
        examined = 0
        used = 0
        for phy, size, code in units:
            if count >= max_count or (count and used + size > budget):
                break
            examined += 1
            if codes is not None and code not in codes:
                continue
            if phy == run_end and phy % self.segment_size:
                run_end += size
            else:
                if run_start >= 0:
                    chunks.append(self.commit_log.read(run_start, run_end - run_start))
                run_start, run_end = phy, phy + size
            count += 1
            used += size
        if run_start >= 0:
            chunks.append(self.commit_log.read(run_start, run_end - run_start))
        buffer = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return GetResult(buffer, count, start + examined)

    def scan(
        self,
        topic: str,
        queue_id: int,
        start: int,
        max_units: int,
        tag_codes: Iterable[int] | None = None,
    ) -> list[tuple[int, int, int]]:
        """Units ``(phy_offset, size, tags_code)`` in ``[start, start + max_units)`` that match."""
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            return []
        units = cq.units(start, max_units)
        if tag_codes is None:
            return units
        codes = frozenset(tag_codes)
        return [u for u in units if u[2] in codes]

    def flush(self) -> None:
        """msync the commit log and every ConsumeQueue, then record the checkpoint."""
        with self._lock:
            self.commit_log.flush()
            for cq in self.queues.values():
                cq.flush()
            self._write_checkpoint(self.commit_log.flushed)

    def close(self) -> None:
        if self._closed:
            return
        self.flush()
        self._closed = True
        self.commit_log.close()
        for cq in self.queues.values():
            cq.close()

    def _load_checkpoint(self) -> int | None:
        try:
            raw = (self.root / CHECKPOINT_NAME).read_bytes()
        except FileNotFoundError:
            return None
        if len(raw) != CHECKPOINT.size:
            return None
        offset, crc = CHECKPOINT.unpack(raw)
        return offset if zlib.crc32(raw[:8]) == crc else None

    def _write_checkpoint(self, flushed: int) -> None:
        head = flushed.to_bytes(8, "big")
        fd = os.open(self.root / CHECKPOINT_NAME, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, head + zlib.crc32(head).to_bytes(4, "big"), 0)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _recover(self) -> None:
        log = self.commit_log
        if not log.segments:
            for cq in self.queues.values():
                cq.truncate_after_phy(0)
            return
        first = log.segments[0].start
        last_end = log.segments[-1].start + self.segment_size
        start = self._load_checkpoint()
        if start is None or not first <= start <= last_end:
            start = first
        end = self._scan_from(start)
        log.truncate(end)
        log.flushed = min(start, end)
        for cq in self.queues.values():
            cq.truncate_after_phy(end)

    def _scan_from(self, start: int) -> int:
        """Check records from ``start`` (a record boundary); return the end of the valid log."""
        log = self.commit_log
        seg_bytes = self.segment_size
        check_crc = self.check_crc_on_recover
        index = min((start - log.segments[0].start) // seg_bytes, len(log.segments) - 1)
        rel = start - log.segments[index].start
        if rel >= seg_bytes:
            return start
        while index < len(log.segments):
            seg = log.segments[index]
            mm = seg.mm
            while True:
                if rel + FIXED_BYTES > seg_bytes:
                    if rel + END_FILE_MIN_BLANK_BYTES <= seg_bytes:
                        total, magic = TOTAL_MAGIC.unpack_from(mm, rel)
                        if magic == BLANK_MAGIC and total == seg_bytes - rel:
                            break
                    return seg.start + rel
                h = HEAD.unpack_from(mm, rel)
                total, magic = h[0], h[1]
                if magic == BLANK_MAGIC and total == seg_bytes - rel:
                    break
                if magic != MESSAGE_MAGIC or not FIXED_BYTES + 3 <= total <= seg_bytes - rel:
                    return seg.start + rel
                body_len = h[16]
                p = rel + FIXED_BYTES + body_len
                if body_len < 0 or p + 3 > rel + total:
                    return seg.start + rel
                topic_len = mm[p]
                (props_len,) = struct.unpack_from(">h", mm, p + 1 + topic_len)
                if record_size(body_len, topic_len, props_len) != total or h[6] != seg.start + rel:
                    return seg.start + rel
                if check_crc:
                    body_view = memoryview(mm)[rel + FIXED_BYTES : p]
                    crc = zlib.crc32(body_view) & 0x7FFFFFFF
                    body_view.release()
                    if crc != h[2]:
                        return seg.start + rel
                topic = mm[p + 1 : p + 1 + topic_len].decode()
                cq = self._queue(topic, h[3])
                if h[5] == cq.max_offset:
                    pstart = p + 3 + topic_len
                    props = decode_properties(mm[pstart : pstart + props_len])
                    tags = props.get("TAGS")
                    cq.append(h[5], h[6], total, java_string_hash(tags) if tags else 0)
                rel += total
            index += 1
            rel = 0
        last = log.segments[index - 1]
        return last.start + seg_bytes
