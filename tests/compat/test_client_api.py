"""``pyrmq.client`` offers every public name of the official ``rocketmq.client`` module
(``rocketmq==0.4.4``, introspected) and of rocketmq-client-python 2.x (transcribed below),
with signatures that accept the same calls: the same parameter names in the same order, the
same defaults, and nothing new that is required. Received messages have the official value
types."""

from __future__ import annotations

import ctypes
import enum
import inspect
import platform
import sys
from typing import Any

import pytest

import pyrmq.client
import pyrmq.client.exceptions
import pyrmq.errors

pytestmark = [
    pytest.mark.compat,
    pytest.mark.skipif(
        not (sys.platform == "linux" and platform.machine() == "x86_64"),
        reason="the rocketmq 0.4.4 wheel ships librocketmq for x86_64 Linux only",
    ),
]

official = pytest.importorskip("rocketmq.client")
official_exceptions = pytest.importorskip("rocketmq.exceptions")
official_consts = pytest.importorskip("rocketmq.consts")

NOT_API = {
    # Imports and ctypes plumbing of rocketmq/client.py, not API.
    "IntEnum",
    "MSG_CALLBACK_FUNC",
    "POINTER",
    "PY2",
    "QUEUE_SELECTOR_CALLBACK",
    "binary_type",
    "c_int",
    "c_void_p",
    "ctypes",
    "dll",
    "ffi_check",
    "maybe_decode",
    "namedtuple",
    "sys",
    "text_type",
}
OFFICIAL_NAMES = {
    "Message",
    "MessageModel",
    "MessageProperty",
    "NullPointerException",
    "Producer",
    "ProducerSendAsyncFailed",
    "PullConsumer",
    "PushConsumer",
    "PushConsumerStartFailed",
    "RecvMessage",
    "SendResult",
    "SendStatus",
    "hashing_queue_selector",
}


def _public_names(module: Any) -> set[str]:
    return {n for n in dir(module) if not n.startswith("_")} - NOT_API


def _members(cls: type) -> dict[str, Any]:
    """Methods and properties a user calls: public ones and the dunders the class defines."""
    found: dict[str, Any] = {}
    for klass in reversed(cls.__mro__[:-1]):  # without object
        for name, value in vars(klass).items():
            if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
                continue
            if name in ("__dict__", "__weakref__", "__module__", "__doc__", "__del__"):
                continue
            if callable(value) or isinstance(value, property):
                found[name] = value
    return found


def _same_default(official_default: Any, ours: Any) -> bool:
    if callable(official_default):
        return getattr(official_default, "__name__", None) == getattr(ours, "__name__", "")
    if isinstance(official_default, enum.Enum):
        return isinstance(ours, enum.Enum) and (ours.name, ours.value) == (
            official_default.name,
            official_default.value,
        )
    return bool(official_default == ours)


def signature_problems(where: str, official_fn: Any, our_fn: Any) -> list[str]:
    """What an official call would do differently with ours; [] when none."""
    theirs = list(inspect.signature(official_fn).parameters.values())
    ours = list(inspect.signature(our_fn).parameters.values())
    if theirs and theirs[0].name == "self":
        theirs, ours = theirs[1:], ours[1:]
    member = where.rsplit(".", 1)[-1]
    dunder = member.startswith("__") and member != "__init__"  # called positionally
    problems = []
    for i, p in enumerate(theirs):
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if i >= len(ours):
            problems.append(f"{where}: no parameter #{i} ({p.name})")
            continue
        q = ours[i]
        if q.kind not in (q.POSITIONAL_ONLY, q.POSITIONAL_OR_KEYWORD):
            problems.append(f"{where}: parameter #{i} ({q.name}) is not positional")
        if not dunder and q.name != p.name:
            problems.append(f"{where}: parameter #{i} is {q.name}, officially {p.name}")
        if p.default is not p.empty and not _same_default(p.default, q.default):
            problems.append(f"{where}: {p.name} defaults to {q.default!r}, not {p.default!r}")
    for q in ours[len(theirs) :]:
        required = q.default is q.empty and q.kind not in (q.VAR_POSITIONAL, q.VAR_KEYWORD)
        if required:
            problems.append(f"{where}: extra required parameter {q.name}")
    return problems


def test_every_official_name_exists() -> None:
    assert _public_names(official) == OFFICIAL_NAMES, "the official module changed"
    missing = sorted(n for n in OFFICIAL_NAMES if not hasattr(pyrmq.client, n))
    assert missing == []


