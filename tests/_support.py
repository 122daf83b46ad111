"""Helpers shared by the behaviour tests (imported as ``_support``)."""

import asyncio
import os
import sys

PY = sys.version_info[:2]


def open_fds():
    """The set of this process's open file descriptors."""
    return set(int(name) for name in os.listdir("/proc/self/fd"))


def rss_bytes():
    """Resident set size of this process, from /proc/self/statm."""
    with open("/proc/self/statm") as statm:
        resident_pages = int(statm.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def run_passes(loop, count):
    """Run ``count`` passes of a loop that is not running, then return.

    Each pass is one call_soon hop, so ``count`` hops give the loop at least
    that many iterations (I/O polls included) without any timer.
    """
    assert count >= 1

    def hop(left):
        if left == 0:
            loop.stop()
        else:
            loop.call_soon(hop, left - 1)

    loop.call_soon(hop, count - 1)
    loop.run_forever()


async def yield_passes(count):
    """From inside a coroutine, let the loop run ``count`` more passes."""
    for _ in range(count):
        await asyncio.sleep(0)


def stock_handle_repr(callback, args, *, when=None, cancelled=False):
    """repr() of the Handle/TimerHandle stock asyncio makes for these inputs.

    Built on a throwaway stock loop, so the expected text follows whatever
    this Python's asyncio prints (3.13 hides arguments outside debug mode).
Debug mode is off: in debug mode the repr names where the handle was made.
    """
    ref = asyncio.SelectorEventLoop()
    try:
        if when is None:
            handle = asyncio.Handle(callback, args, ref)
        else:
            handle = asyncio.TimerHandle(when, callback, args, ref)
        if cancelled:
            handle.cancel()
        return repr(handle)
    finally:
        ref.close()
