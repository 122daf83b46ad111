"""Misuse that costs the user an exception, never another connection's
bytes, a hang, a spin or unbounded memory (issue 22).

Each test runs on both loops; the fd-closing ones matter most under
ZLOOP_BACKEND=io_uring, whose polls hold their file, and are meaningful on
either backend: they assert what asyncio's selector loop does.
"""

import asyncio
import errno
import os
import socket

import pytest

from _support import PY, ExportsOnce, no_leaks, rss_bytes, run_passes, yield_passes  # noqa: F401


def _pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    return a, b


def _pair_at(fd):
    """A new socket pair whose first socket has descriptor number `fd`."""
    c0, d = _pair()
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
    assert rss_bytes() - before < 64 << 20
    assert loop.remove_reader(fd) is False
    assert loop.remove_writer(fd) is False


def test_add_reader_on_dev_null_is_refused(loop):
    # /dev/null cannot be polled: epoll refuses it (EPERM); an io_uring
    # poll would call it ready for ever (a spinning callback).
    fd = os.open(os.devnull, os.O_RDONLY)
    try:
        for method in (loop.add_reader, loop.add_writer):
            with pytest.raises(PermissionError):
                method(fd, lambda: None)
        assert loop.remove_reader(fd) is False
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
