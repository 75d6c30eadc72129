"""The Python face of the Rust message store."""

import os
from collections.abc import Mapping
from types import TracebackType
from typing import Self

from pyrmq import _core
from pyrmq.config import StoreConfig
from pyrmq.errors import ConfigError

__all__ = ["GetResult", "MessageStore", "PutResult", "StoredMessage"]

GetResult = _core.GetResult
PutResult = _core.PutResult
StoredMessage = _core.StoredMessage


class MessageStore(_core.MessageStore):
    """pyrmq's message store: a CommitLog with ConsumeQueues and a key index.

    Every method that touches files releases the GIL. Example:

    >>> import tempfile
    >>> from pyrmq.store import MessageStore, GetMessageStatus
    >>> with tempfile.TemporaryDirectory() as root:
    ...     config = StoreConfig(
    ...         mapped_file_size_commit_log=1 << 20, max_hash_slot_num=64, max_index_num=1000
    ...     )
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
        config: StoreConfig | Mapping[str, object] | None = None,
        *,
        background_services: bool = True,
    ) -> Self:
        """Opens (creating if needed) the store at ``path``, recovering after a crash.

        ``config`` is a :class:`StoreConfig` or a mapping of its field names or RocketMQ's
        keys (``{"flushDiskType": "SYNC_FLUSH"}``); ``path`` overrides its root directory.
        ``background_services=False`` leaves flushing and retention to explicit calls, for
        tests that drive time themselves; under ``SYNC_FLUSH`` a put then waits out
        ``sync_flush_timeout_ms`` unless it passes ``wait_for_flush=False``.
        """
        if config is None:
            config = StoreConfig()
        elif isinstance(config, Mapping):
            config = StoreConfig.from_mapping(config)
        elif not isinstance(config, StoreConfig):
            raise TypeError(
                "config must be a StoreConfig or a mapping of its keys, "
                f"not {type(config).__name__}"
            )
        root = os.fspath(path)
        if not root:
            raise ConfigError("the store path is empty")
        settings = config.to_core()
        settings["store_path_root_dir"] = root
        settings["background_services"] = background_services
        return cls(root, settings)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
