"""TCP transports and servers (issue 3): create_server, create_connection, ..."""

import asyncio
import errno
import socket
import struct
import sys
import weakref

import pytest

from _net import (
    EchoProtocol,
    RecordingBufferedProtocol,
    RecordingProtocol,
    payload,
    unused_tcp_port,
    wait_for,
)
from _support import PY, open_fds, yield_passes

pytestmark = pytest.mark.network

HOST = "127.0.0.1"


async def _serve(loop, protocol_cls=RecordingProtocol, **kwargs):
    """A server on 127.0.0.1:0; returns (server, addr, list of server protocols)."""
    protocols = []

    def factory():
        proto = protocol_cls(loop)
        protocols.append(proto)
        return proto

    server = await loop.create_server(factory, HOST, 0, **kwargs)
    return server, server.sockets[0].getsockname()[:2], protocols


async def _connect(loop, addr, protocol_cls=RecordingProtocol, **kwargs):
    return await loop.create_connection(lambda: protocol_cls(loop), *addr, **kwargs)


async def _first(protocols):
    while not protocols:
        await asyncio.sleep(0)
    await wait_for(protocols[0].made)
    return protocols[0]


async def _close_server(server):
    server.close()
    await wait_for(server.wait_closed())


def test_echo_roundtrip_and_callback_order(loop):
    async def main():
        server, addr, served = await _serve(loop, EchoProtocol)
        tr, client = await _connect(loop, addr)
        assert await client.made is tr
        tr.write(b"hello")
        assert await wait_for(client.received(5)) == b"hello"
        tr.write_eof()
        assert await wait_for(client.lost) is None
        peer = served[0]
        assert await wait_for(peer.lost) is None
        await _close_server(server)
        return client.events, peer.events

    client_events, server_events = loop.run_until_complete(main())
    assert client_events == ["made", "data", "eof", "lost"]
    assert server_events == ["made", "data", "eof", "lost"]


def test_streams_echo(loop):
    async def handle(reader, writer):
        async for line in reader:
            writer.write(line.upper())
            await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def main():
        server = await asyncio.start_server(handle, HOST, 0)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        lines = []
        for word in (b"one\n", b"two\n", b"three\n"):
            writer.write(word)
            await writer.drain()
            lines.append(await wait_for(reader.readline()))
        writer.write_eof()
        assert await wait_for(reader.read()) == b""
        writer.close()
        await writer.wait_closed()
        await _close_server(server)
        return lines

    assert loop.run_until_complete(main()) == [b"ONE\n", b"TWO\n", b"THREE\n"]


def test_large_transfer_arrives_intact(loop):
    data = payload(4 * 1024 * 1024 + 7)

    async def main():
        server, addr, served = await _serve(loop, EchoProtocol)
        tr, client = await _connect(loop, addr)
        tr.write(data)
        got = await wait_for(client.received(len(data)))
        tr.close()
        await wait_for(client.lost)
        await _close_server(server)
        return got

    assert loop.run_until_complete(main()) == data


def test_buffered_protocol_receives_everything(loop):
    data = payload(1024 * 1024)

    async def main():
        server, addr, served = await _serve(
            loop, lambda lp: RecordingBufferedProtocol(lp, buffer_size=1000)
        )
        tr, _ = await _connect(loop, addr)
        tr.write(data)
        tr.write_eof()
        peer = await _first(served)
        await wait_for(peer.eof)
        tr.close()
        await _close_server(server)
        return peer

    peer = loop.run_until_complete(main())
    assert peer.data == data
    assert all(isinstance(hint, int) for hint in peer.sizes_asked)


def test_writelines_accepts_bytes_like_objects(loop):
    async def main():
        server, addr, served = await _serve(loop)
        tr, _ = await _connect(loop, addr)
        tr.writelines([b"a", bytearray(b"bc"), memoryview(b"def")])
        peer = await _first(served)
        got = await wait_for(peer.received(6))
        tr.close()
        await _close_server(server)
        return got

    assert loop.run_until_complete(main()) == b"abcdef"


def test_write_rejects_str(loop):
    async def main():
        server, addr, _ = await _serve(loop)
        tr, _ = await _connect(loop, addr)
        try:
            with pytest.raises(TypeError) as info:
                tr.write("text")
            return str(info.value)
        finally:
            tr.close()
            await _close_server(server)

    # asyncio 3.14 names the three types it takes.
    accepted = "a bytes, bytearray, or memoryview object" if PY >= (3, 14) else "a bytes-like object"
    assert loop.run_until_complete(main()) == f"data argument must be {accepted}, not 'str'"


