"""anyio injection: blockbuster grants the loop under test the spawn exemption
it grants asyncio's own loop.

anyio's conftest runs every test under blockbuster, which raises on a blocking
call made while a loop runs, except where it is allowed by file and function.
One such allowance is for ``subprocess_exec``/``subprocess_shell`` of
``asyncio/base_events.py``: there ``subprocess.Popen`` blocks on ``os.read`` of
its exec-error pipe, which no loop that spawns through Popen can avoid. zloop
spawns from ``subprocess_exec``/``subprocess_shell`` of ``zloop/_unix.py`` and
makes the same read; without the same allowance every anyio subprocess test
fails on the tool (and leaves a half-spawned child behind) instead of testing
zloop's subprocess support. This plugin mirrors exactly those allowances onto
zloop's functions of the same names, and only for ``--zloop-loop zloop``; every
other blocking call stays detected.
"""

from __future__ import annotations

import sys

import pytest

_ASYNCIO_FILE = "asyncio/base_events.py"
_ZLOOP_FILE = "zloop/_unix.py"
_SPAWN_FUNCTIONS = frozenset({"subprocess_exec", "subprocess_shell"})


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    # zloop.testing, or the same file loaded as zloop_testing (see compat_uvicorn)
    testing = sys.modules.get("zloop.testing") or sys.modules["zloop_testing"]
    if testing.chosen_loop(config) != "zloop":
        return
    try:
        from blockbuster import blockbuster as bb
    except ImportError:
        return
    original_init = bb.BlockBusterFunction.__init__

    def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        original_init(self, *args, **kwargs)
        mirrored = []
        for filename, functions in self.can_block_functions:
            names = {functions} if isinstance(functions, str) else set(functions)
            if filename == _ASYNCIO_FILE and names & _SPAWN_FUNCTIONS:
                mirrored.append((_ZLOOP_FILE, names & _SPAWN_FUNCTIONS))
        self.can_block_functions.extend(mirrored)

    bb.BlockBusterFunction.__init__ = __init__
