"""The blocking API (``pyrmq.client``) against a real ``pyrmq serve`` process, driven the way
code written for the official ``rocketmq`` package drives it: the official README examples
run with only the import (and the address) changed, and every send mode, the push consumer's
redelivery of failed messages, broadcasting and the pull consumer deliver exactly what was
sent."""

from __future__ import annotations

import http.server
import io
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from tests.compat import servers

from pyrmq.client import (
    ConsumeStatus,
    Message,
    MessageModel,
    Producer,
    PullConsumer,
    PushConsumer,
    RecvMessage,
    SendStatus,
)
from pyrmq.client import exceptions as rmq_exceptions
from pyrmq.errors import MessageTooLargeError

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

WAIT_S = 15.0
"""Longest wait for a delivery; a held pull answers as soon as a message arrives."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """``pyrmq serve`` on free ports, every delay level 1 s (redeliveries come back fast)."""
    root = tmp_path_factory.mktemp("serve")
    conf = root / "broker.conf"
    conf.write_text("message_delay_level=" + " ".join(["1s"] * 18) + "\n")
    with servers.serving(root, "-c", str(conf)) as proc:
        yield proc


@pytest.fixture(scope="module")
def namesrv(server: Any) -> str:
    return str(server.addresses()[0])


@pytest.fixture
def new_topic(server: Any, namesrv: str) -> Callable[[str], str]:
    """Creates a topic with 4 queues and waits until the name server routes it, as an
    operator does before consumers start."""

    def create(topic: str) -> str:
        servers.create_topic(server.addresses()[1], topic, 4)
        probe = PullConsumer(f"probe-{topic}")
        probe.set_namesrv_addr(namesrv)
        probe.start()
        try:
            wait_for(lambda: _routed(probe, topic), "a route for " + topic)
        finally:
            probe.shutdown()
        return topic

    return create


def _routed(probe: PullConsumer, topic: str) -> bool:
    try:
        return len(probe.fetch_message_queues(topic)) == 4
    except rmq_exceptions.PullConsumerFetchMQFailed:
        return False


def wait_for(predicate: Callable[[], object], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


def make_producer(namesrv: str, group: str) -> Producer:
    producer = Producer(group)
    producer.set_namesrv_addr(namesrv)
    return producer


def pull_all(namesrv: str, topic: str, expression: str = "*") -> list[RecvMessage]:
    consumer = PullConsumer(f"pull-{topic}-{time.monotonic_ns()}")
    consumer.set_namesrv_addr(namesrv)
    with consumer:
        return list(consumer.pull(topic, expression))


class Collector:
    """A push callback that records what it got; ``fail_first`` keys fail once."""

    def __init__(self, *, fail_first: set[bytes] | None = None, how: str = "raise") -> None:
        self.got: list[RecvMessage] = []
        self.fail_first = set(fail_first or ())
        self.how = how
        self._lock = threading.Lock()

    def __call__(self, msg: RecvMessage) -> ConsumeStatus:
        with self._lock:
            self.got.append(msg)
            fail = msg.keys in self.fail_first
            self.fail_first.discard(msg.keys)
        if fail and self.how == "raise":
            raise RuntimeError(f"failing {msg.keys!r} once")
        if fail:
            return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.CONSUME_SUCCESS

    def wait(self, count: int) -> list[RecvMessage]:
        wait_for(lambda: len(self.got) >= count, f"{count} deliveries (got {len(self.got)})")
        return list(self.got)


# --- the official README examples, with only the import and the address changed -----------

README_PRODUCER = """
from pyrmq.client import Producer, Message

producer = Producer('PID-XXX')
producer.set_namesrv_domain('{domain}')
# For ip and port name server address, use `set_namesrv_addr` method, for example:
# producer.set_namesrv_addr('127.0.0.1:9887')
producer.set_session_credentials('XXX', 'XXXX', 'ALIYUN') # No need to call this function if you don't use Aliyun.
producer.start()

msg = Message('{topic}')
msg.set_keys('XXX')
msg.set_tags('XXX')
msg.set_body('XXXX')
ret = producer.send_sync(msg)
print(ret.status, ret.msg_id, ret.offset)
producer.shutdown()
"""  # noqa: E501

README_PUSH_CONSUMER_START = """
import time

from pyrmq.client import PushConsumer


def callback(msg):
    print(msg.id, msg.body)


