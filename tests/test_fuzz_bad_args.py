"""Generated bad arguments, compared with stock asyncio (issue 22).

Each case calls one public loop method with its good arguments except one,
replaced by a bad value (a wrong type, an out-of-range number, a closed or
huge fd, a closed socket, a buffer gone away), on a stock asyncio loop and
on a zloop loop, and compares the outcomes: the exception type raised at
the call or by awaiting its result (each await bounded to a short
timeout), and the exception types the handler saw in the passes after.
Also: each method on a closed loop, and thread-checked methods called from
another thread in debug mode. The whole run must stay in bounded memory.

CI runs a fixed sample (`_SAMPLE` cases, a few seconds); set
ZLOOP_FUZZ_BAD_ARGS=all to compare the whole space, or an integer for a
sample of that size. Needs both loops (it compares them itself).
"""

import asyncio
import gc
import os
import random
import socket
import threading
import warnings

import pytest

from _support import PY, no_leaks, rss_bytes  # noqa: F401
from conftest import LOOP_NAMES

pytestmark = pytest.mark.skipif(
    set(LOOP_NAMES) != {"asyncio", "zloop"}, reason="compares both loops"
)

_SAMPLE = 300
_AWAIT_S = 0.2


def _noop(*args):
    pass


async def _coro():
    pass


class _ExportsOnce:
    """A writable buffer whose second export fails."""

    def __init__(self):
        self.n = 0
        self.data = bytearray(8)

    def __buffer__(self, flags):
        self.n += 1
        if self.n > 1:
            raise BufferError("gone")
        return memoryview(self.data)


class _IndexFails:
    def __index__(self):
        raise ZeroDivisionError("index")

    __int__ = __float__ = __index__


class _Resources:
    """The live objects good arguments refer to, fresh for each call."""

    def __init__(self):
        self.a, self.b = socket.socketpair()
        self.a.setblocking(False)
        self.b.setblocking(False)
        self.b.send(b"data")  # so a read of `a` finishes at once
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen()
        self.lsock.setblocking(False)
        self.port = self.lsock.getsockname()[1]
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.udp.setblocking(False)
        self.closed_sock = socket.socket()
        self.closed_sock.close()
        r, w = os.pipe()
        os.close(r)
        os.close(w)
        self.closed_fd = r

    def fds(self):
        return [s.fileno() for s in (self.a, self.b, self.lsock, self.udp) if s.fileno() >= 0]

    def close(self):
        for s in (self.a, self.b, self.lsock, self.udp):
            s.close()


def _released_view():
    m = memoryview(bytearray(8))
    m.release()
    return m


# Bad values: (name, factory(res)). Factories, so each loop gets its own.
_BAD = [
    ("None", lambda r: None),
    ("str", lambda r: "x"),
    ("bytes", lambda r: b"x"),
    ("float", lambda r: 1.5),
    ("nan", lambda r: float("nan")),
    ("inf", lambda r: float("inf")),
    ("-1", lambda r: -1),
    ("2**31", lambda r: 2**31),
    ("2**64", lambda r: 2**64),
    ("10**9", lambda r: 10**9),
    ("True", lambda r: True),
    ("object", lambda r: object()),
    ("list", lambda r: []),
    ("tuple", lambda r: ()),
    ("index-fails", lambda r: _IndexFails()),
    ("closed fd", lambda r: r.closed_fd),
    ("closed socket", lambda r: r.closed_sock),
    ("released view", lambda r: _released_view()),
    ("bytes buffer", lambda r: bytes(8)),
]
if PY >= (3, 12):
    _BAD.append(("export once", lambda r: _ExportsOnce()))


# method -> factory(res) of its good positional arguments.
_METHODS = {
    "call_soon": lambda r: [_noop],
    "call_later": lambda r: [0, _noop],
    "call_at": lambda r: [0, _noop],
    "call_soon_threadsafe": lambda r: [_noop],
    "add_reader": lambda r: [r.a.fileno(), _noop],
    "add_writer": lambda r: [r.a.fileno(), _noop],
    "remove_reader": lambda r: [r.a.fileno()],
    "remove_writer": lambda r: [r.a.fileno()],
    "create_task": lambda r: [_coro()],
    "set_debug": lambda r: [True],
    "set_exception_handler": lambda r: [None],
    "set_task_factory": lambda r: [None],
    "run_until_complete": lambda r: [_coro()],
    "sock_recv": lambda r: [r.a, 4],
    "sock_recv_into": lambda r: [r.a, bytearray(4)],
    "sock_sendall": lambda r: [r.a, b"x"],
    "sock_connect": lambda r: [socket.socket(), ("127.0.0.1", r.port)],
    "sock_accept": lambda r: [r.lsock],
    "sock_sendto": lambda r: [r.udp, b"x", r.udp.getsockname()],
    "sock_recvfrom": lambda r: [r.udp, 4],
    "sock_recvfrom_into": lambda r: [r.udp, bytearray(4)],
    "getaddrinfo": lambda r: ["127.0.0.1", r.port],
    "getnameinfo": lambda r: [("127.0.0.1", r.port)],
    "create_connection": lambda r: [asyncio.Protocol, "127.0.0.1", r.port],
    "create_server": lambda r: [asyncio.Protocol, "127.0.0.1", 0],
    "create_datagram_endpoint": lambda r: [asyncio.DatagramProtocol, ("127.0.0.1", 0)],
    "run_in_executor": lambda r: [None, _noop],
}
_ASYNC_WAITS = {"sock_connect"}  # good args whose socket needs closing


