"""Misuse that costs the user an exception, never another connection's
bytes, a hang, a spin or unbounded memory (issues 22 and 27).

Each test runs on both loops; the fd-closing ones matter most under
ZLOOP_BACKEND=io_uring, whose polls hold their file, and are meaningful on
either backend: they assert what asyncio's selector loop does.
"""

import asyncio
import contextlib
import errno
import os
import socket

import pytest

from _platform import full_unix_receiver_errno, watch_refusal
from _support import PY, ExportsOnce, no_leaks, rss_bytes, rss_growth, run_passes, yield_passes  # noqa: F401


def _pair(kind=socket.SOCK_STREAM):
    a, b = socket.socketpair(socket.AF_UNIX, kind)
    a.setblocking(False)
    b.setblocking(False)
    return a, b


def _pair_at(fd, kind=socket.SOCK_STREAM):
    """A new socket pair whose first socket has descriptor number `fd`."""
    c0, d = _pair(kind)
    if c0.fileno() == fd:
        return c0, d
    os.dup2(c0.fileno(), fd)
    c0.close()
    return socket.socket(fileno=fd), d


def test_sock_recv_on_a_socket_closed_while_waiting(loop):
    # The close is the peer's to see at once, and the old wait must never
    # receive the data of a socket that reuses the number.
    a, b = _pair()
    fd = a.fileno()
    outcome = {}

    async def main():
        t = asyncio.ensure_future(loop.sock_recv(a, 100))
        await yield_passes(2)
        a.close()
        try:
            b.send(b"for-a")
            outcome["peer"] = "sent"
        except BrokenPipeError:
            outcome["peer"] = "BrokenPipeError"
        c, d = _pair_at(fd)
        try:
            d.send(b"for-c")
            await yield_passes(3)
            outcome["old wait"] = t.result() if t.done() else "pending"
            outcome["new socket"] = c.recv(100)
        finally:
            t.cancel()
            await yield_passes(1)
            c.close()
            d.close()

    try:
        loop.run_until_complete(main())
    finally:
        b.close()
    assert outcome == {"peer": "BrokenPipeError", "old wait": "pending", "new socket": b"for-c"}


def test_add_reader_on_a_socket_closed_without_remove_reader(loop):
    a, b = _pair()
    fd = a.fileno()
    calls = []
    loop.add_reader(fd, calls.append, "old")
    try:
        run_passes(loop, 2)
        a.close()
        assert b.recv(10) == b""  # the peer sees end of file at once
        c, d = _pair_at(fd)
        try:
            d.send(b"for-c")
            run_passes(loop, 3)
            # epoll forgot the closed file's registration: nothing reported.
            assert calls == []
            assert c.recv(10) == b"for-c"
        finally:
            loop.remove_reader(fd)
            c.close()
            d.close()
    finally:
        b.close()


@pytest.mark.parametrize("fd", [200_000_000, 10**9, 2**31 - 1])
def test_add_reader_on_a_huge_closed_fd_fails_at_once_without_memory(loop, fd):
    before = rss_bytes()
    for method in (loop.add_reader, loop.add_writer):
        with pytest.raises(OSError) as info:
            method(fd, lambda: None)
        assert info.value.errno == errno.EBADF
    grown = rss_growth(before)  # None where RSS cannot be read
    assert grown is None or grown < 64 << 20
    assert loop.remove_reader(fd) is False
    assert loop.remove_writer(fd) is False


def test_add_reader_on_dev_null_as_the_poller_says(loop):
    # /dev/null cannot be polled: epoll refuses it (EPERM), and zloop's
    # io_uring backend does too (an io_uring poll would call it ready for
    # ever: a spinning callback). kqueue answers for itself (macOS refuses
    # most character devices); each loop's poller is asked
    # (_platform.watch_refusal).
    fd = os.open(os.devnull, os.O_RDONLY)
    try:
        for name, write in (("reader", False), ("writer", True)):
            refusal = watch_refusal(loop, fd, write)
            if refusal is None:
                getattr(loop, f"add_{name}")(fd, lambda: None)
                assert getattr(loop, f"remove_{name}")(fd) is True
                continue
            with pytest.raises(OSError) as info:
                getattr(loop, f"add_{name}")(fd, lambda: None)
            assert info.value.errno == refusal
            assert getattr(loop, f"remove_{name}")(fd) is False
    finally:
        os.close(fd)


def _gc_quietly():
    # asyncio leaves the socket of a transport that failed in __init__ to
    # the garbage collector (with a ResourceWarning): collect it here.
    import gc
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


class _Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)