consumer = PushConsumer('CID_XXX')
consumer.set_namesrv_addr('{namesrv}')
consumer.subscribe('{topic}', callback)
consumer.start()
"""
README_PUSH_CONSUMER_END = """
consumer.shutdown()
"""

README_PULL_CONSUMER = """
from pyrmq.client import PullConsumer


consumer = PullConsumer('CID_XXX')
consumer.set_namesrv_addr('{namesrv}')
consumer.start()

for msg in consumer.pull('{topic}'):
    print(msg.id, msg.body)

consumer.shutdown()
"""


@pytest.fixture
def address_server(namesrv: str) -> Iterator[str]:
    """An HTTP address server (what ``set_namesrv_domain`` reads) answering ``namesrv``."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = namesrv.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/rocketmq/nsaddr4client-internet"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def run_example(code: str) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        exec(compile(code, "<README example>", "exec"), {"__name__": "__example__"})
    return out.getvalue()


def test_readme_producer_sends_through_a_namesrv_domain(
    namesrv: str, new_topic: Callable[[str], str], address_server: str
) -> None:
    topic = new_topic("ReadmeProduce")
    printed = run_example(README_PRODUCER.format(domain=address_server, topic=topic)).split()
    assert printed[0] == str(int(SendStatus.OK))
    got = pull_all(namesrv, topic)
    assert [(m.id, m.topic, m.tags, m.keys, m.body) for m in got] == [
        (printed[1], topic, b"XXX", b"XXX", b"XXXX")
    ]
    assert int(printed[2]) == got[0].queue_offset == 0


def test_readme_push_consumer_prints_every_message(
    namesrv: str, new_topic: Callable[[str], str]
) -> None:
    topic = new_topic("ReadmePush")
    out = io.StringIO()
    namespace: dict[str, Any] = {"__name__": "__example__"}
    with redirect_stdout(out):
        start = README_PUSH_CONSUMER_START.format(namesrv=namesrv, topic=topic)
        exec(compile(start, "<README example>", "exec"), namespace)
        try:
            with make_producer(namesrv, "PG-readme-push") as producer:
                ids = [
                    producer.send_sync(Message(topic, f"body-{i}".encode())).msg_id
                    for i in range(6)
                ]
            wait_for(lambda: out.getvalue().count("\n") >= 6, "6 printed messages")
        finally:
            exec(compile(README_PUSH_CONSUMER_END, "<README example>", "exec"), namespace)
    lines = sorted(out.getvalue().splitlines())
    assert lines == sorted(f"{ids[i]} b'body-{i}'" for i in range(6))


def test_readme_pull_consumer_prints_every_message(
    namesrv: str, new_topic: Callable[[str], str]
) -> None:
    topic = new_topic("ReadmePull")
    with make_producer(namesrv, "PG-readme-pull") as producer:
        ids = [producer.send_sync(Message(topic, f"m{i}")).msg_id for i in range(10)]
    printed = run_example(README_PULL_CONSUMER.format(namesrv=namesrv, topic=topic))
    assert sorted(printed.splitlines()) == sorted(f"{ids[i]} b'm{i}'" for i in range(10))


# --- every send mode ---------------------------------------------------------------------


def _message(topic: str, i: int, mode: str) -> Message:
    msg = Message(topic)
    msg.set_keys(f"{mode}-{i}")
    msg.set_tags(f"Tag{mode}")
    msg.set_body(f"{mode} body {i} \x00\xff".encode("latin-1"))
    msg.set_property("mode", mode)
    return msg