def test_write_buffer_limits_and_flow_control(loop):
    high, low = 64 * 1024, 16 * 1024
    chunk = payload(1024 * 1024)

    async def main():
        server, addr, served = await _serve(loop)
        tr, client = await _connect(loop, addr)
        peer = await _first(served)
        peer.transport.pause_reading()  # the peer stops reading
        tr.set_write_buffer_limits(high=high, low=low)
        assert tr.get_write_buffer_limits() == (low, high)
        sent = 0
        for _ in range(256):  # the kernel's buffers fill long before 256 MB
            tr.write(chunk)
            sent += len(chunk)
            if client.paused.done():
                break
        assert client.paused.done(), "pause_writing never called"
        size_at_pause = client.paused.result()
        assert tr.get_write_buffer_size() > high
        peer.transport.resume_reading()
        size_at_resume = await wait_for(client.resumed)
        got = await wait_for(peer.received(sent))
        assert tr.get_write_buffer_size() == 0
        tr.close()
        await _close_server(server)
        return size_at_pause, size_at_resume, got, sent

    size_at_pause, size_at_resume, got, sent = loop.run_until_complete(main())
    assert size_at_pause > high
    assert size_at_resume <= low
    assert len(got) == sent
    assert got == chunk * (sent // len(chunk))


def test_bad_write_buffer_limits(loop):
    async def main():
        server, addr, _ = await _serve(loop)
        tr, _ = await _connect(loop, addr)
        try:
            with pytest.raises(ValueError) as info:
                tr.set_write_buffer_limits(high=1, low=2)
            return str(info.value)
        finally:
            tr.close()
            await _close_server(server)

    assert loop.run_until_complete(main()) == "high (1) must be >= low (2) must be >= 0"


def test_pause_and_resume_reading(loop):
    async def main():
        server, addr, served = await _serve(loop)
        tr, _ = await _connect(loop, addr)
        peer = await _first(served)
        assert peer.transport.is_reading()
        peer.transport.pause_reading()
        peer.transport.pause_reading()  # a second pause is a no-op
        assert not peer.transport.is_reading()
        tr.write(b"while paused")
        await yield_passes(10)
        during_pause = bytes(peer.data)
        peer.transport.resume_reading()
        peer.transport.resume_reading()
        assert peer.transport.is_reading()
        got = await wait_for(peer.received(12))
        tr.close()
        await _close_server(server)
        return during_pause, got

    assert loop.run_until_complete(main()) == (b"", b"while paused")


class _ReplyOnEof(RecordingProtocol):
    def eof_received(self):
        super().eof_received()
        self.transport.write(b"got:" + bytes(self.data))
        self.transport.close()
        return True


def test_write_eof_half_close(loop):
    async def main():
        server, addr, served = await _serve(loop, _ReplyOnEof)
        tr, client = await _connect(loop, addr)
        assert tr.can_write_eof() is True
        tr.write(b"abc")
        tr.write_eof()
        with pytest.raises(RuntimeError) as info:
            tr.write(b"more")
        assert str(info.value) == "Cannot call write() after write_eof()"
        assert await wait_for(client.lost) is None
        await _close_server(server)
        return bytes(client.data), client.events, str(info.value)

    data, events, _ = loop.run_until_complete(main())
    assert data == b"got:abc"
    assert events == ["made", "data", "eof", "lost"]


def test_eof_received_returning_true_keeps_the_transport_open(loop):
    async def main():
        server, addr, served = await _serve(loop)
        tr, client = await _connect(loop, addr)
        client.keep_open_on_eof = True
        peer = await _first(served)
        peer.transport.write_eof()
        await wait_for(client.eof)
        await yield_passes(5)
        still_open = not tr.is_closing() and not client.lost.done()
        tr.write(b"after eof")  # our half is still open
        got = await wait_for(peer.received(9))
        tr.close()
        await wait_for(client.lost)
        await _close_server(server)
        return still_open, got

    assert loop.run_until_complete(main()) == (True, b"after eof")


def test_close_flushes_buffered_data(loop):
    data = payload(2 * 1024 * 1024)

    async def main():
        server, addr, served = await _serve(loop)
        tr, client = await _connect(loop, addr)
        tr.write(data)
        tr.close()
        assert tr.is_closing()
        tr.close()  # closing twice is fine
        tr.write(b"ignored")  # writes after close() are dropped, not raised
        peer = await _first(served)
        await wait_for(peer.lost)
        assert await wait_for(client.lost) is None
        await _close_server(server)
        return bytes(peer.data), peer.events

    got, events = loop.run_until_complete(main())
    assert got == data
    assert events == ["made", "data", "eof", "lost"]


def test_abort_discards_buffered_data(loop):
    chunk = payload(1024 * 1024)

    async def main():
        server, addr, served = await _serve(loop)
        tr, client = await _connect(loop, addr)
        peer = await _first(served)
        peer.transport.pause_reading()
        sent = 0
        while tr.get_write_buffer_size() == 0 and sent < 256 * len(chunk):
            tr.write(chunk)
            sent += len(chunk)
        assert tr.get_write_buffer_size() > 0
        tr.abort()
        assert tr.is_closing()
        assert await wait_for(client.lost) is None
        peer.transport.resume_reading()
        await wait_for(peer.lost)
        await _close_server(server)
        return len(peer.data), sent

    received, sent = loop.run_until_complete(main())
    assert received < sent


def test_served_connections_have_nagle_off_too(loop):
    # asyncio's _set_nodelay runs on accepted TCP sockets as on connected
    # ones; a Unix server's connections have no such option.
    async def main():
        made = loop.create_future()

        class Served(asyncio.Protocol):
            def connection_made(self, tr):
                sock = tr.get_extra_info("socket")
                made.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0)

        server = await loop.create_server(Served, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            nodelay = await asyncio.wait_for(made, 5)
        server.close()
        await server.wait_closed()
        return nodelay

    assert loop.run_until_complete(main()) is True


def test_get_extra_info(loop):
    async def main():
        server, addr, _ = await _serve(loop)
        tr, _ = await _connect(loop, addr)
        try:
            sock = tr.get_extra_info("socket")
            info = {
                "family": sock.family,
                "type": sock.type,
                "fileno ok": sock.fileno() >= 0,
                "sockname": tr.get_extra_info("sockname") == sock.getsockname(),
                "peername": tr.get_extra_info("peername"),
                "nodelay": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0,
                "missing": tr.get_extra_info("no such key"),
                "default": tr.get_extra_info("no such key", "dflt"),
            }
            return info, addr
        finally:
            tr.close()
            await _close_server(server)

    info, addr = loop.run_until_complete(main())
    assert info == {
        "family": socket.AF_INET,
        "type": socket.SOCK_STREAM,
        "fileno ok": True,
        "sockname": True,
        "peername": addr,
        # asyncio turns Nagle off on every TCP transport.
        "nodelay": True,
        "missing": None,
        "default": "dflt",
    }


def test_transport_is_an_asyncio_transport_and_patchable(loop):
    async def main():
        server, addr, served = await _serve(loop)
        tr, client = await _connect(loop, addr)
        try:
            assert isinstance(tr, asyncio.Transport)
            assert isinstance(tr, asyncio.BaseTransport)
            assert isinstance(tr, asyncio.ReadTransport)
            assert isinstance(tr, asyncio.WriteTransport)
            assert tr.get_protocol() is client
            ref = weakref.ref(tr)
            assert ref() is tr
            # Instrumentation libraries replace methods on the instance.
            written = []
            original = tr.write
            tr.write = written.append
            tr.write(b"intercepted")
            assert written == [b"intercepted"]
            tr.write = original
            tr.write(b"real")
            peer = await _first(served)
            return await wait_for(peer.received(4))
        finally:
            tr.close()
            await _close_server(server)

    assert loop.run_until_complete(main()) == b"real"


def test_set_protocol_switches_the_receiver(loop):
    async def main():
        server, addr, served = await _serve(loop)
        tr, first = await _connect(loop, addr)
        second = RecordingProtocol(loop)
        tr.set_protocol(second)
        assert tr.get_protocol() is second
        peer = await _first(served)
        peer.transport.write(b"to second")
        got = await wait_for(second.received(9))
        tr.close()
        await wait_for(second.lost)
        await _close_server(server)
        return got, bytes(first.data), first.lost.done()

    assert loop.run_until_complete(main()) == (b"to second", b"", False)


def test_transport_is_released_after_close(loop):
    async def main():
        server, addr, served = await _serve(loop)
        tr, client = await _connect(loop, addr)
        ref = weakref.ref(tr)
        tr.close()
        await wait_for(client.lost)
        client.transport = None
        del tr
        await _close_server(server)
        for proto in served:
            await wait_for(proto.lost)
            proto.transport = None
        return ref

    ref = loop.run_until_complete(main())
    import gc

    gc.collect()
    assert ref() is None


def test_peer_reset_gives_connection_reset_error(loop):
    async def main():
        with socket.create_server((HOST, 0)) as listener:
            tr, client = await _connect(loop, listener.getsockname()[:2])
            conn, _ = listener.accept()  # already queued: returns at once
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()  # linger 0: the kernel sends RST
            exc = await wait_for(client.lost)
            return exc, client.events

    exc, events = loop.run_until_complete(main())
    assert isinstance(exc, ConnectionResetError)
    assert exc.errno == errno.ECONNRESET
    assert events == ["made", "lost"]


def test_connection_refused(loop):
    port = unused_tcp_port()

    async def main():
        with pytest.raises(ConnectionRefusedError) as info:
            await _connect(loop, (HOST, port))
        return info.value

    exc = loop.run_until_complete(main())
    assert exc.errno == errno.ECONNREFUSED


def test_connection_refused_error_is_not_kept_alive_by_a_list(loop):
    # anyio's test_happy_eyeballs_refcycles (after CPython gh-124859): the
    # error create_connection raises is referred to by nothing but its
    # catcher. Its traceback holds the frames it passed through, so a frame
    # that kept the list of collected errors would keep that list, and so a
    # second reference to the error, alive for as long as the error is.
    # Futures and tasks that finished with it are the loop's business (which
    # ones are still around differs between Pythons): only they are allowed.
    import gc

    port = unused_tcp_port()

    async def attempt():
        await loop.create_connection(asyncio.Protocol, HOST, port)

    async def main():
        try:
            await loop.create_task(attempt())
        except ConnectionRefusedError as e:
            exc = e
        gc.collect()
        # From 3.14 a coroutine's frame lives inside the coroutine object, so
        # `main` itself, whose local `exc` is, shows as a referrer.
        me = sys._getframe().f_code
        return [r for r in gc.get_referrers(exc)
                if not isinstance(r, asyncio.Future) and getattr(r, "cr_code", None) is not me]

    assert loop.run_until_complete(main()) == []


def test_data_received_exception_is_fatal_for_the_transport(loop):
    class Exploding(RecordingProtocol):
        def data_received(self, data):
            raise ZeroDivisionError("in data_received")

    contexts = []
    loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))

    async def main():
        server, addr, served = await _serve(loop, Exploding)
        tr, client = await _connect(loop, addr)
        tr.write(b"boom")
        peer = await _first(served)
        exc = await wait_for(peer.lost)
        await wait_for(client.lost)
        await _close_server(server)
        return exc, peer

    exc, peer = loop.run_until_complete(main())
    assert isinstance(exc, ZeroDivisionError)
    assert len(contexts) == 1
    assert contexts[0]["message"] == "Fatal error: protocol.data_received() call failed."
    assert contexts[0]["protocol"] is peer
    assert contexts[0]["transport"] is peer.transport