async def _connections_still_work(loop, rounds=4):
    # A healthy server on the same loop, and clients one after the other:
    # the failed connection's fd number comes back among theirs, and must
    # be free (no transport left registered on it).
    srv = await loop.create_server(_Echo, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        for _ in range(rounds):
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(b"ping")
            assert await r.readexactly(4) == b"ping"
            w.close()
            await w.wait_closed()
    finally:
        srv.close()


@pytest.mark.parametrize("bad", [None, object(), 5], ids=["None", "object", "int"])
def test_a_server_factory_returning_no_protocol_poisons_no_fd(loop, bad):
    loop.set_debug(True)  # asyncio reports the failure in debug mode only
    reported = loop.create_future()

    def handler(_loop, ctx):
        if not reported.done():
            reported.set_result(ctx)

    loop.set_exception_handler(handler)

    async def main():
        srv = await loop.create_server(lambda: bad, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        try:
            exc = (await reported)["exception"]
            assert isinstance(exc, AttributeError)
            await _connections_still_work(loop)
        finally:
            client.close()
            srv.close()

    try:
        loop.run_until_complete(main())
    finally:
        # The handler's future holds the exception, whose frames hold
        # asyncio's half-made transport and its socket.
        loop.set_exception_handler(None)
        reported = None
    _gc_quietly()


@pytest.mark.parametrize("bad", [None, object(), 5], ids=["None", "object", "int"])
def test_a_datagram_factory_returning_no_protocol_poisons_no_fd(loop, bad):
    async def main():
        # Each failed endpoint's socket is closed (asyncio: collected), and
        # its number must come back free for the next.
        for _ in range(3):
            with pytest.raises(AttributeError):
                await loop.create_datagram_endpoint(lambda: bad, local_addr=("127.0.0.1", 0))
            _gc_quietly()
        await _connections_still_work(loop)

    loop.run_until_complete(main())


class _IndexFails:
    def __index__(self):
        raise ZeroDivisionError("port")

    __int__ = __index__


# Ports asyncio hands to the socket call as int(port): out of range is
# OverflowError there, never a port taken modulo 65536 (getaddrinfo's wrap).
_BAD_PORTS = [70000, 2**32 + 1, -1, "70000", _IndexFails()]


async def _attempt(coro):
    try:
        result = await coro
    except (OverflowError, TypeError, ZeroDivisionError, OSError) as exc:
        return type(exc)
    return result


@pytest.mark.parametrize("port", _BAD_PORTS, ids=repr)
def test_out_of_range_ports_are_refused(loop, port):
    expected = ZeroDivisionError if isinstance(port, _IndexFails) else OverflowError

    async def main():
        got = await _attempt(loop.create_server(asyncio.Protocol, "127.0.0.1", port))
        assert got is expected
        got = await _attempt(loop.create_connection(asyncio.Protocol, "127.0.0.1", port))
        assert got is expected
        with socket.socket() as s:
            s.setblocking(False)
            assert await _attempt(loop.sock_connect(s, ("127.0.0.1", port))) is expected

    loop.run_until_complete(main())


@pytest.mark.parametrize("port", [True, 80.0], ids=repr)
def test_ports_that_int_accepts_are_taken_as_int(loop, port):
    # int(True) == 1, int(80.0) == 80: a connection attempt to that port
    # (refused here: nothing listens), not an "Int or String expected".
    async def main():
        with socket.socket() as s:
            s.setblocking(False)
            try:
                await loop.sock_connect(s, ("127.0.0.1", port))
            except ConnectionRefusedError as exc:
                return str(exc)
            return "connected"

    got = loop.run_until_complete(main())
    assert got.endswith(f"('127.0.0.1', {int(port)})") or got == "connected"


def test_sock_connect_with_a_str_address_is_a_type_error(loop):
    async def main():
        with socket.socket() as s:
            s.setblocking(False)
            with pytest.raises(TypeError):
                await loop.sock_connect(s, "127.0.0.1")

    loop.run_until_complete(main())


@pytest.mark.parametrize("case", ["released memoryview", "export fails"])
def test_sock_recv_into_a_buffer_gone_while_waiting_fails_the_wait(loop, case):
    if case == "export fails" and not hasattr(memoryview, "__buffer__"):
        pytest.skip("__buffer__ is 3.12+")
    a, b = _pair()
    reported = []
    loop.set_exception_handler(lambda _loop, ctx: reported.append(ctx))

    async def main():
        buf = memoryview(bytearray(16)) if case == "released memoryview" else ExportsOnce()
        t = asyncio.ensure_future(loop.sock_recv_into(a, buf))
        await yield_passes(2)
        assert not t.done()
        if case == "released memoryview":
            buf.release()
        b.send(b"data")
        with pytest.raises(Exception) as info:
            await t
        return type(info.value)

    try:
        got = loop.run_until_complete(main())
    finally:
        loop.set_exception_handler(None)
        a.close()
        b.close()
    # socket.recv_into's own error for a buffer it cannot write.
    assert (got, reported) == (TypeError, [])


def test_debug_turned_on_inside_a_callback_reports_no_bogus_duration(loop, caplog):
    # The callback began with debug off: it has no start time, and asyncio
    # does not time it (zloop measured from 0: "took 1738.6 seconds").
    def turn_on():
        loop.set_debug(True)

    with caplog.at_level("WARNING", logger="asyncio"):
        loop.call_soon(turn_on)
        run_passes(loop, 2)
        loop.set_debug(False)
    assert [r.getMessage() for r in caplog.records if "Executing" in r.getMessage()] == []


class _Paused(asyncio.Protocol):
    def __init__(self):
        self.paused = 0

    def pause_writing(self):
        self.paused += 1


async def _stream_and_udp(loop):
    a, b = _pair()
    stream, proto = await loop.create_unix_connection(_Paused, sock=a)
    udp, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0))
    return b, stream, proto, udp