def test_every_send_mode_delivers_exact_content(
    namesrv: str, new_topic: Callable[[str], str]
) -> None:
    topic = new_topic("BlockingSendModes")
    producer = Producer("PG-modes", timeout=5000, compress_level=6, max_message_size=1 << 20)
    producer.set_namesrv_addr(namesrv)
    producer.start()
    try:
        sent: dict[bytes, tuple[str | None, int | None]] = {}
        for i in range(3):
            ret = producer.send_sync(_message(topic, i, "sync"))
            assert ret.status == SendStatus.OK
            sent[f"sync-{i}".encode()] = (ret.msg_id, None)

        results: list[Any] = []
        done = threading.Semaphore(0)

        def on_success(result: Any) -> None:
            results.append(result)
            done.release()

        def on_exception(e: BaseException) -> None:
            results.append(e)
            done.release()

        for i in range(3):
            producer.send_async(_message(topic, i, "async"), on_success, on_exception)
        for _ in range(3):
            assert done.acquire(timeout=WAIT_S)
        assert all(r.status == SendStatus.OK for r in results), results

        for i in range(3):
            producer.send_oneway(_message(topic, i, "oneway"))
        for i in range(4):
            ret = producer.send_orderly(_message(topic, i, "orderly"), i + 1)
            sent[f"orderly-{i}".encode()] = (ret.msg_id, (i + 1) % 4)
        producer.send_oneway_orderly(_message(topic, 0, "onewayorderly"), 7)
        sent[b"onewayorderly-0"] = (None, 3)
        ret = producer.send_orderly_with_sharding_key(_message(topic, 0, "sharding"), "order-1")
        sent[b"sharding-0"] = (ret.msg_id, None)
        batch = producer.send_batch([_message(topic, i, "batch") for i in range(3)])
        assert batch.status == SendStatus.OK
        batch_ids = batch.msg_id.split(",")
        for i in range(3):
            sent[f"batch-{i}".encode()] = (batch_ids[i], None)
    finally:
        producer.shutdown()

    got = pull_all(namesrv, topic)
    by_key = {m.keys: m for m in got}
    assert len(got) == len(by_key) == 3 + 3 + 3 + 4 + 1 + 1 + 3
    async_ids = {r.msg_id for r in results}
    for key, m in by_key.items():
        mode, i = key.decode().rsplit("-", 1)
        assert m.topic == topic
        assert m.tags == f"Tag{mode}".encode()
        assert m.body == f"{mode} body {i} \x00\xff".encode("latin-1")
        assert m.get_property("mode") == m["mode"] == mode.encode()
        assert m.get_property("no-such-property") == b""
        assert m.reconsume_times == 0
        assert m.store_size > len(m.body)
        assert m.born_timestamp <= m.store_timestamp
        expected_id, expected_queue = sent.get(key, (None, None))
        if expected_id is not None:
            assert m.id == expected_id
        if expected_queue is not None:
            assert m.queue_id == expected_queue
        if mode == "async":
            assert m.id in async_ids
    batch_queues = {by_key[f"batch-{i}".encode()].queue_id for i in range(3)}
    assert len(batch_queues) == 1


def test_send_failures_raise_the_official_exceptions(namesrv: str) -> None:
    producer = Producer("PG-failures", max_message_size=1024)
    with pytest.raises(rmq_exceptions.ProducerSendSyncFailed, match="not started"):
        producer.send_sync(Message("TopicX", b"x"))
    producer.set_namesrv_addr(namesrv)
    with producer:
        with pytest.raises(rmq_exceptions.ProducerSendSyncFailed) as info:
            producer.send_sync(Message("TopicX", b"x" * 2048))
        assert isinstance(info.value.__cause__, MessageTooLargeError)
        with pytest.raises(rmq_exceptions.ProducerSendOrderlyFailed):
            producer.send_orderly(Message("TopicX", b"x" * 2048), 1)
        failures: list[BaseException] = []
        # As the official client: a message failing the checks raises RocketMQException from
        # send_async itself, and no callback hears of it.
        with pytest.raises(rmq_exceptions.RocketMQException) as raised:
            producer.send_async(Message("TopicX", b"x" * 2048), None, failures.append)
        assert type(raised.value) is rmq_exceptions.RocketMQException
        assert isinstance(raised.value.__cause__, MessageTooLargeError)
        with pytest.raises(rmq_exceptions.RocketMQException, match="empty"):
            producer.send_async(Message("TopicX"), None, failures.append)
        time.sleep(0.2)
        assert failures == []
        with pytest.raises(TypeError):
            Message("TopicX").set_body(5)  # type: ignore[arg-type]
    # The official client's default largest body: 128 KiB.
    with make_producer(namesrv, "PG-default-size") as sized:
        with pytest.raises(rmq_exceptions.ProducerSendSyncFailed) as info:
            sized.send_sync(Message("TopicX", b"x" * (128 * 1024 + 1)))
        assert isinstance(info.value.__cause__, MessageTooLargeError)
    consumer = PushConsumer("CG-no-subscription")
    consumer.set_namesrv_addr(namesrv)
    with pytest.raises(rmq_exceptions.PushConsumerStartFailed, match="no subscription"):
        consumer.start()


