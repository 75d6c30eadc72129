"""RocketMQ's namespace rules for topic and group names, and their folding into gRPC messages."""

import pytest

from pyrmq import namespace
from pyrmq.client.instance import ClientConfig
from pyrmq.client.lite_pull import LitePullConsumer
from pyrmq.client.producer import Producer
from pyrmq.client.push_consumer import PushConsumer
from pyrmq.proxy.namespaces import fold, unfold
from pyrmq.proxy.proto import messaging_pb2 as pb


@pytest.mark.parametrize(
    ("ns", "resource", "wrapped", "found"),
    [
        ("ns", "T", "ns%T", "ns"),
        ("ns", "ns%T", "ns%T", "ns"),
        ("ns", "%RETRY%G", "%RETRY%ns%G", "ns"),
        ("ns", "%DLQ%ns%G", "%DLQ%ns%G", "ns"),
        ("", "T", "T", ""),
        ("ns", "", "", ""),
        # System resources are in no namespace.
        ("ns", "rmq_sys_TRACE", "rmq_sys_TRACE", ""),
        ("ns", "SCHEDULE_TOPIC_XXXX", "SCHEDULE_TOPIC_XXXX", ""),
        ("ns", "CID_RMQ_SYS_TRANS", "CID_RMQ_SYS_TRANS", ""),
        # Those that take producers' messages too: trace data, the benchmark, auto-creation.
        ("ns", "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRACE_TOPIC", ""),
        ("ns", "BenchmarkTest", "BenchmarkTest", ""),
        ("ns", "TBW102", "TBW102", ""),
    ],
)
def test_wrap_and_split_as_rocketmq(ns: str, resource: str, wrapped: str, found: str) -> None:
    assert namespace.wrap(ns, resource) == wrapped
    assert namespace.split(wrapped)[0] == found
    if found:
        assert namespace.wrap(found, namespace.split(wrapped)[1]) == wrapped


def test_a_request_is_folded_and_an_answer_unfolded_wherever_they_name_resources() -> None:
    request = pb.ReceiveMessageRequest(
        group=pb.Resource(resource_namespace="ns", name="G"),
        message_queue=pb.MessageQueue(topic=pb.Resource(resource_namespace="ns", name="T")),
    )
    fold(request)
    assert (request.group.name, request.message_queue.topic.name) == ("ns%G", "ns%T")
    answer = pb.QueryRouteResponse(
        message_queues=[pb.MessageQueue(topic=pb.Resource(name="ns%T"))] * 2
    )
    unfold(answer)
    assert [(q.topic.resource_namespace, q.topic.name) for q in answer.message_queues] == [
        ("ns", "T"),
        ("ns", "T"),
    ]
    # Names in no namespace stay as they are.
    plain = pb.QueryRouteResponse(message_queues=[pb.MessageQueue(topic=pb.Resource(name="T"))])
    unfold(plain)
    assert plain.message_queues[0].topic == pb.Resource(name="T")


@pytest.mark.parametrize("kind", [Producer, PushConsumer, LitePullConsumer])
def test_name_servers_given_beside_a_client_config_are_used_not_dropped(kind: type) -> None:
    """``Producer("PG", NS, client_config=ClientConfig(namespace=...))`` talks to NS."""
    client = kind(
        "G", "10.0.0.1:9876", client_config=ClientConfig(namespace="ns"), instance_name="i1"
    )
    assert client.config.namesrv_addr == "10.0.0.1:9876"
    assert client.config.instance_name == "i1"
    assert client.config.namespace == "ns"
    assert kind("G").config.namesrv_addr == "127.0.0.1:9876"
    only = ClientConfig(namesrv_addr="10.0.0.2:9876")
    assert kind("G", client_config=only).config is only