@pytest.mark.parametrize("high, low", [(float("inf"), 0), (2**64, 16), (1.5, 0.5), (64, 1.5)])
def test_write_buffer_limits_take_any_real_number(loop, high, low):
    # asyncio keeps the numbers and compares the buffer's size with them:
    # no error, and a buffer above a finite high-water mark still pauses.
    async def main():
        peer, stream, proto, udp = await _stream_and_udp(loop)
        try:
            for t in (stream, udp):
                t.set_write_buffer_limits(high, low)
            stream.write(b"x" * (4 << 20))  # more than the socket takes
            return proto.paused
        finally:
            stream.abort()
            udp.close()
            peer.close()

    assert loop.run_until_complete(main()) == (0 if high == float("inf") or high >= 2**64 else 1)


def test_writelines_of_a_false_argument(loop):
    # 3.12+: `if not list_of_data: return`; 3.11 joins it (TypeError).
    async def main():
        peer, stream, _, udp = await _stream_and_udp(loop)
        udp.close()
        try:
            stream.writelines(None)
            return "ok"
        except TypeError:
            return "TypeError"
        finally:
            stream.close()
            peer.close()

    assert loop.run_until_complete(main()) == ("ok" if PY >= (3, 12) else "TypeError")


def test_server_close_clients_exists_where_asyncio_has_it(loop):
    async def main():
        server = await loop.create_server(asyncio.Protocol, "127.0.0.1", 0)
        server.close()
        await server.wait_closed()
        return hasattr(server, "close_clients"), hasattr(server, "abort_clients")

    assert loop.run_until_complete(main()) == ((PY >= (3, 13),) * 2)


def test_sendto_of_a_released_memoryview(loop):
    # Up to 3.12 `if not data` raises at the call; 3.13+ meets the error
    # sending and fails the transport (its exception handler, closed).
    seen = []
    loop.set_exception_handler(lambda _l, ctx: seen.append(type(ctx.get("exception"))))

    async def main():
        t, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0))
        view = memoryview(b"x")
        view.release()
        try:
            t.sendto(view, t.get_extra_info("sockname"))
            raised = None
        except ValueError:
            raised = ValueError
        await yield_passes(2)
        closing = t.is_closing()
        t.close()
        return raised, seen, closing

    want = (ValueError, [], False) if PY < (3, 13) else (None, [ValueError], True)
    assert loop.run_until_complete(main()) == want


# ------------------------------------------------ a closed user socket's fd
#
# User code closes a socket (or pipe) object the loop still works on, and a
# new file takes its fd number. Whatever the loop does through the old
# object must then fail as on a closed socket (EBADF, as asyncio's sock.send
# or sock.recv on it), and no byte of the old connection may reach the new
# file, nor any of the new file's bytes the old connection. On io_uring the
# user's close must really close: its peer sees end of file at once.
#
# Where the loop serves the new file too (a newcomer on the number: a
# sock_recv, a transport, a server), stock asyncio breaks: its add_reader
# finds the old registration in its selector and asks epoll to modify it,
# but epoll forgot it with the old file (FileNotFoundError out of the
# newcomer, or, with the same events, no epoll_ctl at all and the new file
# never watched), and its _ensure_fd_no_transport refuses a sock_* call on
# the number of a transport that was never closed (RuntimeError). Those
# cases assert on asyncio what it gets right (nothing misrouted) and skip
# the rest; zloop evicts the stale holder, which fails with EBADF, and
# serves the newcomer (docs/differences.md).