def test_without_a_name_server_send_async_raises_and_pull_yields_nothing() -> None:
    """As the official client: a send_async that finds no route raises from the call and its
    exception callback hears of it too; a pull yields nothing rather than raising."""
    dead = "127.0.0.1:1"
    failures: list[BaseException] = []
    with make_producer(dead, "PG-no-namesrv") as producer:
        with pytest.raises(rmq_exceptions.RocketMQException):
            producer.send_async(Message("TopicNoRoute", b"x"), None, failures.append)
        deadline = time.monotonic() + WAIT_S
        while not failures and time.monotonic() < deadline:
            time.sleep(0.05)
    [failure] = failures
    assert isinstance(failure, rmq_exceptions.ProducerSendAsyncFailed)
    consumer = PullConsumer("CG-no-namesrv")
    consumer.set_namesrv_addr(dead)
    with consumer:
        assert list(consumer.pull("TopicNoRoute")) == []


# --- push consumer ------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["raise", "reconsume_later"])
def test_failed_message_is_redelivered_with_reconsume_times_1(
    namesrv: str, new_topic: Callable[[str], str], how: str
) -> None:
    topic = new_topic(f"BlockingRetry-{how}")
    collector = Collector(fail_first={b"k1", b"k3"}, how=how)
    consumer = PushConsumer(f"CG-retry-{how}")
    consumer.set_namesrv_addr(namesrv)
    consumer.set_thread_count(2)
    consumer.subscribe(topic, collector)
    consumer.start()
    try:
        with make_producer(namesrv, f"PG-retry-{how}") as producer:
            ids = {}
            for i in range(5):
                msg = Message(topic)
                msg.set_keys(f"k{i}")
                msg.set_tags("TagRetry")
                msg.set_body(f"retry body {i}")
                ids[f"k{i}".encode()] = producer.send_sync(msg).msg_id
        got = collector.wait(7)
        time.sleep(0.3)  # nothing more may come
        got = list(collector.got)
    finally:
        consumer.shutdown()
    assert len(got) == 7
    deliveries = sorted((m.keys, m.reconsume_times) for m in got)
    assert deliveries == [
        (b"k0", 0),
        (b"k1", 0),
        (b"k1", 1),
        (b"k2", 0),
        (b"k3", 0),
        (b"k3", 1),
        (b"k4", 0),
    ]
    for m in got:
        assert (m.topic, m.id, m.tags) == (topic, ids[m.keys], b"TagRetry")
        assert m.body == f"retry body {m.keys.decode()[1:]}".encode()


def test_tag_expression_selects_messages(namesrv: str, new_topic: Callable[[str], str]) -> None:
    topic = new_topic("BlockingTags")
    collector = Collector()
    consumer = PushConsumer("CG-tags")
    consumer.set_namesrv_addr(namesrv)
    consumer.subscribe(topic, collector, "TagA || TagC")
    with consumer:
        with make_producer(namesrv, "PG-tags") as producer:
            for i, tag in enumerate(["TagA", "TagB", "TagC", "TagB", "TagA"]):
                msg = Message(topic)
                msg.set_tags(tag)
                msg.set_body(f"{tag}-{i}")
                producer.send_sync(msg)
        collector.wait(3)
        time.sleep(0.3)
    assert sorted(m.body for m in collector.got) == [b"TagA-0", b"TagA-4", b"TagC-2"]


