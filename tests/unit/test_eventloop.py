"""listener_task: a coroutine listener runs in a task of its own, so what it does with its task
(``asyncio.timeout``, ``current_task``) touches no one else's."""

import asyncio

from pyrmq.eventloop import listener_task


def test_a_listener_sees_its_own_task_and_its_timeout_cancels_only_it() -> None:
    async def main() -> None:
        caller = asyncio.current_task()
        seen: list[asyncio.Task[object] | None] = []

        async def listener() -> str:
            seen.append(asyncio.current_task())
            try:
                async with asyncio.timeout(0.05):
                    await asyncio.sleep(5)
            except TimeoutError:
                return "timed out"
            return "slept"

        task = listener_task(asyncio.get_running_loop(), listener())
        assert await task == "timed out"
        assert seen == [task]
        assert seen[0] is not caller
        # The caller was not cancelled: it goes on waiting.
        await asyncio.sleep(0.01)

    asyncio.run(main())


def test_an_error_is_the_tasks() -> None:
    async def main() -> None:
        async def broken() -> None:
            raise ValueError("on purpose")

        task = listener_task(asyncio.get_running_loop(), broken())
        await asyncio.wait([task])
        assert isinstance(task.exception(), ValueError)

    asyncio.run(main())
