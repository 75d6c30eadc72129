"""The event loop behind the blocking API: one daemon thread per process runs every client
instance that :mod:`pyrmq.client`'s blocking classes create.

>>> import asyncio, threading
>>> async def where() -> str:
...     await asyncio.sleep(0)
...     return threading.current_thread().name
>>> run(where())
'pyrmq-client'
>>> submit(where()).result(timeout=5)
'pyrmq-client'
"""

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from pyrmq.eventloop import new_event_loop

__all__ = ["loop", "run", "submit"]

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None


def loop() -> asyncio.AbstractEventLoop:
    """The runtime's loop, started on first use."""
    global _loop, _thread
    with _lock:
        if _loop is None or _thread is None or not _thread.is_alive():
            new_loop = new_event_loop()
            ready = threading.Event()

            def main() -> None:
                asyncio.set_event_loop(new_loop)
                new_loop.call_soon(ready.set)
                new_loop.run_forever()

            _thread = threading.Thread(target=main, name="pyrmq-client", daemon=True)
            _thread.start()
            ready.wait()
            _loop = new_loop
        return _loop


def submit(coro: Coroutine[Any, Any, T]) -> "concurrent.futures.Future[T]":
    """Schedules ``coro`` on the runtime loop."""
    return asyncio.run_coroutine_threadsafe(coro, loop())


def run(coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
    """Runs ``coro`` on the runtime loop and waits for its result.

    Raises RuntimeError when called from the runtime thread itself (a listener calling a
    blocking method would wait on its own loop).
    """
    if threading.current_thread() is _thread:
        coro.close()
        raise RuntimeError("blocking pyrmq.client call made from the client's own event loop")
    return submit(coro).result(timeout_s)
