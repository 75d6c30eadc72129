"""The name server's KV config: values by namespace and key, kept in RocketMQ's kvConfig.json.

Admin tools set them (``mqadmin updateKvConfig``); the ``ORDER_TOPIC_CONFIG`` namespace holds
each globally ordered topic's ``brokerName:queueNums`` list, which routes and brokers read.
"""

import logging
import threading
from pathlib import Path

from pyrmq.broker.state.json_file import load_json, object_in, store_json

__all__ = ["ORDER_TOPIC_CONFIG", "KvConfig"]

log = logging.getLogger(__name__)

ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KvConfig:
    """``namespace -> key -> value``, saved on every change (when it has a file)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._table: dict[str, dict[str, str]] = (
            load_json(path, _decode) if path is not None else None
        ) or {}

    def put(self, namespace: str, key: str, value: str) -> None:
        with self._lock:
            previous = self._table.get(namespace, {}).get(key)
            self._table.setdefault(namespace, {})[key] = value
            try:
                self._save()
            except BaseException:
                if previous is None:
                    del self._table[namespace][key]
                    if not self._table[namespace]:
                        del self._table[namespace]
                else:
                    self._table[namespace][key] = previous
                raise
        log.info("kv config put namespace=%s key=%s", namespace, key)

    def get(self, namespace: str, key: str) -> str | None:
        with self._lock:
            return self._table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> None:
        with self._lock:
            values = self._table.get(namespace)
            if values is None or key not in values:
                return
            previous = values.pop(key)
            try:
                self._save()
            except BaseException:
                values[key] = previous
                raise
        log.info("kv config deleted namespace=%s key=%s", namespace, key)

    def namespace(self, namespace: str) -> dict[str, str] | None:
        """Every value of ``namespace``, or None when it was never set (an emptied one is {})."""
        with self._lock:
            values = self._table.get(namespace)
            return None if values is None else dict(values)

    def _save(self) -> None:
        if self.path is not None:
            store_json(self.path, {"configTable": self._table})


def _decode(value: object) -> dict[str, dict[str, str]]:
    """kvConfig.json's table: ``namespace -> key -> value``."""
    table = object_in(object_in(value, "kvConfig.json").get("configTable") or {}, "configTable")
    return {
        str(namespace): {str(k): str(v) for k, v in object_in(values, str(namespace)).items()}
        for namespace, values in table.items()
    }