_EBADF = f"OSError({errno.EBADF})"
_NEWCOMER_BREAKS_ASYNCIO = (
    "asyncio's add_reader on a reused number modifies an epoll entry that went "
    "with the old file (FileNotFoundError, or the new file left unwatched)"
)


def _describe(fut):
    """A future's outcome: "pending", its result, or its exception's name."""
    if not fut.done():
        return "pending"
    if fut.cancelled():
        return "cancelled"
    exc = fut.exception()
    return fut.result() if exc is None else _exception_name(exc)


def _exception_name(exc):
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"OSError({exc.errno})"
    return type(exc).__name__


def _drain(sock):
    """What `sock` (non-blocking) can read now; b"<EOF>" marks the end."""
    got = b""
    while True:
        try:
            data = sock.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return got
        if not data:
            return got + b"<EOF>"
        got += data


async def _until(cond, passes=200):
    """Loop passes until cond() holds (at most `passes`; no timers)."""
    for _ in range(passes):
        if cond():
            return
        await asyncio.sleep(0)


async def _settle():
    # Enough passes for what a pass queues (a callback's done callbacks,
    # connection_lost) to run; used where the assertion is that nothing
    # more happens.
    await yield_passes(6)


def _socket_at(fd, family=socket.AF_UNIX, kind=socket.SOCK_STREAM):
    """A new, unconnected socket with descriptor number `fd`."""
    s = socket.socket(family, kind)
    if s.fileno() != fd:
        os.dup2(s.fileno(), fd)
        s.close()
        s = socket.socket(family, kind, fileno=fd)
    s.setblocking(False)
    return s


class _Recorder(asyncio.Protocol, asyncio.DatagramProtocol):
    def __init__(self, loop):
        self.got = []
        self.lost = loop.create_future()

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.got.append(bytes(data))

    def datagram_received(self, data, addr):
        self.got.append(bytes(data))

    def eof_received(self):
        self.got.append("eof")

    def error_received(self, exc):
        self.got.append(f"error_received:{exc.errno}")

    def connection_lost(self, exc):
        # The result is what it was lost with: None or the exception's name.
        if not self.lost.done():
            self.lost.set_result(None if exc is None else _exception_name(exc))


# The sock_* calls. Each case sets up socket `a` (its cleanup on `stack`)
# and returns it with a call on it that waits: a send on a full buffer (its
# bytes must never reach the new file's peer), a receive with nothing to
# read (the new file's bytes must never reach it), a connect that is not
# answered yet.


def _sock_sendall_case(loop, tmp_path, stack):
    a, b = _pair()
    stack.callback(b.close)
    return a, loop.sock_sendall(a, b"A" * (4 << 20))


def _sock_sendfile_case(loop, tmp_path, stack):
    a, b = _pair()
    stack.callback(b.close)
    f = stack.enter_context(open(tmp_path / "payload", "w+b"))
    f.write(b"F" * (4 << 20))
    f.flush()
    return a, loop.sock_sendfile(a, f, 0, None)


def _sock_sendto_case(loop, tmp_path, stack):
    path = str(tmp_path / "dgram")
    b = stack.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM))
    b.bind(path)
    a = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.setblocking(False)
    while True:  # the peer's queue full: it reads nothing
        try:
            a.sendto(b"x" * 1024, path)
        except BlockingIOError:
            break
    return a, loop.sock_sendto(a, b"OLD", path)


def _sock_connect_case(loop, tmp_path, stack):
    # A listener whose backlog is full drops the SYN: the connect waits.
    listener = stack.enter_context(socket.socket())
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    first = stack.enter_context(socket.socket())
    first.connect(listener.getsockname())
    a = socket.socket()
    a.setblocking(False)
    return a, loop.sock_connect(a, listener.getsockname())


def _sock_recv_case(method, kind=socket.SOCK_STREAM):
    def case(loop, tmp_path, stack):
        a, b = _pair(kind)
        stack.callback(b.close)
        arg = bytearray(100) if method.endswith("_into") else 100
        return a, getattr(loop, method)(a, arg)

    return case


_SOCK_CASES = {
    "sock_sendall": _sock_sendall_case,
    "sock_sendfile": _sock_sendfile_case,
    "sock_sendto": _sock_sendto_case,
    "sock_connect": _sock_connect_case,
    "sock_recv": _sock_recv_case("sock_recv"),
    "sock_recv_into": _sock_recv_case("sock_recv_into"),
    "sock_recvfrom": _sock_recv_case("sock_recvfrom", socket.SOCK_DGRAM),
    "sock_recvfrom_into": _sock_recv_case("sock_recvfrom_into", socket.SOCK_DGRAM),
}


