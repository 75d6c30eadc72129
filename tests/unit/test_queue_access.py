"""QueueAccessTable: who may pull a queue of a clustering push group, and when it moves."""

from collections.abc import Callable

import pytest

from pyrmq.broker.state.queue_access import Access, AccessKey, QueueAccessTable

KEY: AccessKey = ("CG", "T", 0)
TIMEOUT_MS = 1_000


def committed_at(offset: int | None) -> Callable[[AccessKey], int | None]:
    return lambda key: offset


def unlocked(key: AccessKey) -> str | None:
    return None


@pytest.fixture
def table() -> QueueAccessTable:
    t = QueueAccessTable(TIMEOUT_MS)
    assert t.access(KEY, "A", 0, committed_at(None), unlocked) is Access.ACQUIRED
    return t


def test_the_first_client_takes_a_free_queue_and_keeps_it(table: QueueAccessTable) -> None:
    assert table.owner(KEY) == "A"
    assert table.access(KEY, "A", 10, committed_at(None), unlocked) is Access.OWNER
    # Nothing delivered yet: nothing another client could get twice.
    assert table.access(KEY, "B", 20, committed_at(None), unlocked) is Access.ACQUIRED
    assert table.owner(KEY) == "B"


def test_another_client_waits_until_the_owner_committed_what_it_was_delivered(
    table: QueueAccessTable,
) -> None:
    table.answered(KEY, "A", 32, 100)
    for committed in (None, 0, 31):
        assert table.access(KEY, "B", 200, committed_at(committed), unlocked) is Access.REFUSED
    assert table.owner(KEY) == "A"
    assert table.access(KEY, "B", 200, committed_at(32), unlocked) is Access.ACQUIRED
    # The old owner is now the one refused.
    table.answered(KEY, "B", 40, 210)
    assert table.access(KEY, "A", 220, committed_at(32), unlocked) is Access.REFUSED


def test_an_answer_to_someone_else_records_nothing(table: QueueAccessTable) -> None:
    table.answered(KEY, "B", 32, 100)
    assert table.access(KEY, "B", 200, committed_at(None), unlocked) is Access.ACQUIRED


def test_a_silent_owner_loses_the_queue_after_the_timeout(table: QueueAccessTable) -> None:
    table.answered(KEY, "A", 32, 100)
    assert table.access(KEY, "B", 100 + TIMEOUT_MS, committed_at(0), unlocked) is Access.REFUSED
    assert table.access(KEY, "B", 101 + TIMEOUT_MS, committed_at(0), unlocked) is Access.ACQUIRED


def test_a_held_pull_and_a_commit_count_as_access(table: QueueAccessTable) -> None:
    table.answered(KEY, "A", 32, 100)
    table.held(KEY, "A", 100 + 5 * TIMEOUT_MS)
    late = 100 + 3 * TIMEOUT_MS
    assert table.access(KEY, "B", late, committed_at(0), unlocked) is Access.REFUSED
    # The held pull answered: silence counts from then.
    table.answered(KEY, "A", 32, late)
    assert table.access(KEY, "B", late + TIMEOUT_MS, committed_at(0), unlocked) is Access.REFUSED
    assert table.touch(KEY, "A", late + TIMEOUT_MS)
    assert not table.touch(KEY, "B", late + TIMEOUT_MS)
    assert table.access(KEY, "B", late + 2 * TIMEOUT_MS, committed_at(0), unlocked) is (
        Access.REFUSED
    )
    assert table.access(KEY, "B", late + 3 * TIMEOUT_MS, committed_at(0), unlocked) is (
        Access.ACQUIRED
    )


def test_only_the_orderly_lock_holder_takes_a_locked_queue(table: QueueAccessTable) -> None:
    table.answered(KEY, "A", 32, 100)
    asked: list[AccessKey] = []

    def held_by_b(key: AccessKey) -> str | None:
        asked.append(key)
        return "B"

    # C may not take it even from an owner that is caught up.
    assert table.access(KEY, "C", 200, committed_at(32), held_by_b) is Access.REFUSED
    assert table.access(KEY, "B", 200, committed_at(0), held_by_b) is Access.ACQUIRED
    assert asked == [KEY, KEY]
    # The owner is not asked about the lock.
    assert table.access(KEY, "B", 200, committed_at(0), held_by_b) is Access.OWNER
    assert len(asked) == 2
    # Nor may anyone else take a locked queue nobody owns.
    table.release([KEY], "B")
    assert table.access(KEY, "C", 300, committed_at(0), held_by_b) is Access.REFUSED


def test_the_displaced_owner_is_reported() -> None:
    displaced: list[tuple[AccessKey, str]] = []
    table = QueueAccessTable(TIMEOUT_MS, lambda key, client: displaced.append((key, client)))
    assert table.access(KEY, "A", 0, committed_at(None), unlocked) is Access.ACQUIRED
    assert table.access(KEY, "B", 10, committed_at(None), unlocked) is Access.ACQUIRED
    assert displaced == [(KEY, "A")]


def test_answers_without_messages_leave_what_was_delivered(table: QueueAccessTable) -> None:
    table.answered(KEY, "A", 5, 100)
    table.answered(KEY, "A", None, 110)
    assert table.access(KEY, "B", 120, committed_at(4), unlocked) is Access.REFUSED
    assert table.access(KEY, "B", 120, committed_at(5), unlocked) is Access.ACQUIRED


def test_release_frees_only_the_owners_queues(table: QueueAccessTable) -> None:
    other: AccessKey = ("CG", "T", 1)
    elsewhere: AccessKey = ("CG2", "T", 0)
    for key in (other, elsewhere):
        assert table.access(key, "A", 0, committed_at(None), unlocked) is Access.ACQUIRED
    table.answered(KEY, "A", 32, 100)
    assert table.release([KEY], "B") == []
    assert table.keys_of("CG", "A") == [KEY, other]
    assert table.release(table.keys_of("CG", "A"), "A") == [KEY, other]
    assert table.owner(KEY) is None
    assert table.owner(elsewhere) == "A"
    assert table.access(KEY, "B", 200, committed_at(0), unlocked) is Access.ACQUIRED
    table.forget_topic("T")
    assert len(table) == 0
