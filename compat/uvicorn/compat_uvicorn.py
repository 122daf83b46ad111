"""uvicorn injection: every loop uvicorn builds is the loop under test.

Two paths build loops in uvicorn's suite. Async tests run through AnyIO's
pytest plugin with ``anyio_backend = "asyncio"`` and no loop factory, so they
take ``asyncio.new_event_loop()``, which ``zloop.testing`` already swaps.
``Server.run()`` builds its own loop from ``Config(loop=...)``: ``"auto"``
would pick uvloop when installed and ``"asyncio"`` builds a selector loop
directly. Both factories are looked up by ``module:attr`` at call time, so
pointing those two module attributes at the loop under test covers every
server the suite starts, without editing a file of it. ``loop="uvloop"``
(asked for by name) is left alone.
"""

from __future__ import annotations

import sys

import pytest


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    import uvicorn.loops.asyncio
    import uvicorn.loops.auto

    # zloop.testing, or the same file loaded as zloop_testing when zloop is not
    # built (the runner does that for asyncio and uvloop runs).
    testing = sys.modules.get("zloop.testing") or sys.modules["zloop_testing"]
    factory = testing.chosen_factory(config)

    def loop_under_test_factory(use_subprocess: bool = False):
        return factory

    uvicorn.loops.asyncio.asyncio_loop_factory = loop_under_test_factory
    uvicorn.loops.auto.auto_loop_factory = loop_under_test_factory