def test_create_connection_with_sock_and_local_addr(loop):
    async def main():
        server, addr, served = await _serve(loop, EchoProtocol)
        raw = socket.create_connection(addr)
        raw.setblocking(False)
        tr1, c1 = await _connect(loop, (None, None), sock=raw)
        local_port = unused_tcp_port()
        tr2, c2 = await _connect(loop, addr, local_addr=(HOST, local_port))
        sockname = tr2.get_extra_info("sockname")
        tr1.write(b"one")
        tr2.write(b"two")
        got = (await wait_for(c1.received(3)), await wait_for(c2.received(3)))
        tr1.close()
        tr2.close()
        await _close_server(server)
        return got, sockname, local_port

    got, sockname, local_port = loop.run_until_complete(main())
    assert got == (b"one", b"two")
    assert sockname == (HOST, local_port)


def test_create_connection_host_and_sock_conflict(loop):
    async def main():
        with socket.socket() as s:
            with pytest.raises(ValueError) as info:
                await loop.create_connection(asyncio.Protocol, HOST, 1, sock=s)
            return str(info.value)

    assert loop.run_until_complete(main()) == "host/port and sock can not be specified at the same time"


def test_connect_accepted_socket(loop):
    async def main():
        with socket.create_server((HOST, 0)) as listener:
            client_tr, client = await _connect(loop, listener.getsockname()[:2])
            conn, _ = listener.accept()
            conn.setblocking(False)
            tr, proto = await loop.connect_accepted_socket(lambda: EchoProtocol(loop), conn)
            client_tr.write(b"accepted")
            got = await wait_for(client.received(8))
            client_tr.close()
            await wait_for(proto.lost)
            return got, isinstance(tr, asyncio.Transport)

    assert loop.run_until_complete(main()) == (b"accepted", True)


