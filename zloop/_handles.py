"""Cold-path formatting for zloop's native handles.

The text comes from asyncio's own ``format_helpers`` so that ``repr()`` of a
zloop handle and the messages built from it match stock asyncio's exactly.
"""

import inspect
from asyncio import format_helpers

_format_source = format_helpers._format_callback_source
_takes_debug = "debug" in inspect.signature(_format_source).parameters


def format_callback(callback, args, debug):
    """``asyncio.format_helpers._format_callback_source`` on every Python."""
    if _takes_debug:
        return _format_source(callback, args, debug=debug)
    return _format_source(callback, args)


def _repr_info(handle):
    info = [type(handle).__name__]
    cancelled = handle._cancelled
    if cancelled:
        info.append("cancelled")
    callback = handle._callback
    if callback is not None:
        loop = handle._loop
        debug = loop.get_debug() if loop is not None else False
        info.append(format_callback(callback, handle._args, debug))
    tb = handle._source_traceback
    if tb:
        frame = tb[-1]
        info.append(f"created at {frame[0]}:{frame[1]}")
    if hasattr(handle, "_when"):
        info.insert(2 if cancelled else 1, f"when={handle._when}")
    return info


def handle_repr(handle):
    return "<{}>".format(" ".join(_repr_info(handle)))
