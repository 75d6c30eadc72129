"""The name server's route tables, without the network."""

import json

from pyrmq.namesrv.route_info import RouteInfo, encode_json_with_int_keys

TOPICS = {
    "TopicTest": {"topicName": "TopicTest", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6},
    "TBW102": {"topicName": "TBW102", "readQueueNums": 8, "writeQueueNums": 8, "perm": 7},
}


def register(
    routes: RouteInfo,
    name: str,
    addr: str,
    *,
    broker_id: int = 0,
    topics=TOPICS,
    now: int = 1000,
    conn=None,
    version: str = "v1",
):
    return routes.register_broker(
        cluster="DefaultCluster",
        broker_addr=addr,
        broker_name=name,
        broker_id=broker_id,
        ha_server_addr=addr.replace("10911", "10912"),
        topic_config=topics,
        data_version=version,
        connection=conn,
        now_ms=now,
    )


def test_route_lists_every_broker_serving_the_topic_sorted_by_name() -> None:
    routes = RouteInfo()
    register(routes, "broker-b", "127.0.0.2:10911")
    register(routes, "broker-a", "127.0.0.1:10911")
    route = routes.route("TopicTest")
    assert route is not None
    assert [q["brokerName"] for q in route["queueDatas"]] == ["broker-a", "broker-b"]
    assert route["brokerDatas"][0] == {
        "brokerAddrs": {0: "127.0.0.1:10911"},
        "brokerName": "broker-a",
        "cluster": "DefaultCluster",
    }
    assert routes.route("Nope") is None
    assert routes.topics() == ["TBW102", "TopicTest"]


def test_old_clients_get_unquoted_integer_keys_new_clients_standard_json() -> None:
    value = {
        "brokerDatas": [{"brokerAddrs": {0: "h:1", 1: "h:2"}, "brokerName": "b"}],
        "filterServerTable": {},
    }
    loose = encode_json_with_int_keys(value, standard=False)
    expected = (
        b'{"brokerDatas":[{"brokerAddrs":{0:"h:1",1:"h:2"},"brokerName":"b"}],'
        b'"filterServerTable":{}}'
    )
    assert loose == expected
    standard = encode_json_with_int_keys(value, standard=True)
    assert json.loads(standard)["brokerDatas"][0]["brokerAddrs"] == {"0": "h:1", "1": "h:2"}


def test_a_slave_learns_its_master_and_does_not_change_topics() -> None:
    routes = RouteInfo()
    register(routes, "broker-a", "127.0.0.1:10911")
    ha, master = register(routes, "broker-a", "127.0.0.1:20911", broker_id=1, topics={})
    assert (ha, master) == ("127.0.0.1:10912", "127.0.0.1:10911")
    route = routes.route("TopicTest")
    assert route is not None
    assert route["brokerDatas"][0]["brokerAddrs"] == {0: "127.0.0.1:10911", 1: "127.0.0.1:20911"}


def test_a_registration_of_some_topics_keeps_the_others() -> None:
    """A Java broker registers only the topic an admin changed, with a new data version; the
    periodic full registration that follows has the same version. RocketMQ's name server only
    adds and updates topics on registration, and a topic goes only when it is deleted."""
    routes = RouteInfo()
    register(routes, "broker-a", "127.0.0.1:10911")
    changed = {"TopicNew": {"readQueueNums": 2, "writeQueueNums": 2, "perm": 6}}
    register(routes, "broker-a", "127.0.0.1:10911", topics=changed, version="v2")
    register(routes, "broker-a", "127.0.0.1:10911", topics=TOPICS, version="v2")
    for topic in ("TopicTest", "TBW102", "TopicNew"):
        route = routes.route(topic)
        assert route is not None, topic
        assert [b["brokerName"] for b in route["brokerDatas"]] == ["broker-a"]
    routes.delete_topic("TopicNew")
    assert routes.route("TopicNew") is None


def test_silent_brokers_expire_and_closed_connections_unregister() -> None:
    routes = RouteInfo()
    conn = object()
    register(routes, "broker-a", "127.0.0.1:10911", now=1_000, conn=conn)
    register(routes, "broker-b", "127.0.0.2:10911", now=100_000)
    assert routes.expire(now_ms=125_000, expired_after_ms=120_000) == ["127.0.0.1:10911"]
    route = routes.route("TopicTest")
    assert route is not None
    assert [b["brokerName"] for b in route["brokerDatas"]] == ["broker-b"]
    register(routes, "broker-a", "127.0.0.1:10911", now=126_000, conn=conn)
    routes.connection_closed(conn)
    route = routes.route("TopicTest")
    assert route is not None
    assert [b["brokerName"] for b in route["brokerDatas"]] == ["broker-b"]
    assert routes.cluster_info()["clusterAddrTable"] == {"DefaultCluster": ["broker-b"]}
    routes.unregister_broker(broker_addr="127.0.0.2:10911", broker_name="broker-b", broker_id=0)
    assert routes.route("TopicTest") is None
    assert routes.cluster_info() == {"brokerAddrTable": {}, "clusterAddrTable": {}}


