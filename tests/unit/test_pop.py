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
    queue.redelivered(due, 200, 60.0, "c", auto_renew=False)
    assert due.attempt == 2
    assert queue.current(Receipt(3, 0, 100), now=31.0) is None
    assert queue.current(Receipt(3, 0, 200), now=31.0) is not None


def test_auto_renewed_messages_are_due_once_their_client_is_gone_or_held_them_too_long() -> None:
    queue = PopQueue(0)
    # Held by a push consumer until 10800 at most; by a simple consumer until 10.
    queue.delivered(0, 1, 10_800.0, "push", auto_renew=True)
    queue.delivered(1, 2, 10.0, "simple", auto_renew=False)
    assert [e.offset for e in queue.due(1000.0, alive={"push", "simple"})] == [1]
    assert [e.offset for e in queue.due(1000.0, alive={"simple"})] == [0, 1]
    # By when they came due.
    assert [e.offset for e in queue.due(10_800.0, alive={"push", "simple"})] == [1, 0]
    assert queue.next_visible_at(after=0.0) == 10.0
    # A simple consumer's message keeps the invisibility it asked for: another client may
    # still ack it with its handle.
    assert queue.release("simple", visible_at=0.0) == 0
    assert queue.release("push", visible_at=5.0) == 1
    assert queue.next_visible_at(after=0.0) == 5.0


def test_what_comes_visible_next_leaves_out_what_is_due_already() -> None:
    queue = PopQueue(0)
    queue.delivered(0, 1, 10.0, "c", auto_renew=False)
    queue.delivered(1, 2, 60.0, "c", auto_renew=False)
    # At 20 the first is due already (a receive takes it, or it waits for one): what a
    # receive waits for next is the second, not a time in the past to poll for again.
    assert queue.next_visible_at(after=20.0) == 60.0
    assert queue.next_visible_at(after=60.0) is None
    # An orderly group's batch comes back whole: when its last message does.
    assert queue.batch_visible_at() == 60.0
    assert PopQueue(0).batch_visible_at() is None


def test_a_cursor_moved_past_filtered_offsets_keeps_what_is_in_flight_below() -> None:
    queue = PopQueue(0)
    _deliver(queue, range(4))
    queue.moved_cursor(9)
    assert sorted(queue.inflight) == [0, 1, 2, 3]
    assert queue.committed == 0
    for offset in range(4):
        queue.finish(offset)
    assert queue.committed == 9


def test_malformed_handles_are_refused() -> None:
    for handle in ("", "p1", "p1.1.2", "p2.1.2.3", "p1.a.2.3", "p1.-1.2.3", "p1.1.-2.3"):
        assert Receipt.parse(handle) is None


def test_a_message_given_back_by_a_client_that_shut_down_costs_no_attempt() -> None:
    queue = PopQueue(0)
    queue.delivered(0, 1, 100.0, "leaving", auto_renew=True)
    queue.delivered(1, 2, 100.0, "crashed", auto_renew=True)
    assert queue.release("leaving", visible_at=5.0, returned=True) == 1
    assert queue.release("crashed", visible_at=5.0) == 1
    given_back, crashed = queue.due(5.0, alive=set())
    for entry, generation in ((given_back, 10), (crashed, 11)):
        queue.redelivered(entry, generation, 50.0, "next", auto_renew=True)
    assert (given_back.attempt, crashed.attempt) == (1, 2)
    # Only that one delivery was free: the next one counts.
    queue.release("next", visible_at=60.0)
    queue.redelivered(given_back, 12, 90.0, "other", auto_renew=False)
    assert given_back.attempt == 2


def test_a_due_message_comes_once_even_when_delivered_again_visible_at_once() -> None:
    queue = PopQueue(0)
    _deliver(queue, range(200))
    seen = []
    for entry in queue.due(30.0, alive=set()):
        seen.append(entry.offset)
        # Held for no time at all: visible again at the scan's own time.
        queue.redelivered(entry, entry.generation + 1000, 30.0, "c", auto_renew=False)
    assert sorted(seen) == list(range(200))


def test_finished_or_redelivered_messages_leave_a_due_scan_under_way() -> None:
    queue = PopQueue(0)
    for offset in range(300):
        queue.delivered(offset, offset, float(offset % 7), "c", auto_renew=False)
    taken = []
    for entry in queue.due(10.0, alive=set()):
        taken.append(entry.offset)
        # Each one taken finishes the next offset, or sends it past the scan.
        if entry.offset + 1 in queue.inflight:
            if entry.offset % 2:
                queue.finish(entry.offset + 1)
            else:
                nxt = queue.inflight[entry.offset + 1]
                queue.redelivered(nxt, 5000, 99.0, "c", auto_renew=False)
    assert len(taken) == len(set(taken))
    assert all(queue.inflight.get(o) is not None or o % 2 == 0 for o in taken)


def test_an_offset_taken_up_twice_keeps_the_last_and_its_time_only() -> None:
    queue = PopQueue(0)
    queue.delivered(0, 1, 10.0, "c", auto_renew=True)
    queue.delivered(0, 2, 50.0, "d", auto_renew=False)
    assert queue.inflight[0].generation == 2
    assert queue.next_visible_at(after=0.0) == 50.0
    assert queue.release("c", visible_at=0.0) == 0
    queue.finish(0)
    assert queue.batch_visible_at() is None
    assert queue.committed == 0


def test_a_message_passed_between_departed_clients_during_a_scan_comes_once() -> None:
    queue = PopQueue(0)
    queue.delivered(0, 1, 100.0, "a", auto_renew=True)
    queue.delivered(1, 2, 100.0, "x", auto_renew=True)
    taken = []
    for entry in queue.due(0.0, alive=set()):
        taken.append(entry.offset)
        # Received by "x", itself counted as gone (its stream closed).
        queue.redelivered(entry, 10 + len(taken), 100.0, "x", auto_renew=True)
    assert sorted(taken) == [0, 1]