class _Newcomer:
    """The loop serving socket `c`, new on a reused number: a sock_recv, or
    a transport (connect_accepted_socket). `got()`: what it received."""

    def __init__(self, loop, how, c):
        self.loop, self.how, self.c = loop, how, c
        self.transport = None
        self.proto = _Recorder(loop)

    async def start(self):
        if self.how == "sock_recv":
            self.fut = asyncio.ensure_future(self.loop.sock_recv(self.c, 100))
        else:
            self.fut = asyncio.ensure_future(self.loop.connect_accepted_socket(lambda: self.proto, self.c))
        await yield_passes(2)

    def done(self):
        return self.fut.done() if self.how == "sock_recv" else bool(self.proto.got)

    def got(self):
        if self.how == "sock_recv" or not self.fut.done() or self.fut.exception():
            return _describe(self.fut)
        return b"".join(self.proto.got)

    async def close(self):
        self.fut.cancel()
        if self.fut.done() and not self.fut.cancelled() and not self.fut.exception():
            if self.how == "transport":
                self.fut.result()[0].abort()
        await yield_passes(2)
        self.c.close()


@contextlib.asynccontextmanager
async def _number_reused(loop, fd, newcomer):
    """(c, d, new): a new socket pair whose `c` takes descriptor number
    `fd`, `c` served by the loop through `newcomer` ("sock_recv",
    "transport": a `_Newcomer`) or not at all (None: `new` is None)."""
    c, d = _pair_at(fd)
    new = _Newcomer(loop, newcomer, c) if newcomer else None
    try:
        if new is not None:
            await new.start()
        yield c, d, new
    finally:
        if new is not None:
            await new.close()
        c.close()
        d.close()


@pytest.mark.parametrize("newcomer", ["sock_recv", "transport"])
@pytest.mark.parametrize("case", list(_SOCK_CASES))
def test_a_sock_call_on_a_socket_closed_while_it_waits_never_reaches_the_next_file(
    loop, loop_name, case, newcomer, tmp_path
):
    # The case: sock_sendall(a, 4 MiB) waits on a full buffer, the
    # user closes a, and a new socket gets the number and is served by the
    # loop: the old payload went to the new socket's peer (or, with a
    # transport as the newcomer, the transport failed: "File descriptor is
    # used by another watcher").
    if case == "sock_sendto" and full_unix_receiver_errno() != errno.EAGAIN:
        pytest.skip("this kernel refuses a datagram to a full Unix receiver (ENOBUFS) rather "
                    "than making the sender wait: no sock_sendto waits")
    outcome = {}

    async def main():
        with contextlib.ExitStack() as stack:
            a, call = _SOCK_CASES[case](loop, tmp_path, stack)
            fd = a.fileno()
            old = asyncio.ensure_future(call)
            await yield_passes(3)
            assert not old.done()
            a.close()
            try:
                async with _number_reused(loop, fd, newcomer) as (c, d, new):
                    d.send(b"for-c")
                    await _until(lambda: old.done() and new.done())
                    await _settle()
                    outcome["old"] = _describe(old)
                    outcome["new"] = new.got()
                    outcome["new peer got"] = _drain(d)
                    outcome["new socket left"] = _drain(c)
            finally:
                old.cancel()

    loop.run_until_complete(main())
    # Not a byte of the old call reaches the new socket's peer, on either
    # loop.
    assert outcome["new peer got"] == b""
    if loop_name == "asyncio":
        pytest.skip(_NEWCOMER_BREAKS_ASYNCIO)
    assert outcome == {"old": _EBADF, "new": b"for-c", "new peer got": b"", "new socket left": b""}


def test_sock_accept_on_a_listener_closed_while_it_waits_never_takes_the_next_listener_s_clients(
    loop, loop_name, tmp_path
):
    outcome = {}

    async def main():
        with socket.socket(socket.AF_UNIX) as old_listener:
            old_listener.bind(str(tmp_path / "old"))
            old_listener.listen(5)
            old_listener.setblocking(False)
            fd = old_listener.fileno()
            old = asyncio.ensure_future(loop.sock_accept(old_listener))
            await yield_passes(3)
            old_listener.close()
        with _socket_at(fd) as listener, socket.socket(socket.AF_UNIX) as client:
            listener.bind(str(tmp_path / "new"))
            listener.listen(5)
            new = asyncio.ensure_future(loop.sock_accept(listener))
            try:
                await yield_passes(2)
                client.connect(str(tmp_path / "new"))
                await _until(lambda: old.done() and new.done())
                await _settle()
                outcome["old"] = _describe(old)
                outcome["new"] = "accepted" if new.done() and not new.exception() else _describe(new)
            finally:
                for t in (old, new):
                    t.cancel()
                    if t.done() and not t.cancelled() and not t.exception():
                        t.result()[0].close()
                await yield_passes(2)

    loop.run_until_complete(main())
    if loop_name == "asyncio":
        pytest.skip(_NEWCOMER_BREAKS_ASYNCIO)
    assert outcome == {"old": _EBADF, "new": "accepted"}


