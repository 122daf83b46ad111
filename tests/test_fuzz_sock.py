"""Randomised full-duplex traffic through the ``sock_*`` methods (issue 3).

Each case is one seed. The seed draws a connection (TCP through
``sock_connect``/``sock_accept``, or a Unix socketpair), its send buffers
(the kernel's defaults, or shrunk so that sends wait often),
and for each end a writer task (``sock_sendall`` of chunks of every size up
to 256 KiB as bytes, bytearray or memoryview, with naps and yields between,
then ``shutdown(SHUT_WR)``) and a reader task at the same time on the same
socket (``sock_recv(n)`` or ``sock_recv_into`` of random sizes, with naps,
until end of file). A socket then has a receive and a send waiting at once,
in both directions. The same seed runs on stock asyncio and on zloop; the
rules:

- each direction's bytes arrive exactly, in order, and end with end of
  file;
- no descriptor outlives the case and nothing warns of an unclosed
  resource.

``ZLOOP_FUZZ_SEEDS`` picks the seeds, as for ``test_fuzz_streams.py``.
"""

import asyncio
import random
import socket

import pytest

from _fuzz import kind, seeds  # noqa: F401 (kind: a fixture)
from _net import wait_for
from _support import no_leaks  # noqa: F401 (autouse)

pytestmark = [
    pytest.mark.network,
    pytest.mark.filterwarnings("error::ResourceWarning"),
]

HOST = "127.0.0.1"
_TIMEOUT = 20





async def _connect(loop, kind):
    if kind == "unix":
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        return a, b
    with socket.socket() as listener:
        listener.bind((HOST, 0))
        listener.listen(1)
        listener.setblocking(False)
        client = socket.socket()
        client.setblocking(False)
        try:
            accepted, (server, _) = await wait_for(asyncio.gather(
                loop.sock_connect(client, listener.getsockname()),
                loop.sock_accept(listener),
            ), _TIMEOUT)
        except BaseException:
            client.close()
            raise
        server.setblocking(False)
        return client, server


def _shrink(rng, sock):
    # The send buffer only: a TCP receive buffer shrunk below the window
    # already advertised makes the kernel drop what arrives, and the
    # sender's retransmission back-off stalls the connection for seconds
    # (on asyncio as on zloop).
    if rng.random() < 0.5:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, rng.choice([4096, 16384, 65536]))


async def _pause(rng):
    how = rng.choices(["none", "yield", "nap"], weights=[70, 20, 10])[0]
    if how == "yield":
        await asyncio.sleep(0)
    elif how == "nap":
        await asyncio.sleep(rng.choice([0.0005, 0.002]))


async def _writer(loop, rng, sock, sent):
    for _ in range(rng.randint(1, 40)):
        size = rng.choices(
            [rng.randint(1, 100), rng.randint(100, 16384), rng.randint(16384, 256 * 1024)],
            weights=[40, 40, 20],
        )[0]
        data = rng.randbytes(size)
        form = rng.randrange(3)
        arg = bytearray(data) if form == 1 else memoryview(data) if form == 2 else data
        await loop.sock_sendall(sock, arg)
        sent += data
        await _pause(rng)
    sock.shutdown(socket.SHUT_WR)


async def _reader(loop, rng, sock, got):
    while True:
        n = rng.choice([1, rng.randint(2, 4096), rng.randint(4096, 262144)])
        if rng.random() < 0.5:
            chunk = await loop.sock_recv(sock, n)
        else:
            buf = bytearray(n + 3)
            nbytes = await loop.sock_recv_into(sock, memoryview(buf)[3:])
            chunk = bytes(buf[3:3 + nbytes])
        if not chunk:
            return
        if len(chunk) > n:
            raise AssertionError(f"received {len(chunk)} bytes for a read of {n}")
        got += chunk
        await _pause(rng)


async def _case(loop, kind, seed):
    rng = random.Random(seed)
    a, b = await _connect(loop, kind)
    try:
        for sock in (a, b):
            _shrink(rng, sock)
        a_sent, b_sent, a_got, b_got = bytearray(), bytearray(), bytearray(), bytearray()
        tasks = [
            _writer(loop, random.Random(rng.random()), a, a_sent),
            _reader(loop, random.Random(rng.random()), b, b_got),
            _writer(loop, random.Random(rng.random()), b, b_sent),
            _reader(loop, random.Random(rng.random()), a, a_got),
        ]
        await wait_for(asyncio.gather(*tasks), _TIMEOUT)
    finally:
        a.close()
        b.close()
    assert bytes(b_got) == bytes(a_sent)
    assert bytes(a_got) == bytes(b_sent)


@pytest.mark.parametrize("seed", seeds())
def test_random_duplex_traffic(loop, kind, seed):
    loop.run_until_complete(_case(loop, kind, seed))
