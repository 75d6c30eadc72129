"""How each group reads each topic when its consumers leave the rebalance to the broker
(``config/messageRequestMode.json``, RocketMQ's MessageRequestModeManager): by pull or by pop,
and in pop how many other members' queues each member also pops. SET_MESSAGE_REQUEST_MODE
(``mqadmin setConsumeMode``) sets it; QUERY_ASSIGNMENT answers with it.

>>> import tempfile, pathlib
>>> table = RequestModes(pathlib.Path(tempfile.mkdtemp()) / "messageRequestMode.json")
>>> table.set("T", "G", RequestMode("POP", 1))
>>> RequestModes(table.path).get("T", "G")
RequestMode(mode='POP', pop_share_queue_num=1)
"""

import dataclasses
from pathlib import Path
from typing import Any

from pyrmq.broker.state.json_file import load_json, object_in, store_json

__all__ = ["MODES", "RequestMode", "RequestModes"]

MODES = ("PULL", "POP")


@dataclasses.dataclass(frozen=True, slots=True)
class RequestMode:
    mode: str
    pop_share_queue_num: int = 0


class RequestModes:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._modes: dict[tuple[str, str], RequestMode] = load_json(path, _decode) or {}

    def get(self, topic: str, group: str) -> RequestMode | None:
        return self._modes.get((topic, group))

    def set(self, topic: str, group: str, mode: RequestMode) -> None:
        """Sets and saves (raises OSError when the file cannot be written, keeping the mode
        as it was)."""
        before = self._modes.get((topic, group))
        self._modes[(topic, group)] = mode
        try:
            store_json(self.path, self._to_json())
        except OSError:
            if before is None:
                del self._modes[(topic, group)]
            else:
                self._modes[(topic, group)] = before
            raise

    def _to_json(self) -> dict[str, Any]:
        table: dict[str, dict[str, Any]] = {}
        for (topic, group), mode in sorted(self._modes.items()):
            table.setdefault(topic, {})[group] = {
                "consumerGroup": group,
                "mode": mode.mode,
                "popShareQueueNum": mode.pop_share_queue_num,
                "topic": topic,
            }
        return {"messageRequestModeMap": table}


def _decode(data: Any) -> dict[tuple[str, str], RequestMode]:
    table = object_in(object_in(data, "the file").get("messageRequestModeMap") or {}, "the map")
    out = {}
    for topic, groups in table.items():
        for group, body in object_in(groups, f"topic {topic}").items():
            body = object_in(body, f"group {group}")
            mode = str(body.get("mode", "PULL"))
            if mode not in MODES:
                raise ValueError(f"mode {mode!r} of {group} on {topic}")
            out[(str(topic), str(group))] = RequestMode(mode, int(body.get("popShareQueueNum", 0)))
    return out