def test_loop_sendfile_over_tcp(loop, tmp_path):
    data = payload(300_000)
    path = tmp_path / "blob"
    path.write_bytes(data)

    async def main():
        server, addr, served = await _serve(loop)
        tr, _ = await _connect(loop, addr)
        with open(path, "rb") as f:
            sent = await wait_for(loop.sendfile(tr, f, offset=100, count=200_000))
            position = f.tell()
        peer = await _first(served)
        got = await wait_for(peer.received(sent))
        tr.close()
        await _close_server(server)
        return sent, position, got

    sent, position, got = loop.run_until_complete(main())
    assert sent == 200_000
    assert position == 200_100
    assert got == data[100:200_100]


# -- Server API ------------------------------------------------------------------


def test_server_attributes(loop):
    async def main():
        server, addr, _ = await _serve(loop)
        info = {
            "abstract": isinstance(server, asyncio.AbstractServer),
            "loop": server.get_loop() is loop,
            "serving": server.is_serving(),
            "nsockets": len(server.sockets),
            "host": server.sockets[0].getsockname()[0],
            "family": server.sockets[0].family,
        }
        server.close()
        info["serving after close"] = server.is_serving()
        info["sockets after close"] = tuple(server.sockets)
        await wait_for(server.wait_closed())
        return info

    assert loop.run_until_complete(main()) == {
        "abstract": True,
        "loop": True,
        "serving": True,
        "nsockets": 1,
        "host": HOST,
        "family": socket.AF_INET,
        "serving after close": False,
        "sockets after close": (),
    }


