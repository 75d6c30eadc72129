"""The event loop pyrmq's servers and its blocking client run on, and eager coroutine starts.

uvloop when it is installed (about half the per-request overhead of asyncio's default loop),
unless the environment sets ``PYRMQ_LOOP=asyncio``.

:func:`start_eagerly` runs a coroutine at once, up to its first real wait, and makes a task only
if it has to wait: Python 3.12's eager tasks, for 3.11. A coroutine listener that finishes
without waiting then costs no task and no trip through the loop.
"""

import asyncio
import os
import types
from collections.abc import Callable, Coroutine, Generator
from typing import Any, TypeVar

__all__ = ["Started", "loop_factory", "new_event_loop", "start_eagerly"]

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


class Started:
    """How :func:`start_eagerly` left a coroutine: finished (``result`` or ``error``) or
    running on as ``task``."""

    __slots__ = ("error", "result", "task")

    def __init__(self) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.task: asyncio.Task[Any] | None = None


def start_eagerly(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> Started:
    """Runs ``coro`` in the caller's context until it finishes or first waits; in the second
    case the rest runs in a task on ``loop``.

    >>> async def quick(): return 42
    >>> loop = asyncio.new_event_loop()
    >>> start_eagerly(loop, quick()).result
    42
    >>> loop.close()
    """
    started = Started()
    try:
        yielded = coro.send(None)
    except StopIteration as stop:
        started.result = stop.value
    except Exception as e:
        started.error = e
    else:
        started.task = loop.create_task(_finish(coro, yielded))
    return started


async def _finish(coro: Coroutine[Any, Any, T], yielded: Any) -> T:
    return await _resume(coro, yielded)


@types.coroutine
def _resume(coro: Coroutine[Any, Any, T], yielded: Any) -> Generator[Any, Any, T]:
    """Drives a coroutine that has already yielded ``yielded`` (the future it waits on, or
    None) from inside the task that awaits this: the task waits on that future, then
    resumes the coroutine, exactly as if it had run the coroutine from the start."""
    while True:
        try:
            sent = yield yielded
        except BaseException as e:  # thrown in by the task: cancellation, mostly
            try:
                yielded = coro.throw(e)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
        else:
            try:
                yielded = coro.send(sent)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
