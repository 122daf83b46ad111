"""create_connection(happy_eyeballs_delay=, interleave=) (issue 3): RFC 8305
address interleaving and staggered connection attempts, as asyncio's.

A fake host name resolves (through a patched ``loop.getaddrinfo``) to a list
of local addresses of three kinds: a listener (connects), a closed port
(refuses at once) and a "black hole" (a listener whose accept queue is full,
so the kernel drops the SYN and connect() stays in progress). A wrapped
``loop.sock_connect`` records each attempt: which address, and when.
"""

import asyncio
import select
import socket

import pytest

from _net import wait_for
from _support import PY, open_fds, yield_passes

pytestmark = pytest.mark.network

FAKE_HOST = "happy-eyeballs.test"
V4 = "127.0.0.1"
V6 = "::1"


def _has_ipv6():
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind((V6, 0))
        return True
    except OSError:
        return False


needs_ipv6 = pytest.mark.skipif(not _has_ipv6(), reason="no IPv6 loopback")


def _info(address):
    family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
    return (family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", address)


def _refusing(host=V4):
    """An address nothing listens on: connect() is refused at once."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.bind((host, 0))
        return s.getsockname()[:2]


@pytest.fixture
def closer():
    """Sockets to close after the test."""
    socks = []
    yield socks
    for s in socks:
        s.close()


def _listening(closer, host=V4):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.create_server((host, 0), family=family)
    closer.append(s)
    return s.getsockname()[:2]


def _black_hole(closer):
    """An address whose connect() neither completes nor fails: a listener
    with backlog 0, its accept queue filled and never drained."""
    listener = socket.create_server((V4, 0), backlog=0)
    closer.append(listener)
    address = listener.getsockname()
    for _ in range(16):
        s = socket.socket()
        closer.append(s)
        s.setblocking(False)
        s.connect_ex(address)
        poller = select.poll()
        poller.register(s, select.POLLOUT)
        if not poller.poll(200):
            return address  # this one hangs, and so will the next
    pytest.skip("could not fill a listener's accept queue")


def _patch(loop, infos):
    """Resolve FAKE_HOST to ``infos``; return the list of recorded attempts
    as (loop time, address)."""
    real_getaddrinfo = loop.getaddrinfo
    real_sock_connect = loop.sock_connect
    attempts = []

    async def getaddrinfo(host, port, **kwargs):
        if host == FAKE_HOST:
            return [_info(a) for a in infos]
        return await real_getaddrinfo(host, port, **kwargs)

    async def sock_connect(sock, address):
        attempts.append((loop.time(), tuple(address[:2])))
        return await real_sock_connect(sock, address)

    loop.getaddrinfo = getaddrinfo
    loop.sock_connect = sock_connect
    return attempts


async def _connect(loop, **kwargs):
    return await loop.create_connection(asyncio.Protocol, FAKE_HOST, 1, **kwargs)


def _addresses(attempts):
    return [address for _, address in attempts]


# -- ordering -----------------------------------------------------------------


@needs_ipv6
@pytest.mark.parametrize(
    "kwargs, order",
    [
        ({}, [0, 1, 2, 3]),
        ({"interleave": 1}, [0, 2, 1, 3]),
        ({"interleave": 2}, [0, 1, 2, 3]),
        ({"happy_eyeballs_delay": 0.05}, [0, 2, 1, 3]),  # interleave defaults to 1
        ({"happy_eyeballs_delay": 0.05, "interleave": 2}, [0, 1, 2, 3]),
        ({"happy_eyeballs_delay": 0.05, "interleave": 0}, [0, 1, 2, 3]),
    ],
)
def test_attempt_order_interleaves_families(loop, kwargs, order):
    addresses = [_refusing(V4), _refusing(V4), _refusing(V6), _refusing(V6)]
    attempts = _patch(loop, addresses)

    async def main():
        with pytest.raises(OSError, match="Multiple exceptions"):
            await wait_for(_connect(loop, **kwargs))

    loop.run_until_complete(main())
    assert _addresses(attempts) == [addresses[i] for i in order]


@needs_ipv6
def test_interleave_past_the_first_family(loop):
    addresses = [_refusing(V6), _refusing(V4), _refusing(V4), _refusing(V4)]
    attempts = _patch(loop, addresses)

    async def main():
        with pytest.raises(OSError):
            await wait_for(_connect(loop, happy_eyeballs_delay=0.05, interleave=3))

    loop.run_until_complete(main())
    # Family order is first appearance; the first family's extra addresses
    # come first even when that family runs out.
    assert _addresses(attempts) == [addresses[i] for i in (0, 1, 2, 3)]


# -- staggering ---------------------------------------------------------------


def test_next_attempt_starts_after_the_delay(loop, closer):
    silent, good = _black_hole(closer), _listening(closer)
    attempts = _patch(loop, [silent, good])
    delay_s = 0.1
    before = open_fds()

    async def main():
        tr, _ = await wait_for(_connect(loop, happy_eyeballs_delay=delay_s))
        peer = tr.get_extra_info("peername")
        tr.close()
        await yield_passes(5)
        return peer

    peer = loop.run_until_complete(main())
    assert peer == good
    assert _addresses(attempts) == [silent, good]
    # The second attempt waited for its turn (a lower bound only).
    assert attempts[1][0] - attempts[0][0] >= delay_s * 0.9
    # The silent attempt's socket was closed with it.
    assert open_fds() == before


def test_failure_starts_the_next_attempt_at_once(loop, closer):
    # The listener first: a port _refusing() just let go of is free for
    # the kernel to give the listener (seen on a busy machine).
    good = _listening(closer)
    refused = _refusing()
    attempts = _patch(loop, [refused, good])

    async def main():
        # A delay far beyond wait_for's bound: only the failure can start
        # the second attempt in time.
        tr, _ = await wait_for(_connect(loop, happy_eyeballs_delay=3600))
        peer = tr.get_extra_info("peername")
        tr.close()
        return peer

    assert loop.run_until_complete(main()) == good
    assert _addresses(attempts) == [refused, good]


def test_first_success_cancels_the_rest(loop, closer):
    silent1, silent2, good = _black_hole(closer), _black_hole(closer), _listening(closer)
    never = _listening(closer)
    attempts = _patch(loop, [silent1, silent2, good, never])
    before = open_fds()

    async def main():
        tr, _ = await wait_for(_connect(loop, happy_eyeballs_delay=0.02))
        peer = tr.get_extra_info("peername")
        # The losers' sockets are gone once their cancellation ran.
        await yield_passes(5)
        during = open_fds() - before
        tr.close()
        await yield_passes(5)
        return peer, len(during)

    peer, extra_fds = loop.run_until_complete(main())
    assert peer == good
    assert _addresses(attempts) == [silent1, silent2, good]
    assert extra_fds == 1  # the winner's socket only
    assert open_fds() == before


def test_simultaneous_successes_keep_one_socket(loop, closer):
    first, second = _listening(closer), _listening(closer)
    attempts = _patch(loop, [first, second])
    before = open_fds()

    async def main():
        tr, _ = await wait_for(_connect(loop, happy_eyeballs_delay=0))
        peer = tr.get_extra_info("peername")
        await yield_passes(5)
        during = open_fds() - before
        tr.close()
        await yield_passes(5)
        return peer, len(during)

    peer, extra_fds = loop.run_until_complete(main())
    assert peer in (first, second)
    assert _addresses(attempts)[0] == first
    assert extra_fds == 1
    assert open_fds() == before


def test_cancelled_race_closes_every_socket(loop, closer):
    silent1, silent2 = _black_hole(closer), _black_hole(closer)
    attempts = _patch(loop, [silent1, silent2])
    before = open_fds()

    async def main():
        task = loop.create_task(_connect(loop, happy_eyeballs_delay=0.01))
        while len(attempts) < 2:
            await asyncio.sleep(0.005)
        await yield_passes(2)
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await yield_passes(5)

    loop.run_until_complete(main())
    assert _addresses(attempts) == [silent1, silent2]
    assert open_fds() == before


# -- errors -------------------------------------------------------------------


def test_every_attempt_refused(loop):
    addresses = [_refusing(), _refusing()]
    attempts = _patch(loop, addresses)

    async def main():
        with pytest.raises(OSError) as info:
            await wait_for(_connect(loop, happy_eyeballs_delay=0.05))
        return str(info.value)

    message = loop.run_until_complete(main())
    assert message.startswith("Multiple exceptions: ")
    assert all(str(a[1]) in message for a in addresses)
    assert _addresses(attempts) == addresses


def test_a_single_address_refused(loop):
    refused = _refusing()
    _patch(loop, [refused])

    async def main():
        with pytest.raises(ConnectionRefusedError):
            await wait_for(_connect(loop, happy_eyeballs_delay=0.05))

    loop.run_until_complete(main())


@pytest.mark.skipif(PY < (3, 12), reason="all_errors is new in Python 3.12")
def test_all_errors_in_attempt_order(loop):
    addresses = [_refusing(), _refusing(), _refusing()]
    _patch(loop, addresses)

    async def main():
        with pytest.raises(ExceptionGroup) as info:  # noqa: F821 (3.11+)
            await wait_for(_connect(loop, happy_eyeballs_delay=0.05, all_errors=True))
        return info.value.exceptions

    excs = loop.run_until_complete(main())
    assert [type(e) for e in excs] == [ConnectionRefusedError] * 3
    assert [str(a[1]) in str(e) for a, e in zip(addresses, excs)] == [True] * 3


def test_happy_eyeballs_with_local_addr(loop, closer):
    silent, good = _black_hole(closer), _listening(closer)
    _patch(loop, [silent, good])

    async def main():
        tr, _ = await wait_for(
            _connect(loop, happy_eyeballs_delay=0.02, local_addr=(V4, 0))
        )
        info = tr.get_extra_info("sockname")[0], tr.get_extra_info("peername")
        tr.close()
        return info

    assert loop.run_until_complete(main()) == (V4, good)