def test_start_serving_false_defers_listening(loop):
    async def main():
        server, addr, served = await _serve(loop, start_serving=False)
        assert not server.is_serving()
        with pytest.raises(ConnectionRefusedError):
            await _connect(loop, addr)
        await server.start_serving()
        assert server.is_serving()
        tr, _ = await _connect(loop, addr)
        await _first(served)
        tr.close()
        await _close_server(server)
        return len(served)

    assert loop.run_until_complete(main()) == 1


def test_serve_forever_and_cancel(loop):
    async def main():
        server, addr, served = await _serve(loop, start_serving=False)
        task = loop.create_task(server.serve_forever())
        await yield_passes(2)
        assert server.is_serving()
        with pytest.raises(RuntimeError, match="is already being awaited on serve_forever"):
            await server.serve_forever()
        tr, _ = await _connect(loop, addr)
        await _first(served)
        tr.close()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return server.is_serving()

    assert loop.run_until_complete(main()) is False


def test_cancelled_serve_forever_closes_the_clients_on_314(loop):
    # asyncio 3.14: cancelling serve_forever() closes the server's client
    # transports too, so that it does not wait on a client that hangs on;
    # before, the clients stayed open (and serve_forever() waited for them).
    async def main():
        server, addr, served = await _serve(loop, start_serving=False)
        task = loop.create_task(server.serve_forever())
        await yield_passes(2)
        tr, _ = await _connect(loop, addr)
        proto = await _first(served)
        task.cancel()
        if PY < (3, 14):
            await yield_passes(5)
            still_open = not proto.lost.done()
            tr.close()
        else:
            still_open = False
        with pytest.raises(asyncio.CancelledError):
            await wait_for(task)
        await wait_for(proto.lost)
        tr.close()
        return still_open

    assert loop.run_until_complete(main()) is (PY < (3, 14))


def test_serve_forever_on_a_closed_server_raises(loop):
    async def main():
        server, _, _ = await _serve(loop)
        await _close_server(server)
        with pytest.raises(RuntimeError, match="is closed"):
            await server.serve_forever()

    loop.run_until_complete(main())


def test_server_as_async_context_manager(loop):
    async def main():
        server, addr, _ = await _serve(loop)
        async with server as entered:
            assert entered is server
            assert server.is_serving()
        return server.is_serving(), addr

    serving, addr = loop.run_until_complete(main())
    assert serving is False

    async def connect():
        with pytest.raises(ConnectionRefusedError):
            await _connect(loop, addr)

    loop.run_until_complete(connect())


