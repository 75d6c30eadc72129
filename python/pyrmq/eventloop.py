"""The event loop pyrmq's servers and its blocking client run on.

uvloop when it is installed (about half the per-request overhead of asyncio's default loop),
unless the environment sets ``PYRMQ_LOOP=asyncio``.
"""

import asyncio
import os
from collections.abc import Callable

__all__ = ["loop_factory", "new_event_loop"]


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