@pytest.mark.parametrize(
    "name", sorted(n for n in OFFICIAL_NAMES if inspect.isclass(getattr(official, n)))
)
def test_official_class_members_exist_with_compatible_signatures(name: str) -> None:
    theirs = getattr(official, name)
    ours = getattr(pyrmq.client, name)
    if issubclass(theirs, enum.Enum):
        assert {m.name: m.value for m in theirs} == {m.name: m.value for m in ours}
        return
    if issubclass(theirs, tuple) and hasattr(theirs, "_fields"):  # SendResult
        for field in theirs._fields:
            assert hasattr(ours, field) or field in getattr(ours, "__dataclass_fields__", {})
        return
    if issubclass(theirs, BaseException):
        our_exc = getattr(pyrmq.client.exceptions, name)
        assert our_exc is ours
        assert signature_problems(f"{name}.__init__", theirs.__init__, ours.__init__) == []
        return
    problems = []
    our_members = _members(ours)
    for member, value in _members(theirs).items():
        if member not in our_members:
            problems.append(f"{name}.{member} is missing")
        elif isinstance(value, property):
            if not isinstance(our_members[member], property):
                problems.append(f"{name}.{member} is not a property")
        elif (name, member) == ("RecvMessage", "__init__"):
            continue  # the official one wraps a C handle; only the client constructs them
        else:
            problems += signature_problems(f"{name}.{member}", value, our_members[member])
    assert problems == []


def test_hashing_queue_selector_signature_and_result() -> None:
    assert (
        signature_problems(
            "hashing_queue_selector",
            official.hashing_queue_selector,
            pyrmq.client.hashing_queue_selector,
        )
        == []
    )
    assert [pyrmq.client.hashing_queue_selector(4, None, n) for n in range(6)] == [
        0,
        1,
        2,
        3,
        0,
        1,
    ]
    # The official one reads the C int its producer passes: an order id past 32 bits wraps,
    # and a queue count that does not divide 2**32 gets another queue than arg % count.
    for arg in (20231129001, 2**31, -7, 2**40 + 5):
        cell = ctypes.c_int(arg)
        for count in (3, 6, 8):
            official_queue = official.hashing_queue_selector(count, None, ctypes.addressof(cell))
            assert pyrmq.client.hashing_queue_selector(count, None, arg) == official_queue, (
                arg,
                count,
            )


def test_official_exceptions_exist_with_the_same_hierarchy() -> None:
    names = [
        n
        for n, v in vars(official_exceptions).items()
        if inspect.isclass(v) and issubclass(v, Exception) and v.__module__ == "rocketmq.exceptions"
    ]
    assert "ProducerSendSyncFailed" in names
    problems = []
    for n in names:
        ours = getattr(pyrmq.client.exceptions, n, None)
        if ours is None:
            problems.append(f"{n} is missing")
            continue
        for m in names:
            derives = issubclass(getattr(official_exceptions, n), getattr(official_exceptions, m))
            if derives and not issubclass(ours, getattr(pyrmq.client.exceptions, m)):
                problems.append(f"{n} does not derive from {m}")
    assert problems == []
    assert issubclass(pyrmq.client.exceptions.RocketMQException, pyrmq.errors.PyrmqError)


# --- rocketmq-client-python 2.x (apache/rocketmq-client-python master, rocketmq/client.py),
# transcribed: it needs librocketmq 2.x, which is not installed. Bodies are irrelevant.


class V2:
    class Producer:
        def __init__(
            self, group_id, orderly=False, timeout=None, compress_level=None, max_message_size=None
        ): ...
        def __enter__(self): ...
        def __exit__(self, exec_type, value, traceback): ...
        def send_sync(self, msg): ...
        def send_oneway(self, msg): ...
        def send_orderly_with_sharding_key(self, msg, sharding_key): ...
        def set_group(self, group_name): ...
        def set_instance_name(self, name): ...
        def set_name_server_address(self, addr): ...
        def set_name_server_domain(self, domain): ...
        def set_session_credentials(self, access_key, access_secret, channel): ...
        def set_timeout(self, timeout): ...
        def set_compress_level(self, level): ...
        def set_max_message_size(self, max_size): ...
        def set_message_trace(self, message_trace): ...
        def start(self): ...
        def shutdown(self): ...

    class TransactionMQProducer(Producer):
        def __init__(
            self,
            group_id,
            checker_callback,
            user_args=None,
            timeout=None,
            compress_level=None,
            max_message_size=None,
        ): ...
        def send_message_in_transaction(self, message, local_execute, user_args=None): ...

    class PushConsumer:
        def __init__(self, group_id, orderly=False, message_model=1): ...
        def __enter__(self): ...
        def __exit__(self, exec_type, value, traceback): ...
        def set_message_model(self, model): ...
        def start(self): ...
        def shutdown(self): ...
        def set_group(self, group_id): ...
        def set_name_server_address(self, addr): ...
        def set_name_server_domain(self, domain): ...
        def set_session_credentials(self, access_key, access_secret, channel): ...
        def subscribe(self, topic, callback, expression="*"): ...
        def set_thread_count(self, thread_count): ...
        def set_message_batch_max_size(self, max_size): ...
        def set_instance_name(self, name): ...
        def set_message_trace(self, message_trace): ...


