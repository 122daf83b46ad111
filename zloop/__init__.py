"""zloop: a drop-in asyncio event loop whose engine is written in Zig.

    import asyncio, zloop
    asyncio.run(main(), loop_factory=zloop.new_event_loop)   # 3.12+
    zloop.run(main())                                          # any version
"""

import asyncio as _asyncio
import sys as _sys

from . import _policy

try:
    from ._loop import Loop
    from ._zloop import BACKENDS, Handle, TimerHandle
    from ._zloop import _selected_backend
except ModuleNotFoundError as _exc:
    if _exc.name != "zloop._zloop":
        raise
    from ._unbuilt import message as _message

    raise ModuleNotFoundError(_message(), name=_exc.name) from None

__all__ = ("Loop", "new_event_loop", "run", "Handle", "TimerHandle", "BACKEND", "BACKENDS")
__version__ = "0.1.0"


def __getattr__(name):
    # BACKEND: the backend a loop created now asks for. Each loop reads
    # ZLOOP_BACKEND when it is created, so this does too, through the same
    # check: a name not in BACKENDS raises the ValueError that creating a
    # loop would (a kernel that refuses io_uring gives such a loop epoll:
    # its `backend` says which).
    if name == "BACKEND":
        return _selected_backend()
    raise AttributeError(f"module 'zloop' has no attribute {name!r}")


def new_event_loop():
    """Return a new zloop event loop."""
    return Loop()


def run(main, *, debug=None, **run_kwargs):
    """Run a coroutine on a fresh zloop loop, like ``asyncio.run``."""
    if _sys.version_info >= (3, 12):
        return _asyncio.run(main, debug=debug, loop_factory=new_event_loop, **run_kwargs)
    # As asyncio.run: refuse before a Runner makes a loop (its close() would
    # then fail inside the running loop, leaving shutdown_asyncgens() never
    # awaited).
    if _asyncio._get_running_loop() is not None:
        raise RuntimeError("asyncio.run() cannot be called from a running event loop")
    with _asyncio.Runner(debug=debug, loop_factory=new_event_loop) as runner:
        return runner.run(main)


_DefaultPolicy = _policy.default_policy_class()

if _DefaultPolicy is not None:
    # Policies exist up to 3.15 (deprecated from 3.14, removed in 3.16): so
    # do EventLoopPolicy and install(), reached without asyncio's warning.

    class EventLoopPolicy(_DefaultPolicy):
        """An event loop policy whose loops are zloop loops."""

        def _loop_factory(self):
            return new_event_loop()

        def __repr__(self):
            return f"<{type(self).__name__}>"

    def install():
        """Make zloop the default loop through asyncio's policy.

        asyncio deprecates policies from 3.14 and removes them in 3.16, and
        install() with them: prefer ``zloop.run(main())`` or
        ``asyncio.run(main(), loop_factory=zloop.new_event_loop)``.
        """
        _policy.set_policy(EventLoopPolicy())

    __all__ += ("EventLoopPolicy", "install")
