"""Name-server request handlers."""

import json
import logging
import struct
import time
import zlib
from typing import TYPE_CHECKING

from pyrmq.config import parse_properties
from pyrmq.errors import ConfigError
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import (
    BrokerWritePermRequestHeader,
    DeleteTopicRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    KvConfigRequestHeader,
    RegisterBrokerRequestHeader,
    UnregisterBrokerRequestHeader,
)
from pyrmq.remoting.protocol import RequestCode, ResponseCode
from pyrmq.remoting.server import Connection, RemotingServer

from .kv_config import ORDER_TOPIC_CONFIG, KvConfig
from .route_info import RouteInfo, encode_json_with_int_keys

if TYPE_CHECKING:
    from .server import NamesrvConfig

__all__ = ["NamesrvProcessor"]

log = logging.getLogger(__name__)

# Clients from 4.9.4 (MQVersion ordinal 401) on get standard JSON route keys.
STANDARD_JSON_MIN_VERSION = 401


def _wants_standard_json(request: RemotingCommand, accept_standard_json_only: bool) -> bool:
    return accept_standard_json_only or request.version >= STANDARD_JSON_MIN_VERSION


def _kv_table(values: dict[str, str]) -> bytes:
    """RocketMQ's KVTable body."""
    return json.dumps({"table": values}, separators=(",", ":")).encode()


