"""Random sequences of puts, reads and reopens, checked against a plain Python model of the
queues."""

import shutil
import struct
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pyrmq import _core
from pyrmq.config import StoreConfig
from pyrmq.store import GetMessageStatus, MessageStore

CONFIG = StoreConfig(
    mapped_file_size_commit_log=64 * 1024,
    mapped_file_size_consume_queue=20 * 16,
    max_hash_slot_num=64,
    max_index_num=256,
)
MAX_COUNT = CONFIG.max_transfer_count_on_message_in_memory
# get() examines at least this many units per call; the model's queues stay shorter.
SCAN_UNITS = 800

topics = st.sampled_from(["PropA", "PropB"])
queue_ids = st.integers(0, 2)
tags = st.sampled_from([None, "TagA", "TagB", "TagC"])
bodies = st.binary(max_size=600)
filters = st.sampled_from(
    [None, "*", "TagA", "TagB || TagC", "TagA||TagC", ["TagC"], ["TagB", "TagZ"], "TagZ"]
)


def tag_code(tag: str | None) -> int:
    return _core.java_string_hash(tag) if tag else 0


def filter_codes(expr: str | list[str] | None) -> set[int] | None:
    """The tag codes a subscription keeps; None keeps everything."""
    if expr is None:
        return None
    names = [p.strip() for p in expr.split("||")] if isinstance(expr, str) else expr
    names = [n for n in names if n]
    if not names or "*" in names:
        return None
    return {tag_code(n) for n in names}


def encode_batch(items: list[tuple[bytes, str | None]]) -> bytes:
    out = b""
    for body, tag in items:
        props = f"TAGS\x01{tag}".encode() if tag else b""
        out += struct.pack(">iiiii", 22 + len(body) + len(props), 0, 0, 0, len(body)) + body
        out += struct.pack(">h", len(props)) + props
    return out


class StoreVsModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="pyrmq-model-")
        self.store = MessageStore.open(self.root, CONFIG, background_services=False)
        # (topic, queue id) -> [(body, tag, phy_offset)] in queue order.
        self.queues: dict[tuple[str, int], list[tuple[bytes, str | None, int]]] = {}
        self.max_phy = 0

    def teardown(self) -> None:
        self.store.close()
        del self.store
        shutil.rmtree(self.root)

    def _appended(self, key, items, result) -> None:
        queue = self.queues.setdefault(key, [])
        assert result.queue_offsets == list(range(len(queue), len(queue) + len(items)))
        segment = CONFIG.mapped_file_size_commit_log
        if result.phy_offset != self.max_phy:
            # The group did not fit: the log rolled over to the next segment.
            assert result.phy_offset == self.max_phy - self.max_phy % segment + segment
            assert self.max_phy % segment + result.wrote_bytes + 8 > segment
        assert result.phy_offsets == sorted(result.phy_offsets)
        for (body, tag), phy in zip(items, result.phy_offsets, strict=True):
            queue.append((body, tag, phy))
        self.max_phy = result.phy_offset + result.wrote_bytes
        assert self.store.max_phy_offset == self.max_phy

    @rule(topic=topics, queue_id=queue_ids, body=bodies, tag=tags)
    def put(self, topic, queue_id, body, tag):
        r = self.store.put(topic, body, queue_id=queue_id, tags=tag)
        self._appended((topic, queue_id), [(body, tag)], r)

    @rule(
        topic=topics,
        queue_id=queue_ids,
        batch=st.lists(bodies, min_size=1, max_size=6),
        tag=tags,
    )
    def put_batch(self, topic, queue_id, batch, tag):
        r = self.store.put_batch(topic, batch, queue_id=queue_id, tags=tag)
        self._appended((topic, queue_id), [(b, tag) for b in batch], r)

    @rule(
        topic=topics,
        queue_id=queue_ids,
        items=st.lists(st.tuples(bodies, tags), min_size=1, max_size=6),
    )
    def put_encoded_batch(self, topic, queue_id, items):
        r = self.store.put_encoded_batch(topic, encode_batch(items), queue_id=queue_id)
        self._appended((topic, queue_id), items, r)

    @rule(
        topic=topics,
        queue_id=queue_ids,
        offset=st.integers(0, 60),
        expr=filters,
        max_count=st.integers(1, 40),
    )
    def get(self, topic, queue_id, offset, expr, max_count):
        got = self.store.get(topic, queue_id, offset, max_count=max_count, tags=expr)
        assert got.corrupt_offsets == []
        queue = self.queues.get((topic, queue_id))
        if queue is None:
            assert got.status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
            return
        assert (got.min_offset, got.max_offset) == (0, len(queue))
        if offset > len(queue):
            assert got.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY
            assert got.message_count == 0
            assert got.next_begin_offset == len(queue)
            return
        if offset == len(queue):
            assert got.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
            assert got.next_begin_offset == offset
            return
        codes = filter_codes(expr)
        limit = min(max_count, MAX_COUNT)
        matches = [
            i
            for i in range(offset, min(len(queue), offset + max(limit, SCAN_UNITS)))
            if codes is None or tag_code(queue[i][1]) in codes
        ][:limit]
        if not matches:
            assert got.status is GetMessageStatus.NO_MATCHED_MESSAGE
            assert got.message_count == 0
            assert got.next_begin_offset == len(queue)
            return
        assert got.status is GetMessageStatus.FOUND
        assert got.queue_offsets == matches
        assert got.phy_offsets == [queue[i][2] for i in matches]
        msgs = got.messages()
        assert [m.body for m in msgs] == [queue[i][0] for i in matches]
        assert [m.tags for m in msgs] == [queue[i][1] for i in matches]
        assert {(m.topic, m.queue_id) for m in msgs} == {(topic, queue_id)}
        expected_next = matches[-1] + 1 if len(matches) == limit else len(queue)
        assert got.next_begin_offset == expected_next

    @precondition(lambda self: self.queues)
    @rule(data=st.data())
    def look_up(self, data):
        key = data.draw(st.sampled_from(sorted(self.queues)))
        queue = self.queues[key]
        offset = data.draw(st.integers(0, len(queue) - 1))
        body, tag, phy = queue[offset]
        m = self.store.look_message_by_offset(phy)
        assert m is not None
        assert (m.topic, m.queue_id, m.queue_offset, m.body, m.tags) == (
            key[0],
            key[1],
            offset,
            body,
            tag,
        )
        assert self.store.view_message_by_id(m.msg_id).body == body

    @rule()
    def reopen(self):
        self.store.close()
        self.store = MessageStore.open(self.root, CONFIG, background_services=False)
        assert self.store.max_phy_offset == self.max_phy

    @invariant()
    def offsets_match_the_model(self):
        assert self.store.queue_ids() == sorted(self.queues)
        for (topic, queue_id), queue in self.queues.items():
            assert self.store.min_offset(topic, queue_id) == 0
            assert self.store.max_offset(topic, queue_id) == len(queue)


StoreVsModel.TestCase.settings = settings(stateful_step_count=30)
test_store_matches_the_model = StoreVsModel.TestCase
