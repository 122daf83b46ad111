"""Long runs of short connections leave nothing behind (issue 3: no leaks).

Each case opens, uses and closes many connections of one kind, one after
another: a warm-up batch, then a counted one. Between the two it compares
the live objects the collector knows, by type, and the process's RSS. A
transport, protocol, handle, future or buffer kept by the loop once per
connection shows as a type grown by about the batch's size (the allowance
is an eighth of it), and memory the native code keeps per
connection (a receive buffer, a registration) as RSS grown by more than
the allowance. The same cases run on stock asyncio.
"""

import asyncio
import collections
import gc
import socket

import pytest

from _net import wait_for
from _support import no_leaks, rss_bytes, rss_growth, tls_contexts  # noqa: F401 (no_leaks: autouse)

pytestmark = [
    pytest.mark.network,
    pytest.mark.filterwarnings("error::ResourceWarning"),
]

HOST = "127.0.0.1"
# A message bigger than one lent or ring buffer (16 KiB), so each
# connection takes the paths that hand buffers out and back.
MESSAGE = bytes(range(256)) * 96  # 24 KiB
# Growth allowed after the counted batch: per type, an eighth of the
# batch's connections (a few dozen weakrefs and sets come and go with
# asyncio's task registry whatever the loop), and in RSS.
TYPE_SHARE = 8
RSS_ALLOWANCE = 4 << 20


def live_types():
    # Counted by hand: Counter(iterable) asks isinstance(iterable, Mapping),
    # and after a library registered an ABC (aiohttp's import does) that
    # question refills the negative caches of every Mapping subclass, a
    # weakref each: the census would count its own side effect.
    gc.collect()
    counts = collections.defaultdict(int)
    for o in gc.get_objects():
        counts[type(o).__qualname__] += 1
    return counts


def grown_types(before, after, allowance):
    return {name: after[name] - before[name] for name in after
            if after[name] - before[name] > allowance}


def assert_flat(loop, batch, warm_up, counted):
    """Runs `batch(n)` for `warm_up` connections, then for `counted` more;
    no type may grow beyond its allowance, nor RSS beyond its."""
    loop.run_until_complete(batch(warm_up))
    types, rss = live_types(), rss_bytes()
    loop.run_until_complete(batch(counted))
    assert grown_types(types, live_types(), counted // TYPE_SHARE) == {}
    rss = rss_growth(rss)
    assert rss is None or rss < RSS_ALLOWANCE, f"RSS grew by {rss >> 10} KiB over {counted} connections"


@pytest.fixture(scope="module")
def contexts():
    return tls_contexts(HOST)


def _stream_batch(kind, path, contexts):
    server_ctx, client_ctx = contexts if kind == "tls" else (None, None)
    handlers = set()

    async def _echo(reader, writer):
        handlers.add(asyncio.current_task())
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()
            await writer.wait_closed()

    async def batch(n):
        if kind == "unix":
            server = await asyncio.start_unix_server(_echo, path)
        else:
            server = await asyncio.start_server(_echo, HOST, 0, ssl=server_ctx)
        port = None if kind == "unix" else server.sockets[0].getsockname()[1]
        async with server:
            for _ in range(n):
                if kind == "unix":
                    reader, writer = await asyncio.open_unix_connection(path)
                else:
                    reader, writer = await asyncio.open_connection(
                        HOST, port, ssl=client_ctx,
                        server_hostname="localhost" if client_ctx else None)
                writer.write(MESSAGE)
                await writer.drain()
                got = await wait_for(reader.readexactly(len(MESSAGE)))
                assert got == MESSAGE
                writer.close()
                await writer.wait_closed()
        # Before 3.12 the server's wait_closed() does not wait for them.
        await wait_for(asyncio.gather(*handlers))
        handlers.clear()
    return batch


@pytest.mark.parametrize("kind, warm_up, counted", [
    ("tcp", 100, 600),
    ("unix", 100, 600),
    ("tls", 40, 200),
])
def test_stream_connections_leave_nothing_behind(loop, tmp_path, contexts, kind, warm_up,
                                                  counted):
    assert_flat(loop, _stream_batch(kind, str(tmp_path / "s"), contexts), warm_up, counted)


class _Echo(asyncio.DatagramProtocol):
    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        self.transport.sendto(data, addr)


class _Client(asyncio.DatagramProtocol):
    def __init__(self, loop):
        self.got = loop.create_future()
        self.lost = loop.create_future()

    def datagram_received(self, data, addr):
        if not self.got.done():
            self.got.set_result(data)

    def connection_lost(self, exc):
        self.lost.set_result(exc)


def test_datagram_endpoints_leave_nothing_behind(loop):
    async def batch(n):
        server, _ = await loop.create_datagram_endpoint(_Echo, local_addr=(HOST, 0))
        addr = server.get_extra_info("sockname")
        try:
            for _ in range(n):
                tr, client = await loop.create_datagram_endpoint(
                    lambda: _Client(loop), remote_addr=addr)
                tr.sendto(MESSAGE[:8192])
                assert await wait_for(client.got) == MESSAGE[:8192]
                tr.close()
                await wait_for(client.lost)
        finally:
            server.close()
            await asyncio.sleep(0)

    assert_flat(loop, batch, 100, 600)


def test_sock_calls_leave_nothing_behind(loop):
    async def one():
        a, b = socket.socketpair()
        with a, b:
            a.setblocking(False)
            b.setblocking(False)
            reading = asyncio.ensure_future(loop.sock_recv(b, len(MESSAGE)))
            await asyncio.sleep(0)  # the receive waits
            await loop.sock_sendall(a, MESSAGE)
            got = bytearray(await wait_for(reading))
            while len(got) < len(MESSAGE):
                got += await wait_for(loop.sock_recv(b, len(MESSAGE)))
            assert got == MESSAGE
            # A cancelled wait is released too.
            pending = asyncio.ensure_future(loop.sock_recv(b, 10))
            await asyncio.sleep(0)
            pending.cancel()
            with pytest.raises(asyncio.CancelledError):
                await pending

    async def batch(n):
        for _ in range(n):
            await one()

    assert_flat(loop, batch, 100, 600)
