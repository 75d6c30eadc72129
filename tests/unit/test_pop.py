"""The pop state of one (group, topic, queue): offsets commit only past finished messages."""

from pyrmq.proxy.pop import PopQueue, Receipt


def _deliver(queue: PopQueue, offsets: range, now: float = 0.0, *, client: str = "c") -> None:
    for offset in offsets:
        queue.delivered(offset, offset + 100, now + 30, client, auto_renew=False)
    queue.moved_cursor(offsets.stop)


def test_the_committed_offset_stops_at_the_oldest_message_in_flight() -> None:
    queue = PopQueue(5)
    assert queue.committed == 5
    _deliver(queue, range(5, 10))
    assert queue.committed == 5
    for offset in (6, 7, 9):
        queue.finish(offset)
    assert queue.committed == 5
    queue.finish(5)
    assert queue.committed == 8
    queue.finish(8)
    assert queue.committed == 10
    # Read past without a delivery (filtered out): done as well.
    queue.moved_cursor(14)
    assert queue.committed == 14


def test_a_handle_is_current_only_for_its_generation_and_until_it_runs_out() -> None:
    queue = PopQueue(0)
    _deliver(queue, range(1))
    receipt = Receipt.parse(Receipt(3, 0, 100).encode())
    assert receipt == Receipt(3, 0, 100)
    assert queue.current(Receipt(3, 0, 100), now=29.0) is not None
    assert queue.current(Receipt(3, 0, 101), now=29.0) is None
    assert queue.current(Receipt(3, 0, 100), now=30.0) is None
    [due] = queue.due(30.0, alive=set())
    PopQueue.redelivered(due, 200, 60.0, "c", auto_renew=False)
    assert due.attempt == 2
    assert queue.current(Receipt(3, 0, 100), now=31.0) is None
    assert queue.current(Receipt(3, 0, 200), now=31.0) is not None


def test_auto_renewed_messages_are_due_only_once_their_client_is_gone() -> None:
    queue = PopQueue(0)
    queue.delivered(0, 1, 10.0, "push", auto_renew=True)
    queue.delivered(1, 2, 10.0, "simple", auto_renew=False)
    assert [e.offset for e in queue.due(1000.0, alive={"push", "simple"})] == [1]
    assert [e.offset for e in queue.due(1000.0, alive={"simple"})] == [0, 1]
    assert queue.next_visible_at() == 10.0
    # A simple consumer's message keeps the invisibility it asked for: another client may
    # still ack it with its handle.
    assert queue.release("simple", visible_at=0.0) == 0
    assert queue.next_visible_at() == 10.0
    assert queue.release("push", visible_at=5.0) == 1
    assert queue.next_visible_at() == 5.0


def test_offsets_gone_from_the_store_are_skipped() -> None:
    queue = PopQueue(0)
    _deliver(queue, range(4))
    queue.skip_to(3)
    assert sorted(queue.inflight) == [3]
    assert queue.committed == 3


def test_malformed_handles_are_refused() -> None:
    for handle in ("", "p1", "p1.1.2", "p2.1.2.3", "p1.a.2.3", "p1.-1.2.3", "p1.1.-2.3"):
        assert Receipt.parse(handle) is None
