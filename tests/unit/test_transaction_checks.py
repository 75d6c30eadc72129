"""The broker's transaction check rounds over a real store: halves are checked oldest due
first, a bounded round leaves the rest to go first next round, and ended, given-up and
vanished halves leave the due order with them."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, cast

import pytest

from pyrmq.broker.config import BrokerConfig
from pyrmq.broker.services.transactions import TransactionService
from pyrmq.properties import UNIQ_KEY
from pyrmq.store import MessageStore, PutResult, StoredMessage

INTERVAL_MS = 1_000


class _Topics:
    def create_system(self, *args: Any) -> None:
        pass


class _Broker:
    """What the service uses of a broker: its settings, store, topics and appends."""

    def __init__(self, store: MessageStore, **settings: Any) -> None:
        self.store = store
        self.config = BrokerConfig(**settings)
        self.topics = _Topics()
        self.metrics = None

    def put_now(self, fn: Any) -> Any:
        return fn()


@pytest.fixture
def store(open_store: Any, tmp_path: Path) -> MessageStore:
    return cast(MessageStore, open_store(tmp_path / "store"))


def _service(
    store: MessageStore, check_max: int = 15, checkpoint: Path | None = None
) -> TransactionService:
    broker = _Broker(
        store,
        transaction_timeout_ms=0,
        transaction_check_interval_ms=INTERVAL_MS,
        transaction_check_max=check_max,
    )
    return TransactionService(cast(Any, broker), checkpoint)


def _prepare(service: TransactionService, count: int) -> tuple[list[str], list[PutResult]]:
    """``count`` halves; their ids and puts, in the order sent."""
    ids, puts = [], []
    for i in range(count):
        puts.append(service.prepare("TopicTx", 0, f"h{i}".encode(), {UNIQ_KEY: f"h{i}"}, "PG_TX"))
        ids.append(f"h{i}")
    return ids, puts


def _consistent(service: TransactionService) -> None:
    assert sorted(q for _, q in service._due) == sorted(service.open)
    assert all((h.due_ms, q) in service._due for q, h in service.open.items())


def test_halves_not_reached_in_a_round_go_first_next_round(store: MessageStore) -> None:
    service = _service(store)
    ids, _ = _prepare(service, 6)
    asked: list[str] = []

    async def asker(stored: StoredMessage, _tx: str) -> bool:
        asked.append(stored.property(UNIQ_KEY) or "")
        return True

    service.askers.append(asker)
    now = int(time.time() * 1000) + 10

    async def rounds() -> None:
        # The smallest budget: one half a round.
        assert await service.check(now, budget_s=0) == 1
        assert asked == ids[:1]
        # h0 is due again before h1..h5 have been checked once: they go first.
        later = now + INTERVAL_MS
        assert await service.check(later, budget_s=0) == 1
        assert asked == ids[:2]
        assert await service.check(later) == 5
        assert asked == ids[:2] + ids[2:] + ids[:1]
        # Nothing is due before its interval has passed.
        assert await service.check(later + INTERVAL_MS - 1) == 0
        assert asked == ids[:2] + ids[2:] + ids[:1]
        asked.clear()
        # Checked in rounds at the same time, they are due together: in the order sent.
        assert await service.check(later + 10 * INTERVAL_MS) == 6
        assert asked == ids

    asyncio.run(rounds())
    assert [service.open[q].checks for q in sorted(service.open)] == [3, 2, 2, 2, 2, 2]
    _consistent(service)


def test_a_round_yields_to_the_loop_and_stops_after_its_budget(store: MessageStore) -> None:
    service = _service(store)
    ids, _ = _prepare(service, 40)
    asked: list[str] = []

    async def slow_asker(stored: StoredMessage, _tx: str) -> bool:
        # A check that holds the loop, as a write to a producer's connection does.
        until = time.perf_counter() + 0.004
        while time.perf_counter() < until:
            pass
        asked.append(stored.property(UNIQ_KEY) or "")
        return True

    service.askers.append(slow_asker)
    now = int(time.time() * 1000) + 10

    async def rounds() -> None:
        ticks = 0

        async def other_work() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        other = asyncio.get_running_loop().create_task(other_work())
        await asyncio.sleep(0)
        ticks = 0
        first = await service.check(now, budget_s=0.05)
        seen_during_round = ticks
        other.cancel()
        # Each half takes at least 4 ms: 50 ms of work is 13 halves at most.
        assert 1 <= first <= 13
        assert seen_during_round >= 1, "the round never yielded"
        assert asked == ids[:first]
        # The rest, in order, in the rounds after.
        while len(asked) < len(ids):
            assert await service.check(now, budget_s=0.05) >= 1

    asyncio.run(rounds())
    assert asked == ids
    _consistent(service)


def test_ended_given_up_and_vanished_halves_leave_the_due_order(store: MessageStore) -> None:
    service = _service(store, check_max=1)
    _, puts = _prepare(service, 5)
    asked: list[str] = []

    async def asker(stored: StoredMessage, _tx: str) -> bool:
        asked.append(stored.property(UNIQ_KEY) or "")
        if stored.property(UNIQ_KEY) == "h0":
            # Ended while the round is under way: the round goes on past it.
            service.end(puts[1].phy_offset, commit=True)
        return True

    service.askers.append(asker)
    now = int(time.time() * 1000) + 10
    # h2 vanished, as to retention: it points past the end of the commit log.
    service.open[puts[2].queue_offset].phy_offset = 1 << 40

    async def rounds() -> None:
        assert await service.check(now) == 3
        assert asked == ["h0", "h3", "h4"]
        assert sorted(service.open) == [puts[i].queue_offset for i in (0, 3, 4)]
        _consistent(service)
        service.end(puts[3].phy_offset, commit=False)
        _consistent(service)
        # h0 and h4 had their one check: given up, without asking.
        assert await service.check(now + INTERVAL_MS) == 0
        assert service.open == {}
        assert len(service._due) == 0

    asyncio.run(rounds())
    assert asked == ["h0", "h3", "h4"]


def test_a_half_that_cannot_be_given_up_does_not_hold_up_the_others(
    store: MessageStore,
) -> None:
    service = _service(store, check_max=1)
    _, puts = _prepare(service, 3)
    broker = cast(Any, service.broker)
    full = True

    def put_now(fn: Any) -> Any:
        if full:
            raise OSError(28, "No space left on device")
        return fn()

    broker.put_now = put_now
    asked: list[str] = []

    async def asker(stored: StoredMessage, _tx: str) -> bool:
        asked.append(stored.property(UNIQ_KEY) or "")
        return True

    service.askers.append(asker)
    # h0 has had its checks: its give-up needs a write, which the full disk refuses.
    service.open[puts[0].queue_offset].checks = 1
    now = int(time.time() * 1000) + 10

    async def rounds() -> None:
        nonlocal full
        assert await service.check(now) == 2
        assert asked == ["h1", "h2"]
        assert sorted(service.open) == [p.queue_offset for p in puts]
        assert service.open[puts[0].queue_offset].due_ms == now + INTERVAL_MS
        _consistent(service)
        # Space again: h0 goes to the given-up topic, then h1 and h2 after their one check.
        full = False
        assert await service.check(now + INTERVAL_MS) == 0
        assert service.open == {}
        assert len(service._due) == 0

    asyncio.run(rounds())


def test_a_start_reads_from_the_checkpoint_and_finds_the_same_open_halves(
    store: MessageStore, tmp_path: Path
) -> None:
    path = tmp_path / "transactions.json"
    service = _service(store, checkpoint=path)
    _, puts = _prepare(service, 3)
    service.end(puts[0].phy_offset, commit=True)
    _, later = _prepare(service, 3)  # h0..h2 again as ids; offsets 3..5
    # Ended out of order: the op of a half past the oldest open one lies past its op offset.
    service.end(later[1].phy_offset, commit=False)
    service.end(puts[2].phy_offset, commit=True)
    open_now = sorted(service.open)
    assert open_now == [1, 3, 5]
    asyncio.run(service.save_checkpoint())
    # h1, the oldest open, was stored before any op.
    assert json.loads(path.read_text()) == {"halfOffset": 1, "opOffset": 0}

    reloaded = _service(store, checkpoint=path)
    reloaded.load()
    assert sorted(reloaded.open) == open_now
    _consistent(reloaded)
    # The checkpoint is taken at its word: halves below it are not read again.
    path.write_text(json.dumps({"halfOffset": 4, "opOffset": 1}))
    trusting = _service(store, checkpoint=path)
    trusting.load()
    assert sorted(trusting.open) == [5]
    # One past the topics' ends (files replaced under it) is ignored: everything is read.
    for broken in (json.dumps({"halfOffset": 99, "opOffset": 0}), "[1]", "not json"):
        path.write_text(broken)
        path.with_name(path.name + ".bak").unlink(missing_ok=True)
        rereading = _service(store, checkpoint=path)
        rereading.load()
        assert sorted(rereading.open) == open_now, broken


def test_with_nothing_open_the_checkpoint_is_the_ends_and_later_halves_are_found(
    store: MessageStore, tmp_path: Path
) -> None:
    path = tmp_path / "transactions.json"
    service = _service(store, checkpoint=path)
    _, puts = _prepare(service, 4)
    for put in puts:
        service.end(put.phy_offset, commit=False)
    asyncio.run(service.save_checkpoint())
    assert json.loads(path.read_text()) == {"halfOffset": 4, "opOffset": 4}
    _, more = _prepare(service, 2)
    service.end(more[0].phy_offset, commit=True)
    reloaded = _service(store, checkpoint=path)
    reloaded.load()
    assert sorted(reloaded.open) == [more[1].queue_offset]


def test_a_checkpoint_is_written_only_once_the_ends_it_counts_are_on_disk(
    store: MessageStore, tmp_path: Path
) -> None:
    """Ends append without waiting for the disk (ASYNC_FLUSH): a checkpoint past a half whose
    end a power loss then took would leave that half unchecked for ever."""
    service = _service(store, checkpoint=tmp_path / "transactions.json")
    _, puts = _prepare(service, 2)
    ended = service.end(puts[0].phy_offset, commit=True)
    assert store.flushed_phy_offset < ended.end_offset
    asyncio.run(service.save_checkpoint())
    assert service.checkpoint().half_offset == 1
    assert store.flushed_phy_offset >= ended.end_offset