async def _transport_over(loop, entry, proto):
    """(transport, a, b): `entry` given socket `a` of a connected pair."""
    if entry == "create_datagram_endpoint":
        a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        a.bind(("127.0.0.1", 0))
        b.bind(("127.0.0.1", 0))
        a.connect(b.getsockname())
        b.connect(a.getsockname())
        b.setblocking(False)
        tr, _ = await loop.create_datagram_endpoint(lambda: proto, sock=a)
        return tr, a, b
    a, b = _pair()
    if entry == "create_connection":
        tr, _ = await loop.create_connection(lambda: proto, sock=a)
    elif entry == "create_unix_connection":
        tr, _ = await loop.create_unix_connection(lambda: proto, sock=a)
    else:
        tr, _ = await loop.connect_accepted_socket(lambda: proto, a)
    return tr, a, b


_TRANSPORT_ENTRIES = ["create_connection", "create_unix_connection", "connect_accepted_socket",
                      "create_datagram_endpoint"]


@pytest.mark.parametrize("newcomer", [None, "sock_recv", "transport"])
@pytest.mark.parametrize("entry", _TRANSPORT_ENTRIES)
def test_a_transport_over_a_socket_the_user_closed_never_reaches_the_next_file(
    loop, loop_name, entry, newcomer
):
    # The user closes the socket a transport was given; a new socket takes
    # its number. The transport's next send fails with EBADF (a stream's
    # connection_lost(OSError(EBADF)); a datagram endpoint's error_received,
    # as asyncio) instead of going to the new socket's peer; the old peer
    # sees the close at once, on io_uring too; and a newcomer on the number
    # (served by the loop) evicts the transport, which fails with EBADF.
    datagram = entry == "create_datagram_endpoint"
    proto = _Recorder(loop)
    outcome = {}

    async def main():
        tr, a, b = await _transport_over(loop, entry, proto)
        try:
            await yield_passes(2)
            b.send(b"before")
            await _until(lambda: proto.got)
            fd = a.fileno()
            a.close()
            outcome["old peer saw"] = _drain(b)
            async with _number_reused(loop, fd, newcomer) as (c, d, new):
                try:
                    d.send(b"for-c")
                except BrokenPipeError:
                    if loop_name != "asyncio" or newcomer != "transport":
                        raise
                    # asyncio refuses the newcomer's transport while the old
                    # one holds the number (RuntimeError), and from 3.14 on
                    # closes the newcomer's socket as it fails.
                    pytest.skip(_NEWCOMER_BREAKS_ASYNCIO)
                if datagram:
                    b.send(b"after")
                await _settle()
                if datagram:
                    tr.sendto(b"OLD")
                else:
                    tr.write(b"OLD")
                await _until(lambda: proto.lost.done() or len(proto.got) > 1)
                await _settle()
                outcome["proto got"] = proto.got
                outcome["lost"] = _describe(proto.lost)
                outcome["new peer got"] = _drain(d)
                if new is not None:
                    outcome["new"] = new.got()
        finally:
            tr.abort()
            b.close()
            await yield_passes(2)

    loop.run_until_complete(main())
    # Nothing of the old connection reaches the new socket's peer, nor the
    # new socket's bytes the old protocol, on either loop.
    assert outcome["new peer got"] == b""
    assert b"for-c" not in outcome["proto got"]
    if newcomer is not None and loop_name == "asyncio":
        # asyncio refuses sock_* on the number of a transport never closed
        # (RuntimeError), or leaves the new transport's socket unwatched.
        pytest.skip(_NEWCOMER_BREAKS_ASYNCIO)
    want = {
        # A datagram socket has no end of file to see.
        "old peer saw": b"" if datagram else b"<EOF>",
        "proto got": [b"before"],
        "lost": _EBADF,
        "new peer got": b"",
    }
    if newcomer is not None:
        want["new"] = b"for-c"
    elif datagram:
        want["proto got"] = [b"before", f"error_received:{errno.EBADF}"]
        want["lost"] = "pending"
    assert outcome == want


