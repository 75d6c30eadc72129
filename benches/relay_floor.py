"""The floor under the end-to-end rows: their three-process shape, without pyrmq.

A producer process writes frames (a send stamp, a warm-up flag, padding to 128 B) at a fixed
rate to a relay process, which writes each read on to a consumer process and answers the
producer with one byte per frame, as a broker answers a send; the consumer takes now minus the
stamp. Pacing is ``pyrmq bench latency``'s own (:func:`pace`: a clock thread, each frame
stamped and written from the event loop), on the bench workers' event loop, over loopback
TCP. What it measures is what the machine charges for three processes waking one another at
that rate, before any broker or client work.

    python benches/relay_floor.py [--rate 2000] [-d 10] [--warmup 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benches import broker as broker_bench
from pyrmq.cli.commands.bench import pace
from pyrmq.eventloop import loop_factory

FRAME = struct.Struct("<qB")
"""Send stamp (``time.time_ns()``, -1 ends the run) and warm-up flag, then padding."""
FRAME_BYTES = 128
END_STAMP = -1
CONNECT_TIMEOUT_S = 15.0


def _run(coro: Any) -> Any:
    """On the loop the bench workers run on (uvloop unless ``PYRMQ_LOOP=asyncio``)."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(coro)


def _relay(ports: Any) -> None:
    async def main() -> None:
        consumer: asyncio.Future[asyncio.StreamWriter] = asyncio.get_running_loop().create_future()
        done = asyncio.Event()

        async def on_consumer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            consumer.set_result(writer)
            await done.wait()
            writer.close()

        async def on_producer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            out = await consumer
            pending = 0
            try:
                while data := await reader.read(65536):
                    out.write(data)
                    pending += len(data)
                    writer.write(b"k" * (pending // FRAME_BYTES))
                    pending %= FRAME_BYTES
            except ConnectionResetError:  # the producer hung up with answers left unread
                pass
            finally:
                done.set()

        servers = [
            await asyncio.start_server(on_producer, "127.0.0.1", 0),
            await asyncio.start_server(on_consumer, "127.0.0.1", 0),
        ]
        ports.put(tuple(s.sockets[0].getsockname()[1] for s in servers))
        await done.wait()
        for s in servers:
            s.close()

    _run(main())


def _consumer(port: int, results: Any) -> None:
    async def main() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        results.put("ready")
        latencies_ns: list[int] = []
        buf = b""
        while data := await reader.read(65536):
            now = time.time_ns()
            buf += data
            whole = len(buf) - len(buf) % FRAME_BYTES
            for off in range(0, whole, FRAME_BYTES):
                stamp, warm = FRAME.unpack_from(buf, off)
                if stamp == END_STAMP:
                    results.put(latencies_ns)
                    writer.close()
                    return
                if not warm:
                    latencies_ns.append(now - stamp)
            buf = buf[whole:]
        results.put(latencies_ns)

    _run(main())


def _producer(port: int, rate: float, run_s: float, warmup_s: float) -> None:
    async def main() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        loop = asyncio.get_running_loop()
        padding = b"\0" * (FRAME_BYTES - FRAME.size)
        started = time.monotonic()

        def send() -> None:
            warm = time.monotonic() - started < warmup_s
            writer.write(FRAME.pack(time.time_ns(), warm) + padding)

        async def drain_answers() -> None:
            while await reader.read(65536):
                pass

        answers = loop.create_task(drain_answers())
        await asyncio.to_thread(
            pace, loop, send, int(1e9 / rate), threading.Event(), int(rate * run_s)
        )
        await asyncio.sleep(0.2)  # the last answers
        writer.write(FRAME.pack(END_STAMP, 0) + padding)
        await writer.drain()
        writer.close()
        answers.cancel()

    _run(main())


def _cpu_s(procs: list[Any]) -> float | None:
    """User+system seconds of ``procs`` together; None where /proc cannot tell."""
    total = 0.0
    for p in procs:
        cpu = broker_bench.process_cpu_s(p.pid)
        if cpu is None:
            return None
        total += cpu
    return total


def measure(rate: float, duration_s: float, warmup_s: float) -> dict[str, Any]:
    """Runs the three processes once; latency percentiles in ms, and their CPU per frame."""
    ctx = multiprocessing.get_context("spawn")
    ports: Any = ctx.Queue()
    results: Any = ctx.Queue()
    relay = ctx.Process(target=_relay, args=(ports,), daemon=True)
    relay.start()
    procs = [relay]
    try:
        producer_port, consumer_port = ports.get(timeout=CONNECT_TIMEOUT_S)
        consumer = ctx.Process(target=_consumer, args=(consumer_port, results), daemon=True)
        consumer.start()
        procs.append(consumer)
        if results.get(timeout=CONNECT_TIMEOUT_S) != "ready":
            raise RuntimeError("the floor's consumer did not connect")
        run_s = warmup_s + duration_s
        producer = ctx.Process(
            target=_producer, args=(producer_port, rate, run_s, warmup_s), daemon=True
        )
        producer.start()
        procs.append(producer)
        time.sleep(warmup_s)
        cpu0 = _cpu_s(procs)
        time.sleep(duration_s)
        cpu1 = _cpu_s(procs)
        latencies_ns: list[int] = results.get(timeout=run_s + CONNECT_TIMEOUT_S)
        for p in procs:
            p.join(CONNECT_TIMEOUT_S)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
    if not latencies_ns:
        raise RuntimeError("the floor's consumer measured nothing")
    ms = sorted(n / 1e6 for n in latencies_ns)
    cpu_s = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
    return {
        "samples": len(ms),
        "msgs_per_s": len(ms) / duration_s,
        "p50": broker_bench.percentile(ms, 50),
        "p99": broker_bench.percentile(ms, 99),
        "p999": broker_bench.percentile(ms, 99.9),
        "max": ms[-1],
        "avg": sum(ms) / len(ms),
        "cpu_us_per_msg": None if cpu_s is None else cpu_s / (rate * duration_s) * 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=2000.0)
    parser.add_argument("-d", "--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.rate, args.duration, args.warmup)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
