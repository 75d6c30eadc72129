"""The event loop pyrmq's servers and its blocking client run on, and the tasks of coroutine
listeners.

uvloop when it is installed (about half the per-request overhead of asyncio's default loop),
unless the environment sets ``PYRMQ_LOOP=asyncio``.
"""

import asyncio
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["EAGER_TASKS", "listener_task", "loop_factory", "new_event_loop"]

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """The constructor of the loop to use (for :class:`asyncio.Runner`)."""
    if os.environ.get("PYRMQ_LOOP", "").lower() != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop
    return asyncio.new_event_loop


def new_event_loop() -> asyncio.AbstractEventLoop:
    return loop_factory()()


EAGER_TASKS = sys.version_info >= (3, 12)
"""Tasks can start at once, in their creator's call (Python 3.12's eager tasks)."""


def listener_task(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]
) -> "asyncio.Task[T]":
    """A task of its own for ``coro`` (a listener call), started at once on Python 3.12+ (an
    eager task: one that finishes without waiting costs no trip through the loop). Run in
    its caller's task instead, it would see that task as its own: an ``asyncio.timeout`` in
    it would cancel the caller.

    >>> async def main():
    ...     async def quick(): return 42
    ...     return await listener_task(asyncio.get_running_loop(), quick())
    >>> asyncio.run(main())
    42
    """
    if sys.version_info >= (3, 12):
        return asyncio.Task(coro, loop=loop, eager_start=True)
    return loop.create_task(coro)