@pytest.mark.parametrize("entry", _TRANSPORT_ENTRIES)
def test_a_transport_over_a_socket_the_user_detached_sends_nothing(loop, entry):
    # socket.detach() hands the fd to the user, open: the transport must not
    # use it any more (asyncio's sock.send on the detached socket: EBADF).
    datagram = entry == "create_datagram_endpoint"
    proto = _Recorder(loop)

    async def main():
        tr, a, b = await _transport_over(loop, entry, proto)
        raw = None
        try:
            await yield_passes(2)
            raw = a.detach()
            if datagram:
                tr.sendto(b"OLD")
            else:
                tr.write(b"OLD")
            await _until(lambda: proto.lost.done() or proto.got)
            await _settle()
            return _drain(b), proto.got, _describe(proto.lost)
        finally:
            tr.abort()
            b.close()
            if raw is not None:
                os.close(raw)
            await yield_passes(2)

    peer_got, got, lost = loop.run_until_complete(main())
    assert peer_got == b""
    if datagram:
        assert (got, lost) == ([f"error_received:{errno.EBADF}"], "pending")
    else:
        assert (got, lost) == ([], _EBADF)


def _listener(kind, tmp_path, name, fd=None):
    """A listening socket (TCP on 127.0.0.1, or Unix at tmp_path/name), with
    descriptor number `fd` if given; and the address to connect to."""
    family = socket.AF_INET if kind == "create_server" else socket.AF_UNIX
    s = _socket_at(fd, family) if fd is not None else socket.socket(family)
    s.bind(("127.0.0.1", 0) if family == socket.AF_INET else str(tmp_path / name))
    s.listen(5)
    s.setblocking(False)
    return s, s.getsockname()


async def _serve(loop, kind, sock, protocol_factory):
    if kind == "create_server":
        return await loop.create_server(protocol_factory, sock=sock)
    return await loop.create_unix_server(protocol_factory, sock=sock)


def _close_server(server):
    try:
        server.close()
    except (ValueError, OSError):
        # asyncio's close() asks the selector to forget the listener by its
        # fileno(), -1 once the user closed it: "Invalid file descriptor";
        # 3.13+ asks a Unix listener its name first (EBADF).
        server.close()


@pytest.mark.parametrize("newcomer", [None, "server"])
@pytest.mark.parametrize("kind", ["create_server", "create_unix_server"])
def test_a_server_over_a_listener_the_user_closed_accepts_nothing_more(
    loop, loop_name, kind, newcomer, tmp_path
):
    # The user closes the listening socket a server was given. It stops
    # accepting: on io_uring too, where a poll in the ring held the closed
    # listener open (clients still connected, and were served). A new
    # listener that takes the number, served by another server, gets its
    # own clients (the old server's acceptor held the number: "File
    # descriptor is used by another watcher").
    accepted = []

    def factory(name):
        def make():
            accepted.append(name)
            return asyncio.Protocol()

        return make

    async def main():
        lst, addr = _listener(kind, tmp_path, "old")
        fd = lst.fileno()
        old = await _serve(loop, kind, lst, factory("old"))
        await yield_passes(2)
        lst.close()
        refused = False
        with socket.socket(lst.family) as probe:
            try:
                probe.connect(addr)
            except ConnectionRefusedError:
                refused = True
        new = None
        with contextlib.ExitStack() as stack:
            if newcomer is not None:
                new_lst, new_addr = _listener(kind, tmp_path, "new", fd)
                new = await _serve(loop, kind, new_lst, factory("new"))
                client = stack.enter_context(socket.socket(new_lst.family))
                client.connect(new_addr)
                await _until(lambda: accepted)
            await _settle()
            for server in (old, new):
                if server is not None:
                    _close_server(server)
            return refused

    refused = loop.run_until_complete(main())
    assert refused
    assert "old" not in accepted
    if newcomer is not None and loop_name == "asyncio":
        pytest.skip(_NEWCOMER_BREAKS_ASYNCIO)
    assert accepted == ([] if newcomer is None else ["new"])


