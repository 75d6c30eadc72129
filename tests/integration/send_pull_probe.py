"""Times a broker's answers from a process of its own, whose event loop nothing else keeps
busy.

``python send_pull_probe.py BROKER TOPIC``: prints ``ready``, then until its stdin closes sends
a message to queue 0 of TOPIC and pulls it back, over one connection, every 20 ms. Prints one
JSON list at the end: ``[began, seconds]`` for each round trip, ``began`` in epoch seconds.
"""

import asyncio
import json
import sys
import time

from pyrmq.client.api import ClientAPI
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import PullMessageRequestHeader
from pyrmq.remoting.protocol import RequestCode, ResponseCode


async def probe(broker: str, topic: str) -> list[list[float]]:
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    loop.add_reader(sys.stdin.fileno(), lambda: stop.done() or stop.set_result(None))
    remoting = RemotingClient()
    api = ClientAPI(remoting)
    timings: list[list[float]] = []
    print("ready", flush=True)
    try:
        while not stop.done():
            began = time.time()
            body = f"probe-{len(timings)}".encode()
            ext = {
                "producerGroup": "PG_PROBE",
                "topic": topic,
                "defaultTopic": "TBW102",
                "defaultTopicQueueNums": "1",
                "queueId": "0",
                "sysFlag": "0",
                "bornTimestamp": str(int(began * 1000)),
                "flag": "0",
                "properties": "",
                "reconsumeTimes": "0",
                "unitMode": "false",
            }
            request = RemotingCommand.request(RequestCode.SEND_MESSAGE, ext, body)
            sent = await remoting.invoke(broker, request, 10.0)
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            offset = int(sent.ext_fields["queueOffset"])
            header = PullMessageRequestHeader.immediate("CG_PROBE", topic, 0, offset, 1)
            pulled = await api.pull(broker, "broker-a", header, 10.0)
            assert [m.body for m in pulled.messages] == [body], pulled
            timings.append([began, time.time() - began])
            await asyncio.sleep(0.02)
    finally:
        await remoting.close()
    return timings


if __name__ == "__main__":
    print(json.dumps(asyncio.run(probe(sys.argv[1], sys.argv[2]))))
