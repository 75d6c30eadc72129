"""RocketMQ's plain ACL: request signatures (checked against frames the official C++ client
signed), white remote address patterns, plain_acl.yml parsing, and the permission check."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any, cast

import pytest

from pyrmq.acl.addresses import AddressPatternError, address_matcher
from pyrmq.acl.plain import (
    AccessRequest,
    AclError,
    AclFile,
    ForbiddenError,
    NotAuthenticatedError,
    Permission,
    PlainAcl,
    allows,
)
from pyrmq.acl.refusals import LINES_PER_WINDOW, RefusalLog, shown
from pyrmq.acl.signing import (
    Credentials,
    grpc_signature,
    remoting_content,
    sign,
    signature_matches,
)
from pyrmq.broker.access import RemotingAccess, remoting_request
from pyrmq.proxy.access import Caller, grpc_request
from pyrmq.proxy.proto import messaging_pb2 as pb
from pyrmq.remoting.codec import FrameDecoder
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode

VECTORS = Path(__file__).parents[1] / "vectors" / "remoting"

PLAIN = """
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: producer1
    secretKey: producer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - TopicA=PUB
      - TopicB=PUB|SUB
      - TopicC=DENY
  - accessKey: consumer1
    secretKey: consumer-secret
    whiteRemoteAddress: 192.168.1.{5,6}
    topicPerms: [TopicA=SUB]
    groupPerms: [GID_A=SUB, GID_B=DENY]
  - accessKey: adminuser
    secretKey: admin-secret
    admin: true