@pytest.mark.skipif(sys.version_info < (3, 12, 1), reason="wait_closed() waits for connections from 3.12.1")
def test_wait_closed_waits_for_open_connections(loop):
    async def main():
        server, addr, served = await _serve(loop)
        tr, client = await _connect(loop, addr)
        peer = await _first(served)
        server.close()
        waiter = loop.create_task(server.wait_closed())
        await yield_passes(5)
        waiting = not waiter.done()
        peer.transport.close()
        await wait_for(waiter)
        await wait_for(client.lost)
        return waiting

    assert loop.run_until_complete(main()) is True


@pytest.mark.skipif(PY < (3, 13), reason="Server.close_clients/abort_clients are new in 3.13")
@pytest.mark.parametrize("method", ["close_clients", "abort_clients"])
def test_server_close_and_abort_clients(loop, method):
    async def main():
        server, addr, served = await _serve(loop)
        conns = [await _connect(loop, addr) for _ in range(3)]
        while len(served) < 3:
            await asyncio.sleep(0)
        server.close()
        getattr(server, method)()
        for _, client in conns:
            await wait_for(client.lost)
        await wait_for(server.wait_closed())
        return [p.lost.done() for p in served]

    assert loop.run_until_complete(main()) == [True, True, True]


def test_server_with_a_prebound_socket(loop):
    async def main():
        sock = socket.socket()
        sock.bind((HOST, 0))
        server = await loop.create_server(lambda: EchoProtocol(loop), sock=sock)
        addr = server.sockets[0].getsockname()[:2]
        assert addr == sock.getsockname()
        tr, client = await _connect(loop, addr)
        tr.write(b"pre")
        got = await wait_for(client.received(3))
        tr.close()
        await _close_server(server)
        return got, sock.fileno()

    got, fileno = loop.run_until_complete(main())
    assert got == b"pre"
    assert fileno == -1  # the server closed the socket it was given


def test_address_in_use(loop):
    async def main():
        server, addr, _ = await _serve(loop)
        try:
            with pytest.raises(OSError) as info:
                await loop.create_server(asyncio.Protocol, *addr, reuse_address=False)
            return info.value.errno
        finally:
            await _close_server(server)

    assert loop.run_until_complete(main()) == errno.EADDRINUSE


def test_many_connections_leave_no_descriptors(loop):
    async def main():
        server, addr, served = await _serve(loop, EchoProtocol)
        conns = [await _connect(loop, addr) for _ in range(20)]
        for i, (tr, _) in enumerate(conns):
            tr.write(b"%d" % i)
        for i, (tr, client) in enumerate(conns):
            await wait_for(client.received(len(b"%d" % i)))
            tr.close()
            await wait_for(client.lost)
        for proto in served:
            await wait_for(proto.lost)
        await _close_server(server)

    loop.run_until_complete(main())  # warm-up: executor threads, caches
    before = open_fds()
    loop.run_until_complete(main())
    assert open_fds() - before == set()


_request_var = __import__("contextvars").ContextVar("request_var")


class _ContextRecordingProtocol(RecordingProtocol):
    """Records the value of ``_request_var`` seen by each read-side callback."""

    def __init__(self, loop):
        super().__init__(loop)
        self.seen = []

    def data_received(self, data):
        self.seen.append(("data", _request_var.get("MISSING")))
        super().data_received(data)

    def eof_received(self):
        self.seen.append(("eof", _request_var.get("MISSING")))
        return super().eof_received()


def test_read_callbacks_run_in_the_context_of_the_caller(loop):
    # As asyncio: data_received/eof_received run in a copy of the context
    # current when the server (or the client connection) was created, so a
    # ContextVar set around create_server is visible there (uvicorn relies on
    # this to carry context into each request's task); the loop's own context
    # stays untouched.
    async def main():
        _request_var.set("server-side")
        server, addr, served = await _serve(loop, _ContextRecordingProtocol)

        async def client():
            _request_var.set("client-side")
            tr, proto = await _connect(loop, addr, EchoProtocol)
            return tr

        tr = await asyncio.create_task(client())
        sproto = await _first(served)
        tr.write(b"ping")
        await sproto.received(4)
        tr.write_eof()
        await wait_for(sproto.eof)
        tr.close()
        await _close_server(server)
        return sproto.seen

    assert loop.run_until_complete(main()) == [("data", "server-side"), ("eof", "server-side")]
    assert _request_var.get("outside") == "outside"


def test_client_read_callbacks_see_the_connecting_context(loop):
    async def main():
        server, addr, served = await _serve(loop, EchoProtocol)
        _request_var.set("client-side")
        tr, proto = await _connect(loop, addr, _ContextRecordingProtocol)
        tr.write(b"pong")
        await proto.received(4)
        tr.close()
        await _close_server(server)
        return proto.seen

    assert loop.run_until_complete(main()) == [("data", "client-side")]


