"""Outcome codes of the store, with RocketMQ's names and declaration order."""

import enum

__all__ = ["GetMessageStatus", "PutStatus"]


class PutStatus(enum.IntEnum):
    """How an append that stored its messages ended (RocketMQ's ``PutMessageStatus`` subset)."""

    PUT_OK = 0
    """Stored; under SYNC_FLUSH also durable."""
    FLUSH_DISK_TIMEOUT = 1
    """Stored and visible, but the fsync did not finish within ``sync_flush_timeout_ms``."""


class GetMessageStatus(enum.IntEnum):
    """How a read of one queue ended: RocketMQ's ``GetMessageStatus``."""

    FOUND = 0
    """At least one message is in the result."""
    NO_MATCHED_MESSAGE = 1
    """Messages were examined but none passed the tag filter; continue at ``next_begin_offset``."""
    MESSAGE_WAS_REMOVING = 2
    """The examined messages' CommitLog segment was deleted by retention."""
    OFFSET_FOUND_NULL = 3
    """The ConsumeQueue file for the offset is missing."""
    OFFSET_OVERFLOW_BADLY = 4
    """The offset is beyond the queue's max offset."""
    OFFSET_OVERFLOW_ONE = 5
    """The offset equals the max offset: the reader is caught up."""
    OFFSET_TOO_SMALL = 6
    """The offset is below the min offset: those messages were deleted."""
    NO_MATCHED_LOGIC_QUEUE = 7
    """The store has no such (topic, queue id)."""
    NO_MESSAGE_IN_QUEUE = 8
    """The queue exists but has never held a message."""
