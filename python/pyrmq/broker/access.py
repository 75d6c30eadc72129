"""The broker's ACL check of remoting requests (``aclEnable``): what each request needs, as
RocketMQ's plain ACL reads it, checked against the accounts of ``plain_acl.yml``.

A refused request is answered NO_PERMISSION with the reason and is not served.
"""

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from pyrmq.acl.plain import RETRY_PREFIX, AccessRequest, AclError, AclFile, Permission
from pyrmq.acl.refusals import RefusalLog, shown
from pyrmq.acl.signing import ACCESS_KEY, signature_matches
from pyrmq.broker.clients import parse_heartbeat
from pyrmq.errors import ConfigError
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode

if TYPE_CHECKING:
    from pyrmq.broker.config import BrokerConfig
    from pyrmq.remoting.server import Connection

__all__ = ["RemotingAccess", "acl_file_path", "remoting_request"]

log = logging.getLogger(__name__)

ADMIN_CODES = frozenset(
    {
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.UPDATE_BROKER_CONFIG,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
        RequestCode.SET_MESSAGE_REQUEST_MODE,
        # Not admin requests to RocketMQ's plain ACL, which lets any signed account change
        # the accounts (its own admin flag included) and read every secret: here only admins.
        RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
        RequestCode.DELETE_ACL_CONFIG,
        RequestCode.GET_BROKER_CLUSTER_ACL_INFO,
        RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
        RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG,
    }
)

# Consumers' reads: a topic and a group in the header, both subscribed to.
_POP_CODES = frozenset(
    {
        RequestCode.PULL_MESSAGE,
        RequestCode.POP_MESSAGE,
        RequestCode.ACK_MESSAGE,
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
    }
)


def acl_file_path(config: "BrokerConfig") -> Path:
    """``plainAclFile``, else RocketMQ's place for it: ``$ROCKETMQ_HOME/conf/plain_acl.yml``."""
    if config.plain_acl_file:
        return Path(config.plain_acl_file).expanduser()
    home = os.environ.get("ROCKETMQ_HOME")
    if not home:
        raise ConfigError("aclEnable needs plainAclFile (or ROCKETMQ_HOME/conf/plain_acl.yml)")
    return Path(home) / "conf" / "plain_acl.yml"


def remoting_request(host: str, request: RemotingCommand) -> AccessRequest:
    """What ``request``, from ``host``, asks of the ACL."""
    fields = request.ext_fields
    access = AccessRequest(
        host=host,
        access_key=fields.get(ACCESS_KEY),
        signed=lambda secret: signature_matches(fields, request.body, secret),
        admin=request.code in ADMIN_CODES,
    )
    code, sub = request.code, Permission.SUB
    if code == RequestCode.SEND_MESSAGE:
        _need_send(access, fields.get("topic"))
    elif code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        _need_send(access, fields.get("b"))
    elif code == RequestCode.RECALL_MESSAGE:
        access.need_topic(fields.get("topic"), Permission.PUB)
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        access.need_group(fields.get("group"), sub)
    elif code in _POP_CODES:
        access.need_topic(fields.get("topic"), sub)
        access.need_group(fields.get("consumerGroup"), sub)
    elif code == RequestCode.BATCH_ACK_MESSAGE:
        _need_batch_ack(access, request.body)
    elif code == RequestCode.QUERY_ASSIGNMENT:
        try:
            body = json.loads(request.body)
            access.need_group(str(body.get("consumerGroup", "")), sub)
            access.need_topic(str(body.get("topic", "")), sub)
        except (ValueError, TypeError, AttributeError, RecursionError) as e:
            raise AclError(f"bad assignment query: {e}") from None
    elif code == RequestCode.QUERY_MESSAGE:
        access.need_topic(fields.get("topic"), sub)
    elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
        access.need_group(fields.get("consumerGroup"), sub)
    elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
        access.need_group(fields.get("consumerGroup"), sub)
        access.need_topic(fields.get("topic"), sub)
    elif code == RequestCode.HEART_BEAT:
        try:
            data = parse_heartbeat(request.body)
            for consumer in data.get("consumerDataSet") or []:
                access.need_group(str(consumer.get("groupName", "")), sub)
                for subscription in consumer.get("subscriptionDataSet") or []:
                    access.need_topic(str(subscription.get("topic", "")), sub)
        except (ValueError, TypeError, AttributeError, UnicodeDecodeError, RecursionError) as e:
            raise AclError(f"bad heartbeat: {e}") from None
    return access


def _need_batch_ack(access: AccessRequest, body: bytes) -> None:
    try:
        acks = json.loads(body)["acks"]
        for ack in acks:
            access.need_group(str(ack.get("c", ack.get("consumerGroup", ""))), Permission.SUB)
            access.need_topic(str(ack.get("t", ack.get("topic", ""))), Permission.SUB)
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as e:
        raise AclError(f"bad batch ack: {e}") from None


def _need_send(access: AccessRequest, topic: str | None) -> None:
    if topic is not None and topic.startswith(RETRY_PREFIX):
        # A consumer sending a message back to its group's retry topic: the group's consumer.
        access.need_group(topic[len(RETRY_PREFIX) :], Permission.SUB)
    else:
        access.need_topic(topic, Permission.PUB)


class RemotingAccess:
    """The check a broker's remoting server runs on every request before serving it."""

    def __init__(self, acl: AclFile) -> None:
        self.acl = acl
        self._refusals = RefusalLog(log)

    def __call__(self, conn: "Connection", request: RemotingCommand) -> RemotingCommand | None:
        """None if ``request`` may be served, else the refusal to answer it with."""
        host = conn.peer[0]
        try:
            self.acl.current().check(remoting_request(host, request))
        except Exception as e:
            # As RocketMQ: a request the check cannot read is refused like any other.
            reason = shown(str(e))
            self._refusals.refused(host, f"request code={request.code}", reason)
            return RemotingCommand.response_to(
                request, ResponseCode.NO_PERMISSION, remark=f"AclException: {reason}"
            )
        return None
