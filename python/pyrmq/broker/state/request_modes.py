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

__all__ = ["MODES", "RequestMode", "RequestModes", "share_num"]

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

    def replace_from_master(self, data: Any) -> None:
        """Takes the master's whole table (GET_ALL_MESSAGE_REQUEST_MODE's answer), as a
        RocketMQ slave does; saves it when it differs."""
        modes = _decode(data)
        if modes != self._modes:
            store_json(self.path, _table_json(modes))
            self._modes = modes

    def set(self, topic: str, group: str, mode: RequestMode) -> None:
        """Sets and saves (raises OSError when the file cannot be written, keeping the mode
        as it was)."""
        before = self._modes.get((topic, group))
        self._modes[(topic, group)] = mode
        try:
            store_json(self.path, self.to_json())
        except OSError:
            if before is None:
                del self._modes[(topic, group)]
            else:
                self._modes[(topic, group)] = before
            raise

    def to_json(self) -> dict[str, Any]:
        """The table as RocketMQ writes it (and answers GET_ALL_MESSAGE_REQUEST_MODE)."""
        return _table_json(self._modes)


def _table_json(modes: dict[tuple[str, str], RequestMode]) -> dict[str, Any]:
    table: dict[str, dict[str, Any]] = {}
    for (topic, group), mode in sorted(modes.items()):
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
            out[(str(topic), str(group))] = RequestMode(
                mode, share_num(body.get("popShareQueueNum"))
            )
    return out


def share_num(value: Any) -> int:
    """A ``popShareQueueNum`` as RocketMQ's int; ValueError for anything else."""
    try:
        number = int(value or 0)
    except (TypeError, ValueError, OverflowError) as e:
        raise ValueError(f"popShareQueueNum {value!r}") from e
    if not -(2**31) <= number < 2**31:
        raise ValueError(f"popShareQueueNum {value!r} is not an int32")
    return number