class _PausingContextProtocol(_ContextRecordingProtocol):
    """Pauses reading after the first data_received."""

    def data_received(self, data):
        super().data_received(data)
        if len(self.seen) == 1:
            self.transport.pause_reading()


def test_resume_reading_from_another_context(loop):
    # gh-140947: on 3.15 a transport keeps its own context (the server's)
    # for data_received after resume_reading() is called from a task with
    # other contextvars; before 3.15 the resuming caller's context is taken.
    async def main():
        _request_var.set("server-side")
        server, addr, served = await _serve(loop, _PausingContextProtocol)
        tr, _ = await _connect(loop, addr)
        sproto = await _first(served)
        tr.write(b"a")
        await sproto.received(1)
        assert sproto.transport._paused and not sproto.transport.is_reading()

        async def resume():
            _request_var.set("resumer")
            sproto.transport.resume_reading()

        await asyncio.create_task(resume())
        assert not sproto.transport._paused
        tr.write(b"b")
        await sproto.received(2)
        seen = list(sproto.seen)
        tr.close()
        await _close_server(server)
        return seen

    after = "server-side" if sys.version_info >= (3, 15) else "resumer"
    assert loop.run_until_complete(main()) == [("data", "server-side"), ("data", after)]


class _LostContextProtocol(RecordingProtocol):
    """Records the value of ``_request_var`` connection_lost sees."""

    def connection_lost(self, exc):
        self.lost_sees = _request_var.get("MISSING")
        super().connection_lost(exc)


def test_connection_lost_after_close_from_another_context(loop):
    # gh-140947: on 3.15 connection_lost runs in the transport's own context
    # even when close() comes from a task with other contextvars; before
    # 3.15 it runs in a copy of the closing caller's context.
    async def main():
        _request_var.set("server-side")
        server, addr, served = await _serve(loop, _LostContextProtocol)
        tr, _ = await _connect(loop, addr)
        sproto = await _first(served)

        async def close():
            _request_var.set("closer")
            sproto.transport.close()

        await asyncio.create_task(close())
        await wait_for(sproto.lost)
        tr.close()
        await _close_server(server)
        return sproto.lost_sees

    expected = "server-side" if sys.version_info >= (3, 15) else "closer"
    assert loop.run_until_complete(main()) == expected


class _FakeTransport:
    """Just enough of a transport for loop.sendfile()'s up-front checks."""

    def __init__(self, mode=None):
        if mode is not None:
            self._sendfile_compatible = mode

    def is_closing(self):
        return False


def test_loop_sendfile_follows_the_transports_sendfile_mode(loop):
    # As asyncio: a transport without _sendfile_compatible is refused, and
    # fallback=False refuses one that can only take the chunked path.
    from asyncio import constants

    async def main():
        errors = []
        for transport, fallback in [
            (_FakeTransport(), True),
            (_FakeTransport(constants._SendfileMode.FALLBACK), False),
        ]:
            with pytest.raises(RuntimeError) as info:
                await loop.sendfile(transport, None, fallback=fallback)
            errors.append(str(info.value).split(" for transport")[0])
        return errors

    assert loop.run_until_complete(main()) == [
        "sendfile is not supported",
        "fallback is disabled and native sendfile is not supported",
    ]


@pytest.mark.skipif(
    not (3, 12) <= sys.version_info < (3, 13),
    reason="3.12 only: Server._attach() takes the transport from 3.13 on, and "
    "3.11's wait_closed() returns at once after close()",
)
def test_bare_server_attach_holds_wait_closed(loop):
    # CPython 3.12's test_server (TestServer2) holds a server open with the
    # private, then argument-less Server._attach() and releases it with
    # _detach(): wait_closed() returns only after both close() and _detach().
    async def main():
        server = await loop.create_server(asyncio.Protocol, HOST, 0)
        server._attach()
        waiter = asyncio.ensure_future(server.wait_closed())
        server.close()
        await yield_passes(3)
        held = not waiter.done()
        server._detach()
        await wait_for(waiter)
        return held

    assert loop.run_until_complete(main()) is True


# -- reads: zloop hands a read's buffer to data_received (its 16 KiB lent
# -- buffer for small reads, its 256 KiB spare for bulk ones) and takes it
# -- back for the next read when the protocol kept no reference.


