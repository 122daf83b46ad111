"""Reads that race with the reader's own state: pausing, closing and
switching protocols while received data is still on its way to the
protocol, and many connections receiving at once.

On io_uring (ZLOOP_BACKEND=io_uring) zloop's stream transports receive
natively: a multishot receive puts each arrival in one of the loop's
buffers before the loop dispatches it, so data can already be out of the
socket when the protocol pauses, closes or is replaced. These tests pin
what asyncio does there (every byte once, in order, to the protocol of the
moment; nothing after a pause until the resume; nothing after close) and
run on every loop; on epoll they check the same behaviour of zloop's
readiness path.
"""

import asyncio
import os
import socket

import pytest

from _net import payload, wait_for
from _support import open_fds

pytestmark = pytest.mark.network

HOST = "127.0.0.1"


def _native_recv(loop):
    """Whether `loop` receives natively (zloop on io_uring)."""
    return getattr(loop, "_backend", None) == "io_uring"


class HandOff(asyncio.Protocol):
    """Hands the transport to ``then`` on its first data_received, as
    start_tls does, and keeps that first chunk."""

    def __init__(self, then):
        self.then = then
        self.first = None

    def connection_made(self, transport):
        self.transport = transport
        self.then.transport = transport

    def data_received(self, chunk):
        self.first = chunk
        self.transport.set_protocol(self.then)


class PausesItself:
    """A protocol that pauses its own reading and resumes it by
    ``call_soon`` or, ``how`` being "call_later", a millisecond later;
    ``paused`` says which it is in."""

    paused = False

    def pause_then_resume(self, loop, how):
        self.paused = True
        self.transport.pause_reading()
        if how == "call_soon":
            loop.call_soon(self.resume)
        else:
            loop.call_later(0.001, self.resume)

    def resume(self):
        self.paused = False
        self.transport.resume_reading()


class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)


async def _burst(port, n):
    """`n` connections to an echo server on `port`, each sent a message in
    the same pass; each reply checked, then all closed."""
    conns = await asyncio.gather(*(asyncio.open_connection(HOST, port) for _ in range(n)))
    for i, (_, writer) in enumerate(conns):
        writer.write(b"%05d" % i * 200)
    replies = await wait_for(asyncio.gather(*(r.readexactly(1000) for r, _ in conns)), 30)
    for _, writer in conns:
        writer.close()
    # Closed before the loop stops: on 3.11 a StreamWriter left closing
    # leaves its socket to the collector (a ResourceWarning later).
    await wait_for(asyncio.gather(*(writer.wait_closed() for _, writer in conns)))
    assert replies == [b"%05d" % i * 200 for i in range(n)]


@pytest.fixture
def burst_loop(loop_factory, monkeypatch):
    """A loop whose waits on io_uring take every arrival at once. A
    single-issuer ring defers the receives' task work to the loop's wait,
    which runs it in the kernel's batches: a burst of 300 then does not
    always use up the 64 buffers (one run in six did not), and the cases
    that need the receive pool to grow leave the feature off."""
    monkeypatch.setenv("ZLOOP_URING_OFF", "single_issuer")
    lp = loop_factory()
    try:
        yield lp
    finally:
        lp.close()


def test_many_connections_receiving_at_once_each_get_their_bytes(burst_loop):
    # 300 connections, each sent a message in the same pass: on io_uring
    # more arrive in one wait than the loop has buffers (64 to start), so
    # some receives find none free and the pool grows.
    loop = burst_loop

    async def main():
        server = await loop.create_server(Echo, HOST, 0)
        await _burst(server.sockets[0].getsockname()[1], 300)
        server.close()
        await server.wait_closed()

    loop.run_until_complete(main())
    if _native_recv(loop):
        assert loop._recv_buffers() > 64


def test_the_receive_pool_shrinks_back_after_a_burst(burst_loop):
    # After the burst grew it, one connection's round trips (a buffer or
    # two at a time) shrink the pool back to its first 64 buffers, the
    # others freed; a second burst grows it again and every byte still
    # arrives.
    loop = burst_loop
    if not _native_recv(loop):
        pytest.skip("the receive pool is zloop's on io_uring")

    async def round_trips(port, n):
        reader, writer = await asyncio.open_connection(HOST, port)
        for i in range(n):
            writer.write(b"%06d" % i)
            assert await wait_for(reader.readexactly(6)) == b"%06d" % i
        writer.close()
        await writer.wait_closed()

    async def main():
        server = await loop.create_server(Echo, HOST, 0)
        port = server.sockets[0].getsockname()[1]
        await _burst(port, 300)
        grown = loop._recv_buffers()
        assert grown > 64
        await round_trips(port, 20_000)
        shrunk = loop._recv_buffers()
        await _burst(port, 300)
        regrown = loop._recv_buffers()
        server.close()
        await server.wait_closed()
        return grown, shrunk, regrown

    grown, shrunk, regrown = loop.run_until_complete(main())
    assert shrunk == 64, (grown, shrunk)
    assert regrown > 64


