"""The message store: CommitLog + ConsumeQueue storage, in Rust.

>>> from pyrmq.store import MessageStore, GetMessageStatus, PutStatus
"""

from pyrmq.store.flush_waiter import FlushWaiter
from pyrmq.store.message_store import GetResult, MessageStore, PutResult, StoredMessage
from pyrmq.store.status import GetMessageStatus, PutStatus

__all__ = [
    "FlushWaiter",
    "GetMessageStatus",
    "GetResult",
    "MessageStore",
    "PutResult",
    "PutStatus",
    "StoredMessage",
]