V2_NAMES = {
    "ConsumeStatus": {"CONSUME_SUCCESS": 0, "RECONSUME_LATER": 1},
    "TransactionStatus": {"COMMIT": 0, "ROLLBACK": 1, "UNKNOWN": 2},
    "SendStatus": {
        "OK": 0,
        "FLUSH_DISK_TIMEOUT": 1,
        "FLUSH_SLAVE_TIMEOUT": 2,
        "SLAVE_NOT_AVAILABLE": 3,
    },
}


def test_v2_names_exist() -> None:
    for name, members in V2_NAMES.items():
        assert {m.name: m.value for m in getattr(pyrmq.client, name)} == members
    assert pyrmq.client.ReceivedMessage is pyrmq.client.RecvMessage
    for name in ("Message", "MessageModel", "SendResult"):
        assert hasattr(pyrmq.client, name)


@pytest.mark.parametrize("name", ["Producer", "TransactionMQProducer", "PushConsumer"])
def test_v2_class_members_accept_the_same_calls(name: str) -> None:
    theirs = getattr(V2, name)
    ours = getattr(pyrmq.client, name)
    problems = []
    our_members = _members(ours)
    for member, value in _members(theirs).items():
        if member not in our_members:
            problems.append(f"{name}.{member} is missing")
            continue
        if (name, member) == ("Producer", "__init__"):
            # 0.4.4 has timeout second, 2.x orderly: ours keeps 0.4.4's order, takes a bool
            # there as orderly, and accepts every 2.x keyword.
            sig = inspect.signature(our_members[member])
            for p in list(inspect.signature(value).parameters.values())[1:]:
                q = sig.parameters.get(p.name)
                if q is None or not _same_default(p.default, q.default):
                    problems.append(f"{name}.__init__ lacks keyword {p.name}={p.default!r}")
            continue
        if member == "__init__" and name == "PushConsumer":
            value = official.PushConsumer.__init__  # its default is MessageModel.CLUSTERING
        problems += signature_problems(f"{name}.{member}", value, our_members[member])
    assert problems == []


def test_v2_positional_orderly_flag_is_accepted() -> None:
    producer = pyrmq.client.Producer("PG", True)
    assert producer.orderly is True
    assert pyrmq.client.Producer("PG", 5000).orderly is False


# --- received messages have the official value types ------------------------------------


def test_received_message_values_have_the_official_types(tmp_path: Any) -> None:
    from pyrmq.client import MessageExt, MessageProperty
    from pyrmq.config import StoreConfig
    from pyrmq.store import MessageStore

    # The official RecvMessage reads a message handle; one made by CreateMessage answers the
    # accessors of the base message class (topic, tags, keys, body, properties).
    sent = official.Message("TopicTypes")
    sent.set_tags("TagA")
    sent.set_keys("k1 k2")
    sent.set_body("body")
    sent.set_property("p", "v")
    theirs = official.RecvMessage(sent._handle)
    config = StoreConfig(mapped_file_size_commit_log=1 << 20)
    with MessageStore.open(tmp_path / "store", config, background_services=False) as store:
        store.put("TopicTypes", b"body", tags="TagA", keys=["k1", "k2"], properties={"p": "v"})
        stored = store.get("TopicTypes", 0, 0).messages()[0]
        ours = pyrmq.client.RecvMessage(MessageExt.from_stored(stored, "broker-a"))

        def view(m: Any, tags_property: Any) -> list[Any]:
            return [
                m.topic,
                m.tags,
                m.keys,
                m.body,
                m.get_property("p"),
                m["p"],
                m.get_property("missing"),
                m.get_property(tags_property),
                str(m),
                bytes(m),
            ]

        ours_view = view(ours, MessageProperty.TAGS)
        theirs_view = view(theirs, official_consts.MessageProperty.TAGS)
        assert ours_view == theirs_view
        assert [type(v) for v in ours_view] == [type(v) for v in theirs_view]
        assert repr(ours).startswith("<RecvMessage topic='TopicTypes' id=")