@pytest.mark.parametrize("resume", ["call_soon", "call_later"])
def test_pausing_in_each_data_received_loses_and_reorders_nothing(loop, resume):
    # The protocol pauses reading in every data_received and resumes a
    # little later, while the peer keeps sending small chunks: what was
    # received but not yet delivered at each pause comes after the resume,
    # in order, and nothing is delivered while paused.
    data = payload(400 * 1000)

    class Pausing(PausesItself, asyncio.Protocol):
        def __init__(self):
            self.got = bytearray()
            self.done = loop.create_future()

        def connection_made(self, transport):
            self.transport = transport

        def data_received(self, chunk):
            assert not self.paused, "data_received while paused"
            self.got += chunk
            self.pause_then_resume(loop, resume)

        def eof_received(self):
            self.done.set_result(bytes(self.got))

    async def main():
        proto = Pausing()
        server = await loop.create_server(lambda: proto, HOST, 0)
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection(HOST, port)
        for i in range(0, len(data), 1000):
            writer.write(data[i:i + 1000])
            if i % 8000 == 0:
                await asyncio.sleep(0)
        writer.write_eof()
        got = await wait_for(proto.done, 30)
        writer.close()
        server.close()
        await server.wait_closed()
        return got

    assert loop.run_until_complete(main()) == data


