"""A running broker's settings, read and changed as ``mqadmin getBrokerConfig`` and
``updateBrokerConfig`` do, against a real ``pyrmq serve`` started from a broker.conf: retention
changes at once and survives a restart; other settings are refused whole."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from tests import helpers
from tests.compat.servers import create_topic, serving
from tests.helpers import fast_config, pull_head, pyrmq_admin, send_raw

from pyrmq.client.admin import Admin
from pyrmq.client.message import Message, SendStatus
from pyrmq.client.producer import Producer
from pyrmq.errors import BrokerError
from pyrmq.remoting.protocol import ResponseCode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

run = helpers.run

DELETE_HOUR = f"{(time.localtime().tm_hour + 12) % 24:02}"  # not now: retention waits for it
CONF = f"""\
# retention, as shipped
fileReservedTime = 72
deleteWhen={DELETE_HOUR}
mappedFileSizeCommitLog=65536
cleanResourceInterval=200
! another comment style
brokerName=broker-conf
"""
EVERY_HOUR = ";".join(f"{h:02}" for h in range(24))


async def send(namesrv: str, topic: str, count: int) -> None:
    async with Producer("PG_RETENTION", client_config=fast_config(namesrv)) as producer:
        for i in range(count):
            sent = await producer.send(Message(topic, b"r" * 300 + str(i).encode()))
            assert sent.status is SendStatus.OK


def test_retention_changes_while_the_broker_runs_and_survives_a_restart(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(CONF)
    topic = "TopicRetentionLive"

    with serving(tmp_path, "-c", str(conf)) as server:
        namesrv, broker = server.addresses()
        create_topic(broker, topic, 1)

        async def scenario() -> None:
            await send(namesrv, topic, 600)  # about 300 KB: five 64 KiB segments
            async with Admin(namesrv) as admin:
                settings = await admin.broker_config(broker)
                assert settings["fileReservedTime"] == "72"
                assert settings["deleteWhen"] == DELETE_HOUR
                assert settings["brokerName"] == "broker-conf"
                assert settings["brokerConfigPath"] == str(conf)
                assert settings["mappedFileSizeCommitLog"] == "65536"

                # Refused whole: a setting that needs a start, one that does not exist, a bad
                # value. Nothing changes, in the broker or in its file.
                refusals = {
                    "take effect only when the broker starts": {
                        "fileReservedTime": 0,
                        "mappedFileSizeCommitLog": 1 << 20,
                    },
                    "no such settings: fileReservedTimes": {"fileReservedTimes": 0},
                    "diskMaxUsedSpaceRatio": {"diskMaxUsedSpaceRatio": 0},
                }
                for reason, change in refusals.items():
                    with pytest.raises(BrokerError, match=reason):
                        await admin.update_broker_config(broker, change)
                assert await admin.broker_config(broker) == settings
                assert conf.read_text() == CONF

                info = await admin.broker_runtime_info(broker)
                assert int(info["commitLogMinOffset"]) == 0
                await admin.update_broker_config(broker, {"fileReservedTime": 0})
                assert (await admin.broker_config(broker))["fileReservedTime"] == "0"
                # Every full segment has expired now, but it is not the delete hour: five
                # retention passes (every 200 ms here) delete nothing...
                await asyncio.sleep(1.0)
                info = await admin.broker_runtime_info(broker)
                assert int(info["commitLogMinOffset"]) == 0
                # ...until an operator asks.
                answer = await admin.delete_expired_commit_log(broker)
                deleted = int(answer.split()[0])
                assert deleted >= 3, answer
                info = await admin.broker_runtime_info(broker)
                first_kept = int(info["commitLogMinOffset"])
                assert first_kept == deleted * 65536
                [status] = (await admin.topic_status(topic)).values()
                assert 0 < status.min_offset < status.max_offset == 600

                # With every hour a delete hour, the passes delete what expires from then on.
                await send(namesrv, topic, 600)
                await admin.update_broker_config(broker, {"deleteWhen": EVERY_HOUR})
                assert (await admin.broker_config(broker))["deleteWhen"] == EVERY_HOUR
                deadline = time.monotonic() + 20
                while int(info["commitLogMinOffset"]) == first_kept:
                    assert time.monotonic() < deadline, "the delete hour deleted nothing"
                    await asyncio.sleep(0.1)
                    info = await admin.broker_runtime_info(broker)
                [status] = (await admin.topic_status(topic)).values()
                assert first_kept < int(info["commitLogMinOffset"])
                assert status.max_offset == 1200

        run(scenario)

    # Written to the broker.conf in place, comments and all.
    assert conf.read_text() == CONF.replace("fileReservedTime = 72", "fileReservedTime=0").replace(
        f"deleteWhen={DELETE_HOUR}", f"deleteWhen={EVERY_HOUR}"
    )
    with serving(tmp_path, "-c", str(conf)) as server:
        namesrv, broker = server.addresses()
        shown = pyrmq_admin("get-broker-config", "-n", namesrv, "-b", broker)
        assert shown.returncode == 0, shown.stderr
        lines = {
            k.strip(): v.strip()
            for k, _, v in (ln.partition("=") for ln in shown.stdout.splitlines())
        }
        assert (lines["fileReservedTime"], lines["deleteWhen"]) == ("0", EVERY_HOUR)

        updated = pyrmq_admin(
            "update-broker-config",
            "-n",
            namesrv,
            "-b",
            broker,
            "-k",
            "fileReservedTime",
            "-v",
            "48",
        )
        assert updated.returncode == 0, updated.stderr
        assert "fileReservedTime=48" in conf.read_text()
        deleted = pyrmq_admin("delete-expired-commit-log", "-n", namesrv, "-b", broker)
        assert deleted.returncode == 0, deleted.stderr
        assert deleted.stdout.strip().endswith("expired CommitLog segments deleted")
        refused = pyrmq_admin(
            "update-broker-config", "-n", namesrv, "-b", broker, "-k", "listenPort", "-v", "1"
        )
        assert refused.returncode == 1
        assert "listenPort take effect only when the broker starts" in refused.stderr
        assert "Traceback" not in refused.stderr


def test_without_a_configuration_file_a_change_lasts_until_the_broker_stops(
    tmp_path: Path,
) -> None:
    with serving(tmp_path) as server:
        namesrv, broker = server.addresses()

        async def scenario() -> None:
            async with Admin(namesrv) as admin:
                assert (await admin.broker_config(broker))["brokerConfigPath"] == ""
                await admin.update_broker_config(broker, {"diskMaxUsedSpaceRatio": 60})
                assert (await admin.broker_config(broker))["diskMaxUsedSpaceRatio"] == "60"

        run(scenario)
    assert not list(tmp_path.glob("*.conf*"))


def test_broker_permission_makes_a_broker_read_only_or_write_only_while_it_runs(
    tmp_path: Path,
) -> None:
    """``updateBrokerConfig -k brokerPermission``, RocketMQ's way to drain a broker: its topics
    are registered again with the permission over theirs, so producers send elsewhere; an
    ordered topic's sends and, on a write-only broker, pulls are refused by the broker."""
    with serving(tmp_path) as server:
        namesrv, broker = server.addresses()
        create_topic(broker, "TopicPerm", 2)
        ordered = pyrmq_admin("update-topic", "-n", namesrv, "-t", "TopicPermOrdered", "-o")
        assert ordered.returncode == 0, ordered.stderr

        async def perms(admin: Admin) -> set[int]:
            route = await admin.route("TopicPerm")
            assert route is not None
            return {q.perm for q in route.queues}

        async def scenario() -> None:
            config = fast_config(namesrv)
            async with Admin(namesrv) as admin, Producer("PG_PERM", client_config=config) as p:
                assert (await p.send(Message("TopicPerm", b"before"))).status is SendStatus.OK
                await admin.update_broker_config(broker, {"brokerPermission": 4})
                # Registered again before the answer.
                assert await perms(admin) == {4}
                assert (await admin.broker_config(broker))["brokerPermission"] == "4"
                refused = await asyncio.to_thread(send_raw, broker, "TopicPermOrdered", b"o")
                assert refused.code == ResponseCode.NO_PERMISSION
                assert "sending message is forbidden" in (refused.remark or "")
                # Other topics' sends are not refused at the broker, as in RocketMQ: the route
                # keeps producers away.
                direct = await asyncio.to_thread(send_raw, broker, "TopicPerm", b"direct")
                assert direct.code == ResponseCode.SUCCESS
                assert len((await pull_head(broker, "broker-a", "TopicPerm", 0)).messages) >= 1

                await admin.update_broker_config(broker, {"brokerPermission": 2})
                assert await perms(admin) == {2}
                with pytest.raises(BrokerError, match="pulling message is forbidden"):
                    await pull_head(broker, "broker-a", "TopicPerm", 0)

                await admin.update_broker_config(broker, {"brokerPermission": 6})
                assert await perms(admin) == {6}
                assert len((await pull_head(broker, "broker-a", "TopicPerm", 0)).messages) >= 1
                with pytest.raises(BrokerError, match="brokerPermission 5"):
                    await admin.update_broker_config(broker, {"brokerPermission": 5})

        run(scenario)
