"""A starting broker serves nothing until everything a request needs runs: a send that arrives
while its store opens and its transactions load waits, and under SYNC_FLUSH is answered only
once durable; none is refused with an error meanwhile."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
import time
from pathlib import Path

import pytest
from tests.helpers import send_raw

from pyrmq.broker.config import BrokerConfig
from pyrmq.broker.controller import BrokerController
from pyrmq.broker.services.transactions import TransactionService
from pyrmq.config import StoreConfig
from pyrmq.remoting.protocol import ResponseCode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def test_requests_wait_until_the_broker_has_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loading = threading.Event()
    release = threading.Event()
    load = TransactionService.load

    def slow_load(self: TransactionService) -> None:
        loading.set()
        release.wait(10)  # a long backlog of half messages
        load(self)

    monkeypatch.setattr(TransactionService, "load", slow_load)

    async def scenario() -> None:
        config = BrokerConfig(
            listen_port=0,
            store=StoreConfig(store_path_root_dir=str(tmp_path), flush_disk_type="SYNC_FLUSH"),
        )
        broker = BrokerController(config)
        starting = asyncio.ensure_future(broker.start())
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, loading.wait, 10)
        assert not starting.done()
        # Sent while the broker loads: the answer waits for the start.
        answer = loop.run_in_executor(None, send_raw, broker.address, "TopicStart", b"early")
        await asyncio.sleep(0.5)
        assert not answer.done()
        done_at: dict[str, float] = {}
        starting.add_done_callback(lambda _: done_at.setdefault("start", time.monotonic()))
        answer.add_done_callback(lambda _: done_at.setdefault("answer", time.monotonic()))
        release.set()
        await starting
        try:
            response = await answer
            assert response.code == ResponseCode.SUCCESS, response.remark
            assert done_at["answer"] >= done_at["start"]
            assert int(response.ext_fields["queueOffset"]) == 0
            # Answered under SYNC_FLUSH: on disk.
            assert broker.store.flushed_phy_offset > 0
        finally:
            await broker.stop()

    asyncio.run(asyncio.wait_for(scenario(), 40))


def test_a_start_that_fails_lets_go_of_its_port_and_store(tmp_path: Path) -> None:
    """The HA port (the listen port + 1) is taken: the start fails, and the listen port and
    the store are free at once for a broker that tries again."""
    store = StoreConfig(store_path_root_dir=str(tmp_path))
    with socket.socket() as ha_taken:
        for _ in range(50):
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            try:
                ha_taken.bind(("127.0.0.1", port + 1))
                break
            except OSError:
                continue
        ha_taken.listen()

        async def scenario() -> None:
            config = BrokerConfig(listen_port=port, broker_ip1="127.0.0.1", store=store)
            with pytest.raises(OSError, match="address already in use"):
                await BrokerController(config).start()
            again = BrokerController(dataclasses.replace(config, ha_listen_port=0))
            await again.start()
            try:
                assert again.server.port == port
                sent = await asyncio.to_thread(send_raw, again.address, "TopicRetried", b"x")
                assert sent.code == ResponseCode.SUCCESS, sent.remark
            finally:
                await again.stop()

        asyncio.run(asyncio.wait_for(scenario(), 40))