def test_close_in_data_received_drops_what_follows_and_frees_the_socket(loop):
    # Several chunks arrive together; the first data_received closes the
    # transport: nothing more is delivered, the peer sees end of file and
    # no fd is left behind.
    calls = []

    class Closer(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport
            self.lost = loop.create_future()

        def data_received(self, chunk):
            calls.append(chunk)
            self.transport.close()

        def connection_lost(self, exc):
            self.lost.set_result(exc)

    async def main():
        proto = Closer()
        server = await loop.create_server(lambda: proto, HOST, 0)
        port = server.sockets[0].getsockname()[1]
        before = open_fds()
        reader, writer = await asyncio.open_connection(HOST, port)
        for i in range(20):
            writer.write(b"%02d" % i * 50)
        assert await wait_for(proto.lost) is None
        assert await wait_for(reader.read()) == b""
        writer.close()
        await writer.wait_closed()
        await asyncio.sleep(0)
        after = open_fds()
        server.close()
        await server.wait_closed()
        return before, after

    before, after = loop.run_until_complete(main())
    assert len(calls) == 1
    assert calls[0] == b"".join(b"%02d" % i * 50 for i in range(20))[: len(calls[0])]
    assert after == before


def test_switching_to_a_buffered_protocol_mid_stream_keeps_every_byte(loop):
    # As start_tls does: the first protocol hands the transport to a
    # BufferedProtocol on its first data_received; bytes already received
    # for the transport (on io_uring, likely) reach the new protocol, in
    # order, through get_buffer()/buffer_updated().
    data = payload(64 * 1024)

    class Buffered(asyncio.BufferedProtocol):
        def __init__(self):
            self.buf = bytearray(1000)  # smaller than a read: several calls
            self.got = bytearray()
            self.done = loop.create_future()

        def get_buffer(self, sizehint):
            return self.buf

        def buffer_updated(self, nbytes):
            self.got += self.buf[:nbytes]

        def eof_received(self):
            self.done.set_result(bytes(self.got))

    async def main():
        buffered = Buffered()
        first = HandOff(buffered)
        server = await loop.create_server(lambda: first, HOST, 0)
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection(HOST, port)
        for i in range(0, len(data), 100):
            writer.write(data[i:i + 100])
        writer.write_eof()
        rest = await wait_for(buffered.done)
        writer.close()
        server.close()
        await server.wait_closed()
        return first.first + rest

    assert loop.run_until_complete(main()) == data


@pytest.mark.parametrize("resume", ["call_soon", "call_later"])
def test_a_buffered_protocol_that_pauses_or_gives_way_mid_receive_gets_no_more(loop, resume):
    # As start_tls's protocol may: a BufferedProtocol handed the transport
    # mid-stream pauses reading from buffer_updated() every third call, and
    # later hands the transport on to a plain protocol from it. Bytes
    # already received (on io_uring, a receive larger than the protocol's
    # buffer is fed to it in parts) go to it only while it reads and only
    # while it is the protocol: no buffer_updated() between pause and
    # resume, no get_buffer() on the plain protocol, every byte once and in
    # order.
    data = payload(256 * 1024)
    switch_at = 100 * 1024
    errors = []

    class Plain(asyncio.Protocol):
        def __init__(self):
            self.got = bytearray()
            self.done = loop.create_future()

        def data_received(self, chunk):
            self.got += chunk

        def eof_received(self):
            self.done.set_result(None)

    class Buffered(PausesItself, asyncio.BufferedProtocol):
        def __init__(self, then):
            self.then = then
            self.buf = bytearray(700)
            self.got = bytearray()
            self.calls = 0
            self.current = True

        def get_buffer(self, sizehint):
            if not self.current:
                errors.append("get_buffer() after set_protocol()")
            return self.buf

        def buffer_updated(self, nbytes):
            if self.paused:
                errors.append("buffer_updated() while paused")
            if not self.current:
                errors.append("buffer_updated() after set_protocol()")
            self.got += self.buf[:nbytes]
            self.calls += 1
            if len(self.got) >= switch_at:
                self.current = False
                self.transport.set_protocol(self.then)
            elif self.calls % 3 == 0:
                self.pause_then_resume(loop, resume)

        def eof_received(self):
            errors.append("eof_received() on the replaced protocol")

    async def main():
        plain = Plain()
        buffered = Buffered(plain)
        first = HandOff(buffered)
        server = await loop.create_server(lambda: first, HOST, 0)
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection(HOST, port)
        for i in range(0, len(data), 8 * 1024):
            writer.write(data[i:i + 8 * 1024])
            await asyncio.sleep(0)
        writer.write_eof()
        await wait_for(plain.done)
        writer.close()
        server.close()
        await server.wait_closed()
        return first.first + buffered.got + plain.got

    assert loop.run_until_complete(main()) == data
    assert errors == []


def test_a_paused_transport_closed_by_its_peer_reports_eof_only_after_resume(loop):
    # Data and the peer's end of file arrive while reading is paused: on
    # resume, the data comes first, then eof_received, as on asyncio.
    events = []

    class Proto(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport
            transport.pause_reading()
            self.eof = loop.create_future()

        def data_received(self, chunk):
            events.append(("data", chunk))

        def eof_received(self):
            events.append(("eof",))
            self.eof.set_result(None)

    async def main():
        proto = Proto()
        server = await loop.create_server(lambda: proto, HOST, 0)
        port = server.sockets[0].getsockname()[1]
        sock = socket.create_connection((HOST, port))
        sock.sendall(b"before the end")
        sock.shutdown(socket.SHUT_WR)
        for _ in range(20):
            await asyncio.sleep(0.001)
        assert events == []
        proto.transport.resume_reading()
        await wait_for(proto.eof)
        sock.close()
        proto.transport.close()
        server.close()
        await server.wait_closed()

    loop.run_until_complete(main())
    assert b"".join(e[1] for e in events if e[0] == "data") == b"before the end"
    assert events[-1] == ("eof",)


def test_data_waiting_in_the_socket_reaches_the_protocol_in_few_calls(loop):
    # 96 KiB in the socket when reading resumes: asyncio reads it in one
    # recv (256 KiB at most); zloop's readiness path in two (its first
    # read of a connection whose reads were small takes 16 KiB), and on
    # io_uring the six 16 KiB receives the resume brings at once go to the
    # protocol as one call, not six (a bulk transfer, a database's COPY,
    # reaches data_received in as few calls as on epoll).
    import fcntl
    import struct
    import termios

    size = 96 * 1024
    calls = []

    class Proto(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport
            transport.pause_reading()
            self.made = True

        def data_received(self, chunk):
            calls.append(len(chunk))
            if sum(calls) >= size:
                self.done.set_result(None)

    async def main():
        proto = Proto()
        proto.made = False
        proto.done = loop.create_future()
        server = await loop.create_server(lambda: proto, HOST, 0)
        sock = socket.create_connection(server.sockets[0].getsockname())
        while not proto.made:
            await asyncio.sleep(0.001)
        sock.sendall(payload(size))
        fd = proto.transport.get_extra_info("socket").fileno()
        for _ in range(2000):
            queued = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]
            if queued >= size:
                break
            await asyncio.sleep(0.001)
        assert queued == size
        proto.transport.resume_reading()
        await wait_for(proto.done)
        sock.close()
        proto.transport.close()
        server.close()
        await server.wait_closed()

    loop.run_until_complete(main())
    assert sum(calls) == size
    assert len(calls) <= 2, calls


def test_the_zloop_backend_in_use_is_the_one_asked_for(loop):
    # Guards the io_uring test run: a loop that quietly fell back to epoll
    # would make the tests above test the readiness path twice.
    if not hasattr(loop, "_backend"):
        pytest.skip("stock asyncio has no zloop backend")
    assert loop._backend == (os.environ.get("ZLOOP_BACKEND") or "epoll")
