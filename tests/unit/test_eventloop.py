"""start_eagerly: a coroutine runs at once, and only one that waits becomes a task, which
then behaves like a task made from the start (results, errors, cancellation)."""

import asyncio

import pytest

from pyrmq.eventloop import start_eagerly


def test_a_coroutine_that_does_not_wait_finishes_inside_the_call() -> None:
    steps: list[str] = []

    async def quick() -> int:
        steps.append("ran")
        return 7

    loop = asyncio.new_event_loop()
    try:
        started = start_eagerly(loop, quick())
        assert steps == ["ran"]
        assert (started.result, started.error, started.task) == (7, None, None)
    finally:
        loop.close()


def test_an_error_before_the_first_wait_is_returned_not_raised() -> None:
    async def broken() -> None:
        raise ValueError("on purpose")

    loop = asyncio.new_event_loop()
    try:
        started = start_eagerly(loop, broken())
        assert isinstance(started.error, ValueError)
        assert started.task is None
    finally:
        loop.close()


def test_a_coroutine_that_waits_goes_on_in_a_task_with_what_it_waited_for() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[str] = loop.create_future()
        steps: list[str] = []

        async def waits() -> str:
            steps.append("before")
            got = await fut
            steps.append(got)
            await asyncio.sleep(0)  # a bare yield, as sleep(0) makes
            await asyncio.sleep(0.01)
            return got + "!"

        started = start_eagerly(loop, waits())
        assert steps == ["before"]
        assert started.task is not None
        loop.call_soon(fut.set_result, "value")
        assert await started.task == "value!"
        assert steps == ["before", "value"]

    asyncio.run(scenario())


def test_an_error_after_a_wait_ends_the_task_with_that_error() -> None:
    async def scenario() -> None:
        async def fails_later() -> None:
            await asyncio.sleep(0.01)
            raise KeyError("later")

        started = start_eagerly(asyncio.get_running_loop(), fails_later())
        assert started.task is not None
        with pytest.raises(KeyError):
            await started.task

    asyncio.run(scenario())


def test_cancelling_the_task_cancels_the_coroutine_where_it_waits() -> None:
    async def scenario() -> None:
        cleaned: list[bool] = []

        async def waits_long() -> None:
            try:
                await asyncio.sleep(30)
            finally:
                cleaned.append(True)

        started = start_eagerly(asyncio.get_running_loop(), waits_long())
        assert started.task is not None
        await asyncio.sleep(0.01)
        started.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await started.task
        assert cleaned == [True]

    asyncio.run(scenario())