@pytest.mark.parametrize(
    "paced",
    [0, 40 * 1024, 1000, 16 * 1024, 20 * 1024],
    ids=["bulk", "paced40k", "paced1000", "paced16k", "paced20k"],
)
@pytest.mark.parametrize("keep", ["drop", "keep", "alternate"])
def test_reads_are_intact_whether_or_not_the_protocol_keeps_them(loop, keep, paced):
    # bulk: one 24 MB write, reads as large as the socket gives; paced:
    # messages of one size sent one at a time, reads of about that size:
    # 40 KiB (the range zloop reads into its spare, or to an exact size
    # once a protocol has kept one), 1000 bytes (its lent buffer), 16 KiB
    # (fills the lent buffer), 20 KiB (split: the lent buffer, then the
    # rest into the spare).
    data = payload(24 * 1024 * 1024 if not paced else 200 * paced)
    kept = []

    class Sink(asyncio.Protocol):
        def __init__(self):
            self.done = loop.create_future()
            self.n = 0
            self.calls = 0

        def data_received(self, chunk):
            # A stale cached hash or a buffer reused under a kept chunk
            # would show here or in the final comparison.
            assert hash(chunk) == hash(bytes(chunk))
            start = self.n
            self.n += len(chunk)
            assert chunk == data[start:self.n]
            self.calls += 1
            if keep == "keep" or (keep == "alternate" and self.calls % 2):
                kept.append((start, chunk))

        def eof_received(self):
            self.done.set_result(None)

    async def main():
        sink = Sink()
        server = await loop.create_server(lambda: sink, HOST, 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection(HOST, port)
        if paced:
            for i in range(0, len(data), paced):
                writer.write(data[i:i + paced])
                await writer.drain()
                await asyncio.sleep(0)
        else:
            writer.write(data)
        writer.write_eof()
        await writer.drain()
        await wait_for(sink.done)
        writer.close()
        server.close()
        await server.wait_closed()
        return sink.n

    assert loop.run_until_complete(main()) == len(data)
    for start, chunk in kept:
        assert chunk == data[start:start + len(chunk)]
    if keep == "keep":
        assert b"".join(c for _, c in kept) == data


@pytest.mark.parametrize("size", [100, 1000, 16 * 1024, 20 * 1024])
@pytest.mark.parametrize("keep", ["drop", "alternate"])
def test_an_echo_of_each_read_is_intact_whether_or_not_the_protocol_keeps_it(loop, keep, size):
    # data_received writes the bytes it was handed straight back (zloop
    # holds such a write until the callback returns, then reuses the
    # buffer for the next read only if nothing else holds it); the peer
    # checks the echo, and the chunks kept are checked at the end.
    data = payload(300 * size)
    kept = []

    class Echo(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport
            self.n = 0

        def data_received(self, chunk):
            start = self.n
            self.n += len(chunk)
            self.transport.write(chunk)
            self.calls = getattr(self, "calls", 0) + 1
            if keep == "alternate" and self.calls % 2:
                kept.append((start, chunk))

    async def main():
        server = await loop.create_server(Echo, HOST, 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection(HOST, port)
        got = bytearray()
        for i in range(0, len(data), size):
            writer.write(data[i:i + size])
            while len(got) < i + size:
                got += await asyncio.wait_for(reader.read(1 << 20), 10)
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        return bytes(got)

    assert loop.run_until_complete(main()) == data
    for start, chunk in kept:
        assert chunk == data[start:start + len(chunk)]


def test_io_runs_after_callbacks_queued_before_the_poll(loop):
    """A callback scheduled before the pass that sees data runs before
    data_received/datagram_received, as asyncio queues its I/O handles."""
    order = []

    class Stream(asyncio.Protocol):
        def data_received(self, data):
            order.append("data_received")

    class Datagram(asyncio.DatagramProtocol):
        def datagram_received(self, data, addr):
            order.append("datagram_received")

    async def main():
        a, b = socket.socketpair()
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tr, _ = await loop.connect_accepted_socket(Stream, b)
        dg, _ = await loop.create_datagram_endpoint(Datagram, local_addr=(HOST, 0))
        await asyncio.sleep(0.01)
        a.send(b"x")
        udp.sendto(b"y", dg.get_extra_info("sockname"))
        loop.call_soon(order.append, "call_soon")
        for _ in range(100):
            if len(order) == 3:
                break
            await asyncio.sleep(0.01)
        tr.close()
        dg.close()
        a.close()
        udp.close()
        await asyncio.sleep(0)

    loop.run_until_complete(main())
    assert order == ["call_soon", "data_received", "datagram_received"]