class NamesrvProcessor:
    """Routes, registrations and cluster listings, over one :class:`RouteInfo`."""

    def __init__(self, routes: RouteInfo, kv: KvConfig, config: "NamesrvConfig") -> None:
        self.routes = routes
        self.kv = kv
        # Replaced whole by UPDATE_NAMESRV_CONFIG; handlers read it on each request.
        self.config = config

    def install(self, server: RemotingServer) -> None:
        server.register(RequestCode.REGISTER_BROKER, self.register_broker)
        server.register(RequestCode.UNREGISTER_BROKER, self.unregister_broker)
        server.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, self.get_route)
        server.register(RequestCode.GET_BROKER_CLUSTER_INFO, self.cluster_info)
        server.register(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, self.topic_list)
        server.register(RequestCode.DELETE_TOPIC_IN_NAMESRV, self.delete_topic)
        server.register(RequestCode.WIPE_WRITE_PERM_OF_BROKER, self.wipe_write_perm)
        server.register(RequestCode.ADD_WRITE_PERM_OF_BROKER, self.add_write_perm)
        server.register(RequestCode.GET_TOPICS_BY_CLUSTER, self.topics_of_cluster)
        server.register(RequestCode.QUERY_DATA_VERSION, self.query_data_version)
        server.register(RequestCode.PUT_KV_CONFIG, self.put_kv)
        server.register(RequestCode.GET_KV_CONFIG, self.get_kv)
        server.register(RequestCode.DELETE_KV_CONFIG, self.delete_kv)
        server.register(RequestCode.GET_KVLIST_BY_NAMESPACE, self.kv_namespace)
        server.register(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS, self.system_topics)
        server.register(RequestCode.GET_NAMESRV_CONFIG, self.get_config)
        server.register(RequestCode.UPDATE_NAMESRV_CONFIG, self.update_config)
        server.on_disconnect.append(self.routes.connection_closed)

    async def register_broker(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = RegisterBrokerRequestHeader.from_ext(request.ext_fields)
        body = request.body or b""
        if header.body_crc32 and zlib.crc32(body) & 0x7FFFFFFF != header.body_crc32:
            return RemotingCommand.response_to(
                request, ResponseCode.SYSTEM_ERROR, remark="crc32 not match"
            )
        try:
            if header.compressed:
                topic_config, data_version = _compressed_register_body(body)
            else:
                topic_config, data_version = _register_body(body)
        except ValueError as e:
            return RemotingCommand.response_to(
                request, ResponseCode.SYSTEM_ERROR, remark=f"bad register body: {e}"
            )
        ha_server, master = self.routes.register_broker(
            cluster=header.cluster_name,
            broker_addr=header.broker_addr,
            broker_name=header.broker_name,
            broker_id=header.broker_id,
            ha_server_addr=header.ha_server_addr,
            topic_config=topic_config,
            data_version=data_version,
            connection=conn,
            now_ms=int(time.time() * 1000),
        )
        # As RocketMQ: the ORDER_TOPIC_CONFIG values, which a Java broker reads as its order
        # topics; no body when there are none (an empty table would clear every order flag).
        order = self.kv.namespace(ORDER_TOPIC_CONFIG)
        return RemotingCommand.response_to(
            request,
            ResponseCode.SUCCESS,
            ext_fields={"haServerAddr": ha_server, "masterAddr": master},
            body=b"" if order is None else _kv_table(order),
        )

    async def unregister_broker(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = UnregisterBrokerRequestHeader.from_ext(request.ext_fields)
        self.routes.unregister_broker(
            broker_addr=header.broker_addr,
            broker_name=header.broker_name,
            broker_id=header.broker_id,
        )
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def get_route(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = GetRouteInfoRequestHeader.from_ext(request.ext_fields)
        route = self.routes.route(header.topic)
        if route is None:
            return RemotingCommand.response_to(
                request,
                ResponseCode.TOPIC_NOT_EXIST,
                remark=f"No topic route info in name server for the topic: {header.topic}",
            )
        if self.config.order_message_enable:
            order = self.kv.get(ORDER_TOPIC_CONFIG, header.topic)
            if order is not None:
                route["orderTopicConf"] = order
        standard = _wants_standard_json(request, header.accept_standard_json_only)
        body = encode_json_with_int_keys(route, standard=standard)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    async def cluster_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        standard = _wants_standard_json(request, False)
        body = encode_json_with_int_keys(self.routes.cluster_info(), standard=standard)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    async def delete_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = DeleteTopicRequestHeader.from_ext(request.ext_fields)
        self.routes.delete_topic(header.topic, header.cluster_name)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def topic_list(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        body = json.dumps({"topicList": self.routes.topics()}, separators=(",", ":")).encode()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    async def wipe_write_perm(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return self._write_perm(request, writable=False, count_field="wipeTopicCount")

    async def add_write_perm(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return self._write_perm(request, writable=True, count_field="addTopicCount")

    def _write_perm(
        self, request: RemotingCommand, *, writable: bool, count_field: str
    ) -> RemotingCommand:
        header = BrokerWritePermRequestHeader.from_ext(request.ext_fields)
        count = self.routes.set_write_perm(header.broker_name, writable=writable)
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, ext_fields={count_field: str(count)}
        )

    async def topics_of_cluster(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = GetTopicsByClusterRequestHeader.from_ext(request.ext_fields)
        topics = self.routes.topics_of_cluster(header.cluster)
        body = json.dumps({"topicList": topics}, separators=(",", ":")).encode()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    async def query_data_version(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = UnregisterBrokerRequestHeader.from_ext(request.ext_fields)
        try:
            version = json.dumps(json.loads(request.body), sort_keys=True)
        except (ValueError, UnicodeDecodeError) as e:
            return RemotingCommand.response_to(
                request, ResponseCode.SYSTEM_ERROR, remark=f"data version is not JSON: {e}"
            )
        addr = header.broker_addr
        changed = self.routes.data_version_changed(addr, version, int(time.time() * 1000))
        stored = self.routes.data_version_of(addr)
        return RemotingCommand.response_to(
            request,
            ResponseCode.SUCCESS,
            ext_fields={"changed": "true" if changed else "false"},
            body=b"" if stored is None else stored.encode(),
        )

    async def put_kv(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = KvConfigRequestHeader.from_ext(request.ext_fields)
        key, value = header.need("key", "value")
        try:
            self.kv.put(header.namespace, key, value)
        except OSError as e:
            return RemotingCommand.response_to(request, ResponseCode.SYSTEM_ERROR, remark=str(e))
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def get_kv(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = KvConfigRequestHeader.from_ext(request.ext_fields)
        [key] = header.need("key")
        value = self.kv.get(header.namespace, key)
        if value is None:
            return RemotingCommand.response_to(
                request,
                ResponseCode.QUERY_NOT_FOUND,
                remark=f"No config item, Namespace: {header.namespace} Key: {key}",
            )
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, ext_fields={"value": value}
        )

    async def delete_kv(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = KvConfigRequestHeader.from_ext(request.ext_fields)
        [key] = header.need("key")
        try:
            self.kv.delete(header.namespace, key)
        except OSError as e:
            return RemotingCommand.response_to(request, ResponseCode.SYSTEM_ERROR, remark=str(e))
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def kv_namespace(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        namespace = KvConfigRequestHeader.from_ext(request.ext_fields).namespace
        values = self.kv.namespace(namespace)
        if values is None:
            return RemotingCommand.response_to(
                request,
                ResponseCode.QUERY_NOT_FOUND,
                remark=f"No config item, Namespace: {namespace}",
            )
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=_kv_table(values))

    # --- system topics, name-server settings -----------------------------------------------

    async def system_topics(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """A TopicList of the names no topic may take that the name server knows: every
        cluster's name and every broker name, with one broker's address, which clients ask
        for the broker's own system topics (GET_SYSTEM_TOPIC_LIST_FROM_BROKER)."""
        names, broker_addr = self.routes.system_topics()
        body: dict[str, object] = {"topicList": names}
        if broker_addr is not None:
            body["brokerAddr"] = broker_addr
        encoded = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=encoded)

    async def get_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Every setting as ``key=value`` lines (``mqadmin getNamesrvConfig``)."""
        settings = sorted(self.config.to_properties().items())
        body = "".join(f"{key}={value}\n" for key, value in settings).encode()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    async def update_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Applies ``key=value`` lines: all of them, or none with the reason in the remark. As
        in RocketMQ, a path setting is refused with NO_PERMISSION; unlike RocketMQ, which
        passes over unknown keys, they are refused, and so are settings read only at start."""
        values = parse_properties(request.body.decode("utf-8", "replace"), source="request")
        if "kvConfigPath" in values or "configStorePath" in values:
            return RemotingCommand.response_to(
                request, ResponseCode.NO_PERMISSION, remark="Can not update config path"
            )
        try:
            new = self.config.updated(values)
        except ConfigError as e:
            return RemotingCommand.response_to(request, ResponseCode.SYSTEM_ERROR, remark=str(e))
        if new != self.config:
            old = self.config.to_properties()
            changed = {k: v for k, v in new.to_properties().items() if v != old[k]}
            self.config = new
            log.info(
                "name server settings changed peer=%s %s",
                conn.peer_address,
                ", ".join(f"{k}={v}" for k, v in sorted(changed.items())),
            )
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)


_MAX_INFLATED_REGISTER = 256 << 20
"""A compressed registration inflating past this is refused (a Java broker's 100,000
topics take about 10 MiB)."""


def _compressed_register_body(raw: bytes) -> tuple[dict[str, dict[str, object]], str]:
    """The topic table and data version of a REGISTER_BROKER body a Java broker compressed
    (``compressedRegister``): a zlib stream of big-endian, length-prefixed parts: the data
    version's JSON, the topic count and each topic as ``name read write perm filterType
    [attributes]``, then the filter servers and (5.x) the queue mappings, which are not read."""
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(raw, _MAX_INFLATED_REGISTER)
    except zlib.error as e:
        raise ValueError(f"the compressed body does not inflate: {e}") from e
    if inflater.unconsumed_tail:
        raise ValueError(f"the compressed body inflates past {_MAX_INFLATED_REGISTER} bytes")
    if not inflater.eof:
        raise ValueError("the compressed body ends before its stream does")
    pos = 0

    def number() -> int:
        nonlocal pos
        if pos + 4 > len(data):
            raise ValueError("the compressed body ends inside a length")
        pos += 4
        return int(struct.unpack_from(">i", data, pos - 4)[0])

    def part() -> bytes:
        nonlocal pos
        size = number()
        if size < 0 or pos + size > len(data):
            raise ValueError(f"the compressed body ends inside a part of {size} bytes")
        pos += size
        return data[pos - size : pos]

    version = json.loads(part())
    table: dict[str, dict[str, object]] = {}
    for _ in range(number()):
        fields = part().decode().split(" ")
        if len(fields) < 5:
            raise ValueError(f"a topic config of {len(fields)} fields: {' '.join(fields)!r}")
        name = fields[0]
        table[name] = {
            "topicName": name,
            "readQueueNums": int(fields[1]),
            "writeQueueNums": int(fields[2]),
            "perm": int(fields[3]),
        }
    return table, json.dumps(version, sort_keys=True)


def _register_body(raw: bytes) -> tuple[dict[str, dict[str, object]], str]:
    """The topic table and data version of a REGISTER_BROKER body (none: no topics)."""
    if not raw:
        return {}, ""
    body = json.loads(raw)
    wrapper = body.get("topicConfigSerializeWrapper") if isinstance(body, dict) else None
    table = wrapper.get("topicConfigTable") if isinstance(wrapper, dict) else None
    if (
        not isinstance(body, dict)
        or not isinstance(wrapper, dict | None)
        or not isinstance(table, dict | None)
        or not all(isinstance(t, dict) for t in (table or {}).values())
    ):
        raise ValueError("not a topicConfigSerializeWrapper with a table of topic objects")
    version = wrapper.get("dataVersion") if wrapper else None
    return table or {}, json.dumps(version, sort_keys=True)