def _cases():
    cases = []
    res = _Resources()
    try:
        arity = {}
        for name, good in _METHODS.items():
            args = good(res)
            arity[name] = len(args)
            for a in args:
                if asyncio.iscoroutine(a):
                    a.close()
                elif isinstance(a, socket.socket):
                    a.close()
    finally:
        res.close()
    for name in sorted(_METHODS):
        slots = arity[name]
        for slot in range(slots):
            for bad_name, _ in _BAD:
                cases.append((name, slot, bad_name))
        cases.append((name, None, "closed loop"))
    for name in ("call_soon", "call_later", "call_at", "create_task", "add_reader"):
        cases.append((name, None, "other thread"))
    return cases


def _settle(loop, value):
    """The outcome of awaiting `value` (bounded), or of `value` itself."""
    if asyncio.isfuture(value) or asyncio.iscoroutine(value):
        try:
            fut = asyncio.ensure_future(value, loop=loop)
            got = loop.run_until_complete(asyncio.wait_for(fut, _AWAIT_S))
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            if asyncio.iscoroutine(value):
                value.close()
            return type(exc).__name__
        if isinstance(got, tuple) and got and isinstance(got[0], asyncio.BaseTransport):
            got[0].close()
        elif isinstance(got, asyncio.AbstractServer):
            got.close()
        elif isinstance(got, tuple) and got and isinstance(got[0], socket.socket):
            got[0].close()
        return "ok"
    if isinstance(value, (asyncio.Handle,)) or type(value).__name__.endswith("Handle"):
        value.cancel()
    return "ok"


def _call(loop, name, args):
    try:
        result = getattr(loop, name)(*args)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        return type(exc).__name__
    return _settle(loop, result)


def _run_case(make_loop, case):
    name, slot, bad_name = case
    loop = make_loop()
    seen = []
    loop.set_exception_handler(lambda _l, ctx: seen.append(type(ctx.get("exception")).__name__))
    res = _Resources()
    args = _METHODS[name](res)
    try:
        if bad_name == "closed loop":
            loop.close()
            outcome = _call(loop, name, args)
        elif bad_name == "other thread":
            loop.set_debug(True)
            out = []

            def elsewhere():
                out.append(_call_in_thread(loop, name, args))

            # The loop must be running for asyncio's thread check.
            loop.call_soon(lambda: _join(threading.Thread(target=elsewhere)))
            loop.call_soon(loop.stop)
            loop.run_forever()
            outcome = out[0]
        else:
            if asyncio.iscoroutine(args[slot]):
                args[slot].close()  # replaced, never awaited
            args[slot] = dict(_BAD)[bad_name](res)
            outcome = _call(loop, name, args)
        escaped = None
        if not loop.is_closed():
            try:
                for _ in range(3):
                    loop.call_soon(loop.stop)
                    loop.run_forever()
            except Exception as exc:  # what a later pass let escape
                escaped = type(exc).__name__
        return outcome, sorted(set(seen)), escaped
    finally:
        for a in args:
            if isinstance(a, asyncio.Future) or asyncio.iscoroutine(a):
                if asyncio.iscoroutine(a):
                    a.close()
            if name in _ASYNC_WAITS and isinstance(a, socket.socket):
                a.close()
        if not loop.is_closed():
            for fd in res.fds():
                loop.remove_reader(fd)
                loop.remove_writer(fd)
            loop.set_debug(False)
            loop.set_exception_handler(None)
            loop.set_task_factory(None)
        res.close()
        _close(loop)


def _call_in_thread(loop, name, args):
    if name == "add_reader":
        # Not thread-checked by asyncio's selector loop either.
        pass
    try:
        result = getattr(loop, name)(*args)
    except BaseException as exc:
        return type(exc).__name__
    if hasattr(result, "cancel") and not asyncio.iscoroutine(result):
        loop.call_soon_threadsafe(result.cancel)
    return "ok"


def _join(t):
    t.start()
    t.join(5)


def _close(loop):
    if loop.is_closed():
        return
    try:
        loop.run_until_complete(loop.shutdown_default_executor())
    except Exception:
        pass
    loop.close()


# Differences docs/differences.md lists: zloop converts the
# argument when the call is made (asyncio fails later, or never notices).
_KNOWN = {
    ("call_at", 0, bad)
    for bad in ("str", "bytes", "object", "list", "tuple", "index-fails",
                "closed socket", "released view", "bytes buffer", "export once")
} | {("set_debug", 0, "released view"), ("sock_sendall", 1, "export once")}


def _selected():
    cases = _cases()
    want = os.environ.get("ZLOOP_FUZZ_BAD_ARGS", "")
    if want == "all":
        return cases
    n = int(want) if want.isdigit() else _SAMPLE
    return random.Random(22).sample(cases, min(n, len(cases)))


def test_bad_arguments_fail_as_in_asyncio(loop_factory, request):
    if "zloop" not in request.node.name:
        pytest.skip("compares both loops in the zloop run")
    import zloop

    cases = _selected()
    before = rss_bytes()
    diffs = []
    for case in cases:
        want = _run_case(asyncio.SelectorEventLoop, case)
        got = _run_case(zloop.new_event_loop, case)
        if got != want and case not in _KNOWN:
            diffs.append(f"{case}: asyncio {want}, zloop {got}")
    # A datagram factory that returns no protocol leaves its socket to the
    # collector, on both loops (asyncio's create_datagram_endpoint does not
    # close it): collected here, quietly.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    grown = rss_bytes() - before
    print(f"bad-argument cases compared: {len(cases)} (of {len(_cases())})")
    assert diffs == [], "\n".join(diffs)
    assert grown < 256 << 20
