"""Memory a burst of buffered writes took comes back once it is freed
(loop/trim.zig): connections whose peers never read, a server that ignores
pause_writing and writes on, then every connection closes. glibc keeps the
freed buffers in its heap (on stock asyncio too: a 10,000-connection burst
leaves it 1.4 GB larger for good); zloop hands them back when the loop next
waits. Only zloop's cases assert it: asyncio's is skipped, as asyncio
keeps the memory (docs/differences.md).
"""

import asyncio
import platform
import socket

import pytest

from _support import RSS_UNKNOWN, rss_bytes

pytestmark = [
    pytest.mark.network,
    pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's heap only"),
]

CONNECTIONS = 120
PER_CONNECTION = 1 << 20  # 120 MiB buffered in all


# Small objects the program keeps, allocated between the buffers (as a
# server's own state grows while it serves): the heap cannot shrink from
# its top past them once the buffers are freed, only a trim gives the holes
# back.
kept = []


class Flood(asyncio.Protocol):
    def connection_made(self, transport):
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        # Many writes, each its own object, as a server writing a stream
        # in chunks: the buffer holds them all.
        for _ in range(PER_CONNECTION // 65536):
            transport.write(bytes(65536))
            kept.append(bytes(1024))


async def _flooded(loop, server, port):
    """CONNECTIONS clients that never read, each served by a Flood: the
    server's buffers hold what it wrote them."""
    clients = []
    for _ in range(CONNECTIONS):
        c = socket.socket()
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.setblocking(False)
        await loop.sock_connect(c, ("127.0.0.1", port))
        clients.append(c)
    while server._active_count < CONNECTIONS:  # noqa: SLF001  (asyncio's own count)
        await asyncio.sleep(0.01)
    return clients


def test_a_burst_of_buffered_writes_is_given_back(loop, loop_name):
    if loop_name != "zloop":
        pytest.skip("asyncio keeps freed write buffers in glibc's heap")
    if rss_bytes() is None:
        pytest.skip(RSS_UNKNOWN)
    from zloop import _zloop

    async def main():
        server = await loop.create_server(Flood, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        await asyncio.sleep(0.1)
        before = rss_bytes()
        trims = _zloop._trims()
        clients = await _flooded(loop, server, port)
        await asyncio.sleep(0.2)
        peak = rss_bytes()
        for c in clients:
            c.close()
        while server._active_count:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # the loop waits: the trim
        after = rss_bytes()
        server.close()
        await server.wait_closed()
        return before, peak, after, _zloop._trims() - trims

    try:
        before, peak, after, trims = loop.run_until_complete(main())
    finally:
        kept.clear()
    buffered = CONNECTIONS * PER_CONNECTION
    assert peak - before > buffered // 2, "the writes were not buffered: nothing to give back"
    assert trims >= 1
    assert after - before < buffered // 4, (before, peak, after)


def test_the_trim_waits_for_a_quiet_loop(loop, loop_name):
    # A trim holds the loop thread for as long as it walks the heap (tens
    # of ms after a burst of small writes): it runs only once the loop has
    # waited a while with nothing to do, never while traffic goes on.
    if loop_name != "zloop":
        pytest.skip("asyncio never trims")
    from zloop import _zloop

    async def main():
        server = await loop.create_server(Flood, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        trims = _zloop._trims()
        clients = await _flooded(loop, server, port)
        for c in clients:
            c.close()
        # Traffic: a timer every 2 ms for half a second, the buffers freed.
        for _ in range(250):
            await asyncio.sleep(0.002)
        busy = _zloop._trims() - trims
        await asyncio.sleep(0.3)  # quiet
        quiet = _zloop._trims() - trims - busy
        server.close()
        await server.wait_closed()
        return busy, quiet

    try:
        busy, quiet = loop.run_until_complete(main())
    finally:
        kept.clear()
    assert (busy, quiet) == (0, 1)
