"""PopQueue's indexes against a plain model of the same state: every operation a receive, an
ack, a nack or a departing client makes, in any order, answers as a scan of all entries would."""

import json
from dataclasses import dataclass, field
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from pyrmq.proxy import pop, pop_state
from pyrmq.proxy.pop import PopQueue

CLIENTS = ("a", "b", "c")


@dataclass
class Model:
    cursor: int
    entries: dict[int, tuple[float, str, bool]] = field(default_factory=dict)

    def committed(self) -> int:
        return min(self.entries, default=self.cursor)

    def due(self, now: float, alive: set[str]) -> set[int]:
        return {
            o
            for o, (at, client, renew) in self.entries.items()
            if at <= now or (renew and client not in alive)
        }

    def next_visible_at(self, after: float) -> float | None:
        times = [at for at, _, _ in self.entries.values() if at > after]
        return min(times) if times else None


ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("deliver"),
            st.integers(1, 4),
            st.integers(0, 50),
            st.sampled_from(CLIENTS),
            st.booleans(),
        ),
        st.tuples(st.just("finish"), st.integers(0, 12)),
        st.tuples(
            st.just("redeliver"),
            st.integers(0, 12),
            st.integers(0, 50),
            st.sampled_from(CLIENTS),
            st.booleans(),
        ),
        st.tuples(st.just("hide"), st.integers(0, 12), st.integers(0, 50)),
        st.tuples(st.just("give_back"), st.integers(0, 12), st.integers(0, 50)),
        st.tuples(st.just("release"), st.sampled_from(CLIENTS), st.integers(0, 50)),
        st.tuples(st.just("skip"), st.integers(0, 3)),
        # Far enough to reach another chunk of offsets.
        st.tuples(st.just("leap"), st.integers(1, 3)),
        st.tuples(st.just("save")),
        st.tuples(st.just("reset")),
        st.tuples(st.just("scan"), st.integers(0, 50), st.sets(st.sampled_from(CLIENTS))),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_pop_queue_answers_as_a_scan_of_its_entries(script: list[tuple]) -> None:
    # Chunks of 4 offsets, so that a script's few offsets span several.
    with (
        mock.patch.object(pop, "CHUNK_BITS", 2),
        mock.patch.object(pop_state, "CHUNK_BITS", 2),
    ):
        _run(script)


def _run(script: list[tuple]) -> None:
    queue, model = PopQueue(0), Model(0)
    encoder = pop_state.Encoder()
    for generation, (op, *args) in enumerate(script, 1):
        if op in ("finish", "redeliver", "hide", "give_back"):
            # The n-th message in flight, or one that is not, if n is past them.
            held = sorted(queue.inflight)
            n = args[0]
            args[0] = held[n] if n < len(held) else queue.cursor + n
        if op == "deliver":
            count, at, client, renew = args
            for _ in range(count):
                offset = queue.cursor
                queue.delivered(offset, generation, float(at), client, auto_renew=renew)
                queue.moved_cursor(offset + 1)
                model.entries[offset] = (float(at), client, renew)
            model.cursor = queue.cursor
        elif op == "skip":
            queue.moved_cursor(queue.cursor + args[0])
            model.cursor = queue.cursor
        elif op == "leap":
            queue.moved_cursor(queue.cursor + (args[0] << pop.CHUNK_BITS))
            model.cursor = queue.cursor
        elif op == "reset":
            queue.reset(queue.cursor)
            model.entries.clear()
        elif op == "save":
            _same_state(encoder.encode({KEY: queue}), pop_state.encode({KEY: queue}))
        elif op == "finish":
            queue.finish(args[0])
            model.entries.pop(args[0], None)
        elif op == "release":
            client, at = args
            held = [o for o, (_, c, renew) in model.entries.items() if renew and c == client]
            assert queue.release(client, float(at)) == len(held)
            for o in held:
                was = model.entries[o][0]
                model.entries[o] = (min(was, float(at)), client, False)
        elif args and args[0] in queue.inflight:
            entry = queue.inflight[args[0]]
            if op == "redeliver":
                _, at, client, renew = args
                queue.redelivered(entry, generation, float(at), client, auto_renew=renew)
                model.entries[args[0]] = (float(at), client, renew)
            elif op == "hide":
                queue.hidden(entry, generation, float(args[1]))
                model.entries[args[0]] = (float(args[1]), entry.client_id, False)
            elif op == "give_back":
                queue.given_back(entry, float(args[1]))
                model.entries[args[0]] = (float(args[1]), entry.client_id, False)
        if op == "scan":
            now, alive = float(args[0]), args[1]
            due = [e.offset for e in queue.due(now, alive)]
            assert len(due) == len(set(due))
            assert set(due) == model.due(now, alive)
            gone = {o for o in due if model.entries[o][2] and model.entries[o][1] not in alive}
            # Those of departed clients come first.
            assert set(due[: len(gone)]) == gone
            assert queue.next_visible_at(now) == model.next_visible_at(now)
        assert queue.committed == model.committed()
        assert set(queue.inflight) == set(model.entries)
        for offset, (at, client, renew) in model.entries.items():
            entry = queue.inflight[offset]
            assert (entry.visible_at, entry.client_id, entry.auto_renew) == (at, client, renew)
        top = max((at for at, _, _ in model.entries.values()), default=None)
        assert queue.batch_visible_at() == top


KEY = ("g", "t", 0)


def _same_state(kept: bytes, fresh: bytes) -> None:
    """The encoder's output, from chunks it kept, is the state a fresh encode gives (to the
    millisecond the two clocks' readings may differ by)."""
    a, b = json.loads(kept), json.loads(fresh)
    assert len(a["queues"]) == len(b["queues"])
    for x, y in zip(a["queues"], b["queues"], strict=True):
        assert {k: v for k, v in x.items() if k != "inflight"} == {
            k: v for k, v in y.items() if k != "inflight"
        }
        assert [e[:3] + e[4:] for e in x["inflight"]] == [e[:3] + e[4:] for e in y["inflight"]]
        assert all(abs(e[3] - f[3]) <= 2 for e, f in zip(x["inflight"], y["inflight"], strict=True))