"""


def _signed_c_frames() -> list[RemotingCommand]:
    out = []
    for meta_path in sorted(VECTORS.glob("*.json")):
        meta = json.loads(meta_path.read_text())
        rec = meta.get("request")
        if rec is None or "Signature" not in (rec.get("header") or {}).get("extFields", {}):
            continue
        (cmd,) = FrameDecoder().feed((VECTORS / rec["file"]).read_bytes())
        out.append(cmd)
    return out


def test_signatures_of_the_official_c_client_verify() -> None:
    frames = _signed_c_frames()
    assert len(frames) >= 20, "captured vectors missing"
    with_body = [f for f in frames if f.body]
    assert with_body, "no signed frame with a body among the vectors"
    for cmd in frames:
        # The C++ client signs with an empty secret key unless one is set.
        assert signature_matches(cmd.ext_fields, cmd.body, ""), cmd
        assert not signature_matches(cmd.ext_fields, cmd.body, "another-secret"), cmd
    # The body is covered: one byte changed and the signature fails.
    cmd = with_body[0]
    assert not signature_matches(cmd.ext_fields, cmd.body[:-1] + b"\x00", "")


def test_a_signed_request_verifies_and_any_change_breaks_it() -> None:
    request = RemotingCommand.request(
        RequestCode.PULL_MESSAGE, ext_fields={"topic": "T", "consumerGroup": "G"}, body=b"xy"
    )
    sign(request, Credentials("producer1", "producer-secret"))
    fields = request.ext_fields
    assert fields["AccessKey"] == "producer1"
    assert signature_matches(fields, request.body, "producer-secret")
    assert not signature_matches(fields, request.body, "producer-secreT")
    assert not signature_matches({**fields, "topic": "U"}, request.body, "producer-secret")
    assert not signature_matches(fields, b"xz", "producer-secret")
    missing = {k: v for k, v in fields.items() if k != "Signature"}
    assert not signature_matches(missing, request.body, "producer-secret")
    # Signed again (a retry to another broker): one signature, still valid.
    sign(request, Credentials("producer1", "producer-secret"))
    assert signature_matches(request.ext_fields, request.body, "producer-secret")
    # Ext fields in key order, values only, then the body.
    assert remoting_content({"b": "2", "a": "1", "Signature": "s"}, b"!") == b"12!"


def test_old_brokers_left_the_unique_key_query_flag_out_of_the_content() -> None:
    fields = {"AccessKey": "producer1", "topic": "T", "_UNIQUE_KEY_QUERY": "true"}
    from pyrmq.acl.signing import remoting_signature

    without = remoting_content(fields, b"", skip="_UNIQUE_KEY_QUERY")
    fields["Signature"] = remoting_signature(without, "producer-secret")
    assert signature_matches(fields, b"", "producer-secret")


def test_grpc_signature_is_hex_hmac_sha1_of_the_date_time() -> None:
    # HMAC-SHA1("key", "The quick brown fox jumps over the lazy dog"), a published test value.
    expected = "de7c9b85b8b78aa6bc8a7a36f70a90701c9db4d9"
    assert grpc_signature("The quick brown fox jumps over the lazy dog", "key") == expected


@pytest.mark.parametrize(
    ("pattern", "yes", "no"),
    [
        ("*", ["1.2.3.4", "::1"], []),
        ("*.*.*.*", ["1.2.3.4"], []),
        ("", [], ["1.2.3.4", ""]),
        ("192.168.1.5", ["192.168.1.5"], ["192.168.1.50", "192.168.1.4"]),
        ("192.168.1.5, 10.0.0.1", ["192.168.1.5", "10.0.0.1"], ["10.0.0.2"]),
        ("192.168.1.{5,6}", ["192.168.1.5", "192.168.1.6"], ["192.168.1.7", "192.168.2.5"]),
        ("192.168.*", ["192.168.0.1", "192.168.255.255"], ["192.169.0.1", "192.168.1"]),
        ("192.168.1.10-20", ["192.168.1.10", "192.168.1.20"], ["192.168.1.9", "192.168.1.21"]),
        ("10.1-2.*.*", ["10.1.0.0", "10.2.9.9"], ["10.3.0.0", "11.1.0.0", "x.1.0.0"]),
        # IPv6 ranges: a prefix of groups, then * or a hexadecimal range.
        ("2001:db8::*", ["2001:db8::", "2001:db8::ffff"], ["2001:db8::1:0", "2001:db9::1"]),
        ("2001:db8:0:0:0:0:0:10-1f", ["2001:db8::10", "2001:db8::1f"], ["2001:db8::20"]),
        ("2001:db8::a-b:*", ["2001:db8::a:1", "2001:db8::b:ffff"], ["2001:db8::c:0"]),
        ("fe80:*", ["fe80::1", "fe80:1::1"], ["fe81::1", "10.0.0.1"]),
        ("2001:DB8::{1,2}", ["2001:db8::1", "2001:db8::2"], ["2001:db8::3"]),
    ],
)
def test_white_remote_address_patterns(pattern: str, yes: list[str], no: list[str]) -> None:
    match = address_matcher(pattern)
    assert [h for h in yes if not match(h)] == []
    assert [h for h in no if match(h)] == []


@pytest.mark.parametrize(
    "pattern",
    [
        "192.168.1",
        "192.168.1.300",
        "192.168.x.*",
        "192.168.1.9-3",
        "{1,2}",
        "1.2.3.{}",
        "2001:db8::*:1",
        "2001:db8::f-a",
        "2001:zz::*",
        "1:2:3:4:5:6:7:8:*",
    ],
)
def test_bad_address_patterns_are_refused(pattern: str) -> None:
    with pytest.raises(AddressPatternError):
        address_matcher(pattern)


def test_permissions_as_rocketmq_combines_them() -> None:
    P = Permission
    assert allows(P.PUB | P.SUB, P.PUB)
    assert allows(P.PUB | P.SUB, P.SUB)
    assert allows(P.PUB, P.PUB)
    assert not allows(P.PUB, P.SUB)
    assert allows(P.SUB, P.ANY)
    assert allows(P.PUB, P.ANY)
    assert not allows(P.DENY, P.ANY)
    assert not allows(P.DENY | P.PUB, P.PUB)
    assert P.parse(None, "x") == P.DENY
    assert P.parse(" SUB|PUB ", "x") == P.PUB | P.SUB


@pytest.mark.parametrize("spelled", ["pub", "sub|pub", "Pub", "READ", "RW", ""])
def test_a_permission_spelled_otherwise_than_rocketmq_does_denies(
    spelled: str, caplog: pytest.LogCaptureFixture
) -> None:
    """RocketMQ's ``Permission.parsePermFromString`` matches the upper-case names only and
    reads anything else as DENY: lower case granted here what a RocketMQ broker refuses."""
    acl = PlainAcl.parse(
        "accounts:\n"
        "  - accessKey: lowercase\n"
        "    secretKey: lowercase-secret\n"
        f"    defaultTopicPerm: '{spelled}'\n"
        f"    topicPerms: ['TopicA={spelled}']\n"
    )
    with caplog.at_level(logging.WARNING, logger="pyrmq.acl.plain"):
        Permission.parse(spelled, "topicPerms: TopicA")
    assert "it denies" in caplog.text
    for topic in ("TopicA", "TopicC"):
        for perm in (Permission.PUB, Permission.SUB):
            request = _request("lowercase", "lowercase-secret")
            request.need_topic(topic, perm)
            with pytest.raises(ForbiddenError):
                acl.check(request)


def _request(
    key: str | None, secret: str | None, host: str = "127.0.0.1", admin: bool = False
) -> AccessRequest:
    return AccessRequest(host, key, lambda s: secret is not None and s == secret, admin=admin)


def test_the_check_of_an_account() -> None:
    acl = PlainAcl.parse(PLAIN)
    ok = _request("producer1", "producer-secret")
    ok.need_topic("TopicA", Permission.PUB)
    ok.need_topic("TopicB", Permission.SUB)
    ok.need_group("GID_ANY", Permission.SUB)  # the default group permission
    acl.check(ok)
    for topic, perm in [
        ("TopicA", Permission.SUB),
        ("TopicC", Permission.PUB),
        ("TopicZ", Permission.PUB),
    ]:
        denied = _request("producer1", "producer-secret")
        denied.need_topic(topic, perm)
        with pytest.raises(ForbiddenError, match=topic):
            acl.check(denied)
    # A retry topic is its group's.
    retry = _request("consumer1", "consumer-secret")
    retry.need_topic("%RETRY%GID_A", Permission.SUB)
    acl.check(retry)
    assert retry.groups == {"GID_A": Permission.SUB}
    assert retry.topics == {}
    retry.need_topic("%RETRY%GID_B", Permission.SUB)
    with pytest.raises(ForbiddenError, match="group GID_B"):
        acl.check(retry)


def test_who_is_let_in() -> None:
    acl = PlainAcl.parse(PLAIN)
    with pytest.raises(NotAuthenticatedError, match="No accessKey"):
        acl.check(_request(None, None))
    with pytest.raises(NotAuthenticatedError, match="No accessKey"):
        acl.check(_request("", ""))  # the C++ client's default
    with pytest.raises(NotAuthenticatedError, match="No acl config for nobody1"):
        acl.check(_request("nobody1", "x"))
    with pytest.raises(NotAuthenticatedError, match="signature"):
        acl.check(_request("producer1", "wrong"))
    # The global white list lets anyone in, signed or not.
    anyone = _request(None, None, host="10.10.103.7")
    anyone.need_topic("TopicC", Permission.PUB)
    acl.check(anyone)
    # An account's white address skips its signature and its permissions.
    white = _request("consumer1", None, host="192.168.1.6")
    white.need_topic("TopicA", Permission.PUB)
    acl.check(white)
    with pytest.raises(NotAuthenticatedError):
        acl.check(_request("consumer1", None, host="192.168.1.7"))


def test_admin_requests_and_admin_accounts() -> None:
    acl = PlainAcl.parse(PLAIN)
    with pytest.raises(ForbiddenError, match="not an admin"):
        acl.check(_request("producer1", "producer-secret", admin=True))
    admin = _request("adminuser", "admin-secret", admin=True)
    admin.need_topic("AnyTopic", Permission.PUB | Permission.SUB)
    admin.need_group("AnyGroup", Permission.SUB)
    acl.check(admin)
    # Permissions listed for an admin do not narrow it.
    narrowed = PlainAcl.parse(
        "accounts: [{accessKey: adminuser, secretKey: admin-secret, admin: true,"
        " topicPerms: [TopicA=SUB], groupPerms: [GID_A=DENY]}]"
    )
    admin.need_topic("TopicA", Permission.PUB)
    admin.need_group("GID_A", Permission.SUB)
    narrowed.check(admin)
    # The trace topic takes any account's traces.
    trace = _request("consumer1", "consumer-secret")
    trace.need_topic("RMQ_SYS_TRACE_TOPIC", Permission.PUB)
    acl.check(trace)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("accounts: [{accessKey: short, secretKey: long-enough}]", "7 characters"),
        ("accounts: [{accessKey: long-enough}]", "required"),
        ("accounts: [{accessKey: aaaaaaa, secretKey: bbbbbbb, topicPerms: [T]}]", "name=PERM"),
        ("accounts: [{accessKey: aaaaaaa, secretKey: bbbbbbb, admin: maybe}]", "admin"),
        (
            "accounts: [{accessKey: aaaaaaa, secretKey: bbbbbbb}, "
            "{accessKey: aaaaaaa, secretKey: ccccccc}]",
            "given twice",
        ),
        ("globalWhiteRemoteAddresses: [1.2.3]", "globalWhiteRemoteAddresses: .1.2.3. is not"),
        ("accounts: [1, 2]", "mapping"),
        ("- a\n- b", "mapping at the top"),
        ("accounts: [", "not YAML"),
    ],
)
def test_a_file_that_cannot_be_used_says_why(text: str, error: str) -> None:
    with pytest.raises(AclError, match=error):
        PlainAcl.parse(text)


def _touch(path: Path, text: str, step: int) -> None:
    path.write_text(text)
    stamp = time.time_ns() + step * 10**9
    os.utime(path, ns=(stamp, stamp))


def test_the_file_is_read_again_once_written_and_a_bad_change_keeps_the_old(
    tmp_path: Path,
) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(PLAIN)
    acl_file = AclFile(path)
    first = acl_file.current()
    assert set(first.accounts) == {"producer1", "consumer1", "adminuser"}
    assert not acl_file.poll()
    _touch(path, PLAIN.replace("producer1", "producer2"), 1)
    # Seen changed once: it may still be being written.
    assert not acl_file.poll()
    assert acl_file.current() is first
    assert acl_file.poll()
    assert set(acl_file.current().accounts) == {"producer2", "consumer1", "adminuser"}
    before = acl_file.current()
    # Changed again before it was read: read only once it stays the same.
    _touch(path, PLAIN.replace("producer1", "producer3"), 2)
    assert not acl_file.poll()
    _touch(path, PLAIN.replace("producer1", "producer4"), 3)
    assert not acl_file.poll()
    assert acl_file.current() is before
    assert acl_file.poll()
    assert set(acl_file.current().accounts) == {"producer4", "consumer1", "adminuser"}
    before = acl_file.current()
    for step, broken in enumerate(
        [
            "accounts: [",
            "",  # truncated, not yet written again
            "accounts: 5",
            "accounts: [{accessKey: aaaaaaa, secretKey: bbbbbbb, whiteRemoteAddress: [a, b]}]",
            "2023-13-45: x",
        ],
        start=4,
    ):
        _touch(path, broken, step)
        assert not acl_file.poll()
        assert not acl_file.poll(), broken
        assert acl_file.current() is before, broken
    path.unlink()
    assert not acl_file.poll()
    assert not acl_file.poll()
    assert acl_file.current() is before


def test_requests_the_check_cannot_read_are_refused_not_raised(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(PLAIN)
    check = RemotingAccess(AclFile(path))

    class Conn:
        peer = ("127.0.0.1", 5555)

    signed = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext_fields={"b": "TopicA"})
    sign(signed, Credentials("producer1", "producer-secret"))
    assert check(cast(Any, Conn()), signed) is None
    bad = [
        RemotingCommand.request(RequestCode.HEART_BEAT, body=b'{"consumerDataSet": [1]}'),
        RemotingCommand.request(
            RequestCode.HEART_BEAT, body=b'{"consumerDataSet": [{"subscriptionDataSet": 5}]}'
        ),
        RemotingCommand.request(RequestCode.HEART_BEAT, body=b"[" * 100_000),
        RemotingCommand.request(
            RequestCode.SEND_MESSAGE_V2,
            ext_fields={"b": "TopicA", "AccessKey": "producer1", "Signature": "\u00e9t\u00e9"},
        ),
    ]
    for request in bad:
        refused = check(cast(Any, Conn()), request)
        assert refused is not None
        assert refused.code == ResponseCode.NO_PERMISSION
        assert (refused.remark or "").startswith("AclException: ")


def test_what_remoting_requests_need() -> None:
    def need(code: int, fields: dict[str, str], body: bytes = b"") -> AccessRequest:
        return remoting_request("h", RemotingCommand.request(code, ext_fields=fields, body=body))

    sent = need(RequestCode.SEND_MESSAGE_V2, {"a": "PG", "b": "TopicA"})
    assert sent.topics == {"TopicA": Permission.PUB}
    assert sent.groups == {}
    back = need(RequestCode.SEND_MESSAGE, {"producerGroup": "PG", "topic": "%RETRY%GID_A"})
    assert back.topics == {}
    assert back.groups == {"GID_A": Permission.SUB}
    recalled = need(RequestCode.RECALL_MESSAGE, {"topic": "TopicA", "recallHandle": "h"})
    assert recalled.topics == {"TopicA": Permission.PUB}
    pulled = need(RequestCode.PULL_MESSAGE, {"topic": "TopicA", "consumerGroup": "GID_A"})
    assert pulled.topics == {"TopicA": Permission.SUB}
    assert pulled.groups == {"GID_A": Permission.SUB}
    heartbeat = json.dumps(
        {
            "clientID": "c",
            "consumerDataSet": [
                {
                    "groupName": "GID_A",
                    "subscriptionDataSet": [{"topic": "TopicA"}, {"topic": "%RETRY%GID_A"}],
                }
            ],
            "producerDataSet": [{"groupName": "PG"}],
        }
    ).encode()
    beat = need(RequestCode.HEART_BEAT, {}, heartbeat)
    assert beat.topics == {"TopicA": Permission.SUB}
    assert beat.groups == {"GID_A": Permission.SUB}
    assert need(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "X"}).admin
    assert not need(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "X"}).admin
    with pytest.raises(AclError, match="bad heartbeat"):
        need(RequestCode.HEART_BEAT, {}, b"{not json")
    for code in (
        RequestCode.POP_MESSAGE,
        RequestCode.ACK_MESSAGE,
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
    ):
        popped = need(code, {"topic": "TopicA", "consumerGroup": "GID_A"})
        assert popped.topics == {"TopicA": Permission.SUB}
        assert popped.groups == {"GID_A": Permission.SUB}
    acks = {"acks": [{"c": "GID_A", "t": "TopicA"}, {"consumerGroup": "GID_B", "topic": "T2"}]}
    batch = need(RequestCode.BATCH_ACK_MESSAGE, {}, json.dumps(acks).encode())
    assert batch.topics == {"TopicA": Permission.SUB, "T2": Permission.SUB}
    assert batch.groups == {"GID_A": Permission.SUB, "GID_B": Permission.SUB}
    with pytest.raises(AclError, match="bad batch ack"):
        need(RequestCode.BATCH_ACK_MESSAGE, {}, b"[1]")
    query = {"topic": "TopicA", "consumerGroup": "GID_A", "clientId": "c"}
    assigned = need(RequestCode.QUERY_ASSIGNMENT, {}, json.dumps(query).encode())
    assert assigned.topics == {"TopicA": Permission.SUB}
    assert assigned.groups == {"GID_A": Permission.SUB}
    assert need(RequestCode.SET_MESSAGE_REQUEST_MODE, {}, b"{}").admin


def test_a_grpc_recall_needs_to_publish_to_its_topic() -> None:
    request = pb.RecallMessageRequest(topic=pb.Resource(name="TopicA"), recall_handle="h")
    access = grpc_request(Caller("h", "ak", None, None), request)
    assert access.topics == {"TopicA": Permission.PUB}
    assert access.groups == {}


def test_refusal_reasons_are_cut_short_and_printable_and_their_lines_limited(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert shown("T\nCRITICAL forged") == "T\\nCRITICAL forged"
    assert shown("x" * 1000, 10) == "x" * 10 + "..."
    logger = logging.getLogger("test_refusals")
    refusals = RefusalLog(logger)
    with caplog.at_level(logging.WARNING, logger="test_refusals"):
        for i in range(100):
            refusals.refused("10.0.0.1", "request", f"reason {i} " + "y" * 10_000)
        refusals.refused("10.0.0.2", "request", "another host")
        for _ in range(50):
            refusals.refused("10.0.0.3", "request", "the same reason")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == LINES_PER_WINDOW + 2
    assert all(len(line) < 400 for line in lines)
    assert "another host" in lines[-2]
    assert "the same reason" in lines[-1]