def test_a_server_whose_listener_is_closed_mid_batch_accepts_nothing_from_the_next_listener(
    loop, tmp_path
):
    # The protocol factory of the first connection closes the server's
    # listening socket, and a new listener with a client of its own queued
    # takes the number: the rest of the accept batch must not take that
    # client. (asyncio makes each protocol in a task of its own, after the
    # batch, and its sock.accept() is the socket object's.)
    calls = []
    reported = []
    loop.set_exception_handler(lambda _loop, ctx: reported.append(ctx.get("exception")))

    async def main():
        lst, addr = _listener("create_unix_server", tmp_path, "old")
        fd = lst.fileno()
        later = []
        served = []

        def factory():
            calls.append(len(calls))
            if len(calls) == 1:
                lst.close()
                new_lst, new_addr = _listener("create_unix_server", tmp_path, "new", fd)
                client = socket.socket(socket.AF_UNIX)
                client.connect(new_addr)
                later.extend((new_lst, client))
            proto = _Recorder(loop)
            served.append(proto)
            return proto

        server = await loop.create_unix_server(factory, sock=lst)
        with socket.socket(socket.AF_UNIX) as first:
            first.connect(addr)
            await _until(lambda: later)
            await _settle()
            new_lst, client = later
            with new_lst, client:
                # The new listener's client is still waiting for it.
                conn, _ = new_lst.accept()
                conn.close()
        for proto in served:
            proto.transport.close()
        _close_server(server)
        await yield_passes(2)

    try:
        loop.run_until_complete(main())
    finally:
        loop.set_exception_handler(None)
    assert (calls, reported) == ([0], [])


@pytest.mark.parametrize("newcomer", [None, "sock_recv", "transport"])
def test_a_write_pipe_the_user_closed_never_writes_to_the_next_file(loop, loop_name, newcomer):
    # connect_write_pipe() with a file object the user then closes; a new
    # socket takes its number. asyncio's pipe transport writes with
    # os.write on the number it cached: the new socket's peer gets the
    # bytes (docs/differences.md). zloop's write fails with EBADF, as on
    # the closed number: connection_lost(OSError(EBADF)).
    if loop_name == "asyncio":
        pytest.skip("asyncio's pipe transport writes to the file that took the closed pipe's number")
    proto = _Recorder(loop)
    r, w = os.pipe()
    os.set_blocking(r, False)
    pipe = os.fdopen(w, "wb", buffering=0)
    outcome = {}

    async def main():
        tr, _ = await loop.connect_write_pipe(lambda: proto, pipe)
        try:
            await yield_passes(2)
            fd = pipe.fileno()
            pipe.close()
            outcome["reader saw"] = os.read(r, 100)
            async with _number_reused(loop, fd, newcomer) as (c, d, new):
                if new is not None:
                    d.send(b"for-c")
                tr.write(b"OLD")
                await _until(lambda: proto.lost.done())
                await _settle()
                outcome["lost"] = _describe(proto.lost)
                outcome["new peer got"] = _drain(d)
                if new is not None:
                    outcome["new"] = new.got()
        finally:
            tr.close()
            await yield_passes(2)

    try:
        loop.run_until_complete(main())
    finally:
        os.close(r)
    want = {"reader saw": b"", "lost": _EBADF, "new peer got": b""}
    if newcomer is not None:
        want["new"] = b"for-c"
    assert outcome == want


@pytest.mark.parametrize("newcomer", [None, "sock_recv", "transport"])
def test_a_read_pipe_the_user_closed_never_reads_the_next_file(loop, loop_name, newcomer):
    # connect_read_pipe() with a file object the user then closes; a new
    # socket takes its number. With nothing else on the number, both loops
    # leave the transport as it is (the closed file wakes nothing). A
    # newcomer served by the loop on the number evicts it on zloop: its
    # read fails with EBADF (connection_lost(OSError(EBADF))) and the
    # newcomer gets its bytes (asyncio leaves the newcomer unwatched).
    proto = _Recorder(loop)
    r, w = os.pipe()
    pipe = os.fdopen(r, "rb", buffering=0)
    outcome = {}

    async def main():
        tr, _ = await loop.connect_read_pipe(lambda: proto, pipe)
        try:
            await yield_passes(2)
            os.write(w, b"before")
            await _until(lambda: proto.got)
            fd = pipe.fileno()
            pipe.close()
            async with _number_reused(loop, fd, newcomer) as (c, d, new):
                d.send(b"for-c")
                await _until(lambda: proto.lost.done() and (new is None or new.done()))
                await _settle()
                outcome["proto got"] = proto.got
                outcome["lost"] = _describe(proto.lost)
                if new is not None:
                    outcome["new"] = new.got()
        finally:
            tr.close()
            await yield_passes(2)

    try:
        loop.run_until_complete(main())
    finally:
        os.close(w)
    assert outcome["proto got"] == [b"before"]
    if newcomer is None:
        assert outcome == {"proto got": [b"before"], "lost": "pending"}
        return
    if loop_name == "asyncio":
        pytest.skip(_NEWCOMER_BREAKS_ASYNCIO)
    assert outcome == {"proto got": [b"before"], "lost": _EBADF, "new": b"for-c"}
