"""A master that checks ACLs and its slave: the slave copies the master's topics only when it
signs its requests with ``innerClientAuthenticationCredentials``."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.compat.servers import Cluster
from tests.helpers import remoting_call

from pyrmq.acl import Credentials
from pyrmq.client.admin import Admin
from pyrmq.remoting.protocol import RequestCode, ResponseCode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PLAIN = """
accounts:
  - accessKey: adminuser
    secretKey: admin-secret
    admin: true
  - accessKey: brokerinner
    secretKey: inner-secret
"""
INNER = '{"accessKey": "brokerinner", "secretKey": "inner-secret"}'


def _slave_topics(slave: str) -> set[str]:
    answer = remoting_call(slave, RequestCode.GET_ALL_TOPIC_CONFIG, {})
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return set(json.loads(answer.body)["topicConfigTable"])


def _wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_a_slave_copies_an_acl_masters_topics_with_its_inner_credentials(
    tmp_path: Path,
) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(PLAIN)
    with Cluster(tmp_path) as c:
        master = c.start("master", "ASYNC_MASTER", "aclEnable=true", f"plainAclFile={acl}")

        async def create() -> None:
            admin_keys = Credentials("adminuser", "admin-secret")
            async with Admin(c.namesrv, credentials=admin_keys) as admin:
                await admin.create_topic("TopicInner", queue_nums=2, broker_addr=master)

        asyncio.run(create())
        # Unsigned, the slave's copy is refused.
        slave = c.start("slave", "SLAVE")
        _wait_for(
            lambda: f"refused request code={RequestCode.GET_ALL_TOPIC_CONFIG}" in c.log("master"),
            "the master refusing the slave's unsigned copy",
        )
        assert "TopicInner" not in _slave_topics(slave)
        c.procs["slave"].stop()
        # Signed as the broker account, it gets them.
        slave = c.start("slave", "SLAVE", f"innerClientAuthenticationCredentials={INNER}")
        _wait_for(lambda: "TopicInner" in _slave_topics(slave), "the slave copying the topic")
        # Any client may read a broker's settings: its own account's secret is not among them.
        settings = remoting_call(slave, RequestCode.GET_BROKER_CONFIG, {})
        assert settings.code == ResponseCode.SUCCESS
        assert b"brokerRole=SLAVE" in settings.body
        assert b"inner-secret" not in settings.body
        assert b"innerClientAuthenticationCredentials" not in settings.body