def test_consumers_silent_past_the_channel_timeout_are_dropped() -> None:
    from pyrmq.broker.clients import ClientTable

    clients = ClientTable()
    conn = object()
    data = {
        "consumeType": 1,
        "messageModel": 1,
        "subscriptionDataSet": [{"topic": "T", "subString": "TagA || TagB"}],
    }
    assert clients.register_consumer("G", data, "c1", conn, now_ms=1_000)
    assert not clients.register_consumer("G", data, "c1", conn, now_ms=2_000)
    assert clients.register_consumer("G", data, "c2", object(), now_ms=100_000)
    sub = clients.subscription("G", "T")
    assert sub is not None
    assert sub.tags_codes is not None
    assert len(sub.tags_codes) == 2
    assert clients.expire(now_ms=125_000, expired_after_ms=120_000) == ["G"]
    assert clients.consumer_ids("G") == ["c2"]
    assert clients.drop_connection(conn) == []


def test_a_registration_of_unchanged_data_adds_missing_topics_and_updates_none() -> None:
    """A drained broker's topics stay drained through its periodic registrations and through
    an increment naming another topic; a name server whose first word from a broker was an
    increment (it restarted) gets the other topics from the next whole registration."""

    def perm(routes: RouteInfo, topic: str) -> int:
        route = routes.route(topic)
        assert route is not None, topic
        [queue] = route["queueDatas"]
        return int(queue["perm"])

    new = {"TopicNew": {"topicName": "TopicNew", "readQueueNums": 1, "writeQueueNums": 1,
                        "perm": 6}}  # fmt: skip
    routes = RouteInfo()
    register(routes, "broker-a", "127.0.0.1:10911", version="v1")
    routes.set_write_perm("broker-a", writable=False)
    register(routes, "broker-a", "127.0.0.1:10911", version="v1")
    register(routes, "broker-a", "127.0.0.1:10911", topics=new, version="v2")
    register(routes, "broker-a", "127.0.0.1:10911", topics={**TOPICS, **new}, version="v2")
    assert [perm(routes, t) for t in ("TopicTest", "TBW102", "TopicNew")] == [4, 5, 6]

    restarted = RouteInfo()
    register(restarted, "broker-a", "127.0.0.1:10911", topics=new, version="v3")
    assert restarted.route("TopicTest") is None
    register(restarted, "broker-a", "127.0.0.1:10911", topics={**TOPICS, **new}, version="v3")
    assert [perm(restarted, t) for t in ("TopicTest", "TBW102", "TopicNew")] == [6, 7, 6]


def test_a_slave_promoted_in_place_applies_its_whole_topic_table() -> None:
    """Same address, id 1 then 0, and its old master's data version (a slave copies it): its
    topics replace those of the master that left, as RocketMQ's first registration of an id."""
    routes = RouteInfo()
    master = object()
    register(routes, "broker-a", "127.0.0.1:10911", conn=master, version="v7")
    slave_topics = {"TopicTest": {**TOPICS["TopicTest"], "readQueueNums": 8, "writeQueueNums": 8}}
    register(routes, "broker-a", "127.0.0.1:20911", broker_id=1, topics=slave_topics, version="v7")
    routes.set_write_perm("broker-a", writable=False)
    routes.connection_closed(master)
    register(routes, "broker-a", "127.0.0.1:20911", broker_id=0, topics=slave_topics, version="v7")
    route = routes.route("TopicTest")
    assert route is not None
    [queue] = route["queueDatas"]
    assert (queue["perm"], queue["readQueueNums"], queue["writeQueueNums"]) == (6, 8, 8)
    assert route["brokerDatas"][0]["brokerAddrs"] == {0: "127.0.0.1:20911"}


def test_a_name_registered_in_two_clusters_leaves_both() -> None:
    routes = RouteInfo()
    one, two = object(), object()
    for cluster, addr, conn in (("C1", "127.0.0.1:6000", one), ("C2", "127.0.0.1:6001", two)):
        routes.register_broker(
            cluster=cluster, broker_addr=addr, broker_name="dup", broker_id=0,
            ha_server_addr="", topic_config=TOPICS, data_version="v1", connection=conn,
            now_ms=1000,
        )  # fmt: skip
    routes.connection_closed(one)
    routes.connection_closed(two)
    assert routes.cluster_info() == {"brokerAddrTable": {}, "clusterAddrTable": {}}
