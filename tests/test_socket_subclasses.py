"""Socket objects that are not what they say: a `socket.socket` subclass
whose `fileno()` lies (another open connection's number), raises, returns
-1 or a number no fd can have.

asyncio works through the object's own `send`/`recv`, which use the
socket's real descriptor whatever `fileno()` says; zloop makes the system
calls itself, on that same descriptor (`transport/borrowed.zig`). Either way the
bytes go to the socket's own peer and never to the connection whose number
the lie names. Each case asserts that on both loops; where asyncio asks
`fileno()` (only once a call would block) and fails on its answer, zloop
goes on: it never asks (see docs/differences.md).
"""

import asyncio
import socket

import pytest

from _net import RecordingProtocol, wait_for

pytestmark = pytest.mark.network


def _subclass(kind, other_fd):
    class Odd(socket.socket):
        def fileno(self):
            if kind == "raises":
                raise ValueError("no fileno for you")
            if kind == "minus-one":
                return -1
            if kind == "huge":
                return 10**30
            if kind == "lies":
                return other_fd
            return super().fileno()

    return Odd


KINDS = ["lies", "raises", "minus-one", "huge"]


def _pairs():
    victim_a, victim_b = socket.socketpair()
    mine, peer = socket.socketpair()
    for s in (victim_a, victim_b, mine, peer):
        s.setblocking(False)
    return victim_a, victim_b, mine, peer


def _nothing(sock):
    try:
        return sock.recv(100)
    except BlockingIOError:
        return b""


@pytest.mark.parametrize("kind", KINDS)
def test_sock_calls_reach_the_sockets_own_peer(loop, kind):
    victim_a, victim_b, mine, peer = _pairs()
    odd = _subclass(kind, victim_a.fileno())(fileno=mine.detach())
    odd.setblocking(False)

    async def main():
        await wait_for(loop.sock_sendall(odd, b"hello"))
        peer.send(b"back")
        got = await wait_for(loop.sock_recv(odd, 100))
        return got, _nothing(peer), _nothing(victim_b)

    try:
        got, peer_got, victim_got = loop.run_until_complete(main())
        assert (got, peer_got, victim_got) == (b"back", b"hello", b"")
        assert _nothing(victim_a) == b""
    finally:
        for s in (victim_a, victim_b, odd, peer):
            s.close()


def test_a_lying_fileno_on_a_sock_transport_writes_to_its_own_peer(loop, loop_name):
    # Both loops write to the socket's own peer. asyncio then waits for
    # reading on the number the lie names (the victim's), so the reply to
    # its transport never arrives; zloop waits on the socket's own fd.
    victim_a, victim_b, mine, peer = _pairs()
    odd = _subclass("lies", victim_a.fileno())(fileno=mine.detach())
    odd.setblocking(False)

    async def main():
        transport, protocol = await loop.create_connection(lambda: RecordingProtocol(loop), sock=odd)
        transport.write(b"to my peer")
        got = b""
        while len(got) < 10:
            await asyncio.sleep(0.01)
            got += _nothing(peer)
        if loop_name == "zloop":
            peer.send(b"reply")
            await wait_for(protocol.received(5))
        transport.close()
        await wait_for(protocol.lost)
        return got, bytes(protocol.data), _nothing(victim_b)

    reply = b"reply" if loop_name == "zloop" else b""
    try:
        assert loop.run_until_complete(main()) == (b"to my peer", reply, b"")
        assert _nothing(victim_a) == b""
    finally:
        for s in (victim_a, victim_b, odd, peer):
            s.close()


def test_write_eof_after_the_user_closed_the_socket_raises_ebadf(loop):
    mine, peer = socket.socketpair()
    mine.setblocking(False)

    async def main():
        transport, protocol = await loop.create_connection(lambda: RecordingProtocol(loop), sock=mine)
        mine.close()
        with pytest.raises(OSError) as caught:
            transport.write_eof()
        transport.abort()
        await wait_for(protocol.lost)
        return caught.value.errno

    try:
        import errno

        assert loop.run_until_complete(main()) == errno.EBADF
    finally:
        mine.close()
        peer.close()
