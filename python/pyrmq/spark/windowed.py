"""Running many sends or ends with a bounded number in flight."""

import asyncio
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

__all__ = ["windowed"]

T = TypeVar("T")


async def windowed(coros: Iterator[Coroutine[Any, Any, T]], window: int = 64) -> list[T]:
    """Runs the coroutines (made as they are needed) ``window`` at a time; their results in
    order. The first failure cancels the rest, waits for them, and raises."""
    results: dict[int, T] = {}
    pending: dict[asyncio.Task[T], int] = {}
    try:
        for index, coro in enumerate(coros):
            pending[asyncio.ensure_future(coro)] = index
            if len(pending) >= window:
                await _collect(pending, results)
        while pending:
            await _collect(pending, results)
    finally:
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
            for task in pending:
                if not task.cancelled():
                    task.exception()  # retrieved: the first failure is what is raised
    return [results[i] for i in range(len(results))]


async def _collect(pending: dict["asyncio.Task[T]", int], results: dict[int, T]) -> None:
    done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
    failure: BaseException | None = None
    for task in done:
        index = pending.pop(task)
        if task.cancelled() or task.exception() is not None:
            if failure is None:
                failure = task.exception() if not task.cancelled() else asyncio.CancelledError()
            continue
        results[index] = task.result()
    if failure is not None:
        raise failure
