"""The Python face of the Rust message store."""

import os
from collections.abc import Sequence
from types import TracebackType
from typing import Self

from pyrmq import _core
from pyrmq.config import StoreConfig
from pyrmq.store.status import GetMessageStatus, PutStatus

__all__ = ["GetResult", "MessageStore", "PutResult", "StoredMessage"]

PutResult = _core.PutResult
StoredMessage = _core.StoredMessage


class GetResult:
    """Messages read from one queue.

    ``buffer`` holds the records end to end, exactly as a PULL_MESSAGE answer carries them;
    ``views()`` slices it without copying, ``messages()`` decodes it.
    """

    __slots__ = ("_raw", "status")

    def __init__(self, raw: _core.GetResult) -> None:
        self._raw = raw
        self.status = GetMessageStatus(raw.status)

    @property
    def next_begin_offset(self) -> int:
        """Queue offset to read from next."""
        return self._raw.next_begin_offset

    @property
    def min_offset(self) -> int:
        return self._raw.min_offset

    @property
    def max_offset(self) -> int:
        return self._raw.max_offset

    @property
    def buffer(self) -> bytes:
        return self._raw.buffer

    @property
    def message_count(self) -> int:
        return self._raw.message_count

    @property
    def queue_offsets(self) -> list[int]:
        return self._raw.queue_offsets

    @property
    def phy_offsets(self) -> list[int]:
        return self._raw.phy_offsets

    @property
    def sizes(self) -> list[int]:
        return self._raw.sizes

    @property
    def corrupt_offsets(self) -> list[int]:
        """Queue offsets whose records failed their checks and were skipped."""
        return self._raw.corrupt_offsets

    def messages(self) -> list[_core.StoredMessage]:
        """Decodes every record in the buffer."""
        return self._raw.messages()

    def views(self) -> list[memoryview]:
        """One read-only view per record, sharing the buffer."""
        whole = memoryview(self._raw.buffer)
        out = []
        at = 0
        for size in self._raw.sizes:
            out.append(whole[at : at + size])
            at += size
        return out

    def __len__(self) -> int:
        return self._raw.message_count

    def __repr__(self) -> str:
        return (
            f"GetResult(status={self.status.name}, messages={self.message_count}, "
            f"next_begin_offset={self.next_begin_offset})"
        )


class MessageStore(_core.MessageStore):
    """pyrmq's message store: a CommitLog with ConsumeQueues and a key index.

    Every method that touches files releases the GIL. Example:

    >>> import tempfile
    >>> from pyrmq.store import MessageStore, GetMessageStatus
    >>> with tempfile.TemporaryDirectory() as root:
    ...     config = StoreConfig(mapped_file_size_commit_log=1 << 20)
    ...     with MessageStore.open(root, config) as store:
    ...         sent = store.put("TopicTest", b"hello", tags="TagA", keys=["order-1"])
    ...         got = store.get("TopicTest", 0, 0)
    ...         [m.body for m in got.messages()], got.status is GetMessageStatus.FOUND
    ([b'hello'], True)
    """

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        config: StoreConfig | None = None,
        *,
        background_services: bool = True,
    ) -> Self:
        """Opens (creating if needed) the store at ``path``, recovering after a crash.

        ``background_services=False`` leaves flushing and retention to explicit calls, for
        tests that drive time themselves.
        """
        settings = (config or StoreConfig()).to_core()
        settings["store_path_root_dir"] = os.fspath(path)
        settings["background_services"] = background_services
        return cls(os.fspath(path), settings)

    # Returns the GetResult wrapper above (enum status, views()) instead of _core.GetResult,
    # which cannot be subclassed: a deliberate change of the base method's return type.
    def get(  # type: ignore[override]
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        *,
        max_count: int = 32,
        max_bytes: int | None = None,
        tags: str | Sequence[str] | None = None,
    ) -> GetResult:
        """Reads up to ``max_count`` messages from ``queue_offset``, filtered by tag."""
        return GetResult(
            super().get(
                topic, queue_id, queue_offset, max_count=max_count, max_bytes=max_bytes, tags=tags
            )
        )

    def put_status(self, result: _core.PutResult) -> PutStatus:
        """The :class:`PutStatus` of a put result."""
        return PutStatus(result.status)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
