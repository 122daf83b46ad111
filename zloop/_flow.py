"""Flow control shared by the socket transports (``_net``, ``_udp``) and
the TLS layer (``_tls``), which cannot import each other both ways: calls
from a transport into its protocol, and the write-buffer limits."""

import math
import sys

_SIZE_MAX = sys.maxsize * 2 + 1


def write_limits(high, low):
    """``set_write_buffer_limits(high, low)``'s defaults and checks, as
    asyncio's; returns ``(high, low, (low, high))``: the marks as the
    native side's sizes, then the pair ``get_write_buffer_limits()``
    returns. asyncio keeps whatever numbers it was given (a bool, a float,
    an int beyond any size) and returns them; it compares the buffer's
    size (an int) with them, pausing above ``high`` and resuming at ``low``
    or below, which is the same for their floors clamped to SIZE_MAX (no
    buffer comes near it), and never for an infinite ``high``."""
    if high is None:
        high = 64 * 1024 if low is None else 4 * low
    if low is None:
        low = high // 4
    if not high >= low >= 0:
        raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
    return _size(high), _size(low), (low, high)


def _size(limit):
    if isinstance(limit, int):
        return min(limit, _SIZE_MAX)
    if limit == math.inf:
        return _SIZE_MAX
    return min(math.floor(limit), _SIZE_MAX)


def tell_protocol(loop, target, name, transport, protocol):
    """``target.<name>()`` (``pause_writing``, ``resume_writing``): a failure
    goes to the loop's exception handler with ``transport`` and ``protocol``
    as its context, as asyncio's transports report it; it never reaches the
    transport's caller."""
    try:
        getattr(target, name)()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        loop.call_exception_handler({
            "message": f"protocol.{name}() failed",
            "exception": exc,
            "transport": transport,
            "protocol": protocol,
        })