def test_broadcasting_gives_every_consumer_every_message(
    namesrv: str,
    new_topic: Callable[[str], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYRMQ_OFFSETS_DIR", str(tmp_path / "offsets"))
    topic = new_topic("BlockingBroadcast")
    collectors = [Collector(), Collector()]
    consumers = []
    for n, collector in enumerate(collectors):
        consumer = PushConsumer("CG-broadcast", message_model=MessageModel.BROADCASTING)
        consumer.set_namesrv_addr(namesrv)
        consumer.set_instance_name(f"broadcast-{n}")
        consumer.subscribe(topic, collector)
        consumer.start()
        consumers.append(consumer)
    try:
        with make_producer(namesrv, "PG-broadcast") as producer:
            for i in range(8):
                producer.send_sync(Message(topic, f"cast-{i}"))
        for collector in collectors:
            collector.wait(8)
        time.sleep(0.3)
    finally:
        for consumer in consumers:
            consumer.shutdown()
    expected = sorted(f"cast-{i}".encode() for i in range(8))
    for collector in collectors:
        assert sorted(m.body for m in collector.got) == expected


# --- pull consumer ------------------------------------------------------------------------


def test_pull_consumer_remembers_offsets_and_filters_tags(
    namesrv: str, new_topic: Callable[[str], str]
) -> None:
    topic = new_topic("BlockingPull")

    def send(tags: list[str], start: int) -> None:
        with make_producer(namesrv, "PG-pull") as producer:
            for i, tag in enumerate(tags, start):
                msg = Message(topic)
                msg.set_tags(tag)
                msg.set_body(f"{tag}-{i}")
                producer.send_sync(msg)

    send(["TagA", "TagB"] * 5, 0)
    consumer = PullConsumer("CG-pull")
    consumer.set_namesrv_addr(namesrv)
    consumer.start()
    try:
        first = [m.body for m in consumer.pull(topic, "TagA", max_num=2)]
        assert sorted(first) == sorted(f"TagA-{i}".encode() for i in range(0, 10, 2))
        assert list(consumer.pull(topic, "TagA")) == []
        queues = consumer.fetch_message_queues(topic)
        assert sum(consumer.get_message_queue_offset(mq) for mq in queues) == 10
        send(["TagA", "TagB"], 10)
        assert [m.body for m in consumer.pull(topic, "TagA")] == [b"TagA-10"]
        consumer.set_message_queue_offset(queues[0], 0)
        again = [m.body for m in consumer.pull(topic)]
        assert again, "queue 0 is read again from offset 0"
        # A topic no name server knows has nothing, as with the official client.
        assert list(consumer.pull("BlockingPullNoSuchTopic")) == []
    finally:
        consumer.shutdown()
    with pytest.raises(rmq_exceptions.PullConsumerFetchMessageFailed, match="not started"):
        list(consumer.pull(topic))
    # The group's offsets outlive the object, as the official client's class-wide table: a
    # pull consumer made again goes on where the last stopped.
    send(["TagA"], 12)
    renewed = PullConsumer("CG-pull")
    renewed.set_namesrv_addr(namesrv)
    with renewed:
        assert [m.body for m in renewed.pull(topic)] == [b"TagA-12"]
    other = PullConsumer("CG-pull-other")
    other.set_namesrv_addr(namesrv)
    with other:
        assert len(list(other.pull(topic))) == 13


def test_a_selector_written_for_the_official_client_reads_its_arg_as_a_c_int(
    namesrv: str, new_topic: Callable[[str], str]
) -> None:
    """The official client hands a queue selector the address of a C int holding ``arg``, and
    the message with bytes accessors: a selector written for it runs (it crashed the
    process, reading a plain int as an address)."""
    import ctypes

    topic = new_topic("BlockingSelector")
    seen: list[tuple[bytes, bytes]] = []

    def selector(mq_size: int, msg: Any, arg: Any) -> int:
        seen.append((msg.keys, msg.get_property("KEYS")))
        return ctypes.cast(arg, ctypes.POINTER(ctypes.c_int))[0] % mq_size

    with make_producer(namesrv, "PG-selector") as producer:
        msg = Message(topic)
        msg.set_keys("selected")
        msg.set_body("to queue 3")
        producer.send_orderly(msg, 7, queue_selector=selector)
        producer.send_oneway_orderly(msg, 6, queue_selector=selector)
    assert seen == [(b"selected", b"selected")] * 2
    wait_for(lambda: len(pull_all(namesrv, topic)) == 2, "both messages")
    assert sorted(m.queue_id for m in pull_all(namesrv, topic)) == [2, 3]


def test_each_send_of_one_message_object_is_a_message_of_its_own(
    namesrv: str, new_topic: Callable[[str], str]
) -> None:
    """As with the official client, sending one Message object again sends a new message with
    an id of its own (it was sent again with the first one's id, which consumers that drop
    duplicates by id took for a redelivery), and the object is left as it was."""
    topic = new_topic("BlockingResend")
    with make_producer(namesrv, "PG-resend") as producer:
        msg = Message(topic)
        msg.set_body("again")
        ids = [producer.send_sync(msg).msg_id for _ in range(3)]
        batch = producer.send_batch([msg, msg])
        assert "UNIQ_KEY" not in msg.properties
    assert len(set(ids)) == 3
    assert len(set(batch.msg_id.split(","))) == 2
    wait_for(lambda: len(pull_all(namesrv, topic)) == 5, "five messages")
    assert len({m.id for m in pull_all(namesrv, topic)}) == 5


def test_a_callback_returning_true_has_its_message_consumed(
    namesrv: str, new_topic: Callable[[str], str]
) -> None:
    """0.4.4 ignores what a callback returns: only raising, or returning RECONSUME_LATER
    itself, brings a message back. (True equals RECONSUME_LATER's 1, and was taken for it.)"""
    topic = new_topic("BlockingReturnsTrue")
    got: list[int] = []

    def callback(msg: RecvMessage) -> bool:
        got.append(msg.reconsume_times)
        return True

    consumer = PushConsumer("CG-returns-true")
    consumer.set_namesrv_addr(namesrv)
    consumer.subscribe(topic, callback)
    consumer.start()
    try:
        with make_producer(namesrv, "PG-returns-true") as producer:
            msg = Message(topic)
            msg.set_body("handled")
            producer.send_sync(msg)
        wait_for(lambda: got, "the delivery")
        time.sleep(3)  # redeliveries come back after 1 s here
    finally:
        consumer.shutdown()
    assert got == [0]


@pytest.mark.parametrize("sent", ["before start", "after start"])
@pytest.mark.parametrize("orderly", [False, True], ids=["concurrently", "orderly"])
def test_a_callback_may_shut_its_own_consumer_down(
    namesrv: str, new_topic: Callable[[str], str], orderly: bool, sent: str
) -> None:
    """A callback that shuts its consumer down returns from ``shutdown``: the messages
    before it are committed, and the one it was handling comes again to the group's next
    consumer, as with a RocketMQ consumer that does not wait for its listeners. (Shutdown
    waited for every running callback, this one too, and never returned; called while
    ``start`` had not returned yet, it did nothing.)"""
    case = f"{int(orderly)}-{sent.split()[0]}"
    topic = new_topic(f"BlockingShutdownInCallback{case.replace('-', '')}")
    group = f"CG-shutdown-in-callback-{case}"

    def send_six() -> None:
        with make_producer(namesrv, f"PG-shutdown-in-callback-{case}") as producer:
            for i in range(6):
                producer.send_orderly(Message(topic, str(i).encode()), 0)

    def consumer_of(callback: Callable[[RecvMessage], ConsumeStatus]) -> PushConsumer:
        consumer = PushConsumer(group, orderly=orderly)
        consumer.set_namesrv_addr(namesrv)
        consumer.set_consume_from_where("CONSUME_FROM_FIRST_OFFSET")
        consumer.set_thread_count(1)
        consumer.subscribe(topic, callback)
        return consumer

    got: list[int] = []
    returned = threading.Event()

    def shut_down_at_the_third(msg: RecvMessage) -> ConsumeStatus:
        got.append(int(msg.body))
        if len(got) == 3:
            first.shutdown()
            returned.set()
        return ConsumeStatus.CONSUME_SUCCESS

    first = consumer_of(shut_down_at_the_third)
    if sent == "before start":
        send_six()
    first.start()
    try:
        if sent == "after start":
            send_six()
        assert returned.wait(WAIT_S), f"shutdown from a callback did not return; got {got}"
    finally:
        first.shutdown()
    time.sleep(0.5)  # a consumer still running would deliver the rest meanwhile
    assert got == [0, 1, 2]

    after = Collector()
    with consumer_of(after):
        assert [int(m.body) for m in after.wait(4)] == [2, 3, 4, 5]


def test_a_send_callback_may_shut_its_producer_down(
    namesrv: str, new_topic: Callable[[str], str]
) -> None:
    """``shutdown`` from a ``send_async`` callback returns, and the callbacks of the sends
    still queued run afterwards. (It raised RuntimeError: the callback thread joined
    itself.)"""
    topic = new_topic("BlockingProducerShutdownInCallback")
    producer = make_producer(namesrv, "PG-shutdown-in-send-callback")
    producer.start()
    statuses: list[SendStatus] = []
    raised: list[BaseException] = []
    all_started = threading.Event()

    def on_success(result: Any) -> None:
        statuses.append(result.status)
        if len(statuses) == 1:
            all_started.wait(WAIT_S)
            try:
                producer.shutdown()
            except BaseException as e:
                raised.append(e)

    try:
        for i in range(3):
            producer.send_async(Message(topic, str(i).encode()), on_success, None)
        all_started.set()
        wait_for(lambda: len(statuses) == 3, "three send callbacks")
    finally:
        producer.shutdown()
    assert raised == []
    assert statuses == [SendStatus.OK] * 3
