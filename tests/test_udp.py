"""create_datagram_endpoint and datagram transports (issue 4), each case on
stock asyncio and on zloop side by side."""

import asyncio
import errno
import gc
import os
import socket
import sys
import tempfile
import weakref

import pytest
from _platform import full_unix_receiver_errno, open_fds


def _fds():
    return len(open_fds())


class Recorder(asyncio.DatagramProtocol):
    """Records every callback; `wait(n)` waits for n datagrams."""

    def __init__(self):
        self.transport = None
        self.datagrams = []
        self.errors = []
        self.lost = asyncio.get_running_loop().create_future()
        self.events = []
        self._changed = asyncio.Event()

    def connection_made(self, transport):
        self.transport = transport
        self.events.append("made")

    def datagram_received(self, data, addr):
        self.datagrams.append((data, addr))
        self._changed.set()

    def error_received(self, exc):
        self.errors.append(exc)
        self._changed.set()

    def connection_lost(self, exc):
        self.events.append("lost")
        if not self.lost.done():
            self.lost.set_result(exc)

    def pause_writing(self):
        self.events.append("pause")

    def resume_writing(self):
        self.events.append("resume")

    async def wait(self, n=1, errors=0):
        while len(self.datagrams) < n or len(self.errors) < errors:
            self._changed.clear()
            await asyncio.wait_for(self._changed.wait(), 5)


class Echo(asyncio.DatagramProtocol):
    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        self.transport.sendto(data, addr)


def _dead_udp_address():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    addr = s.getsockname()
    s.close()
    return addr


def test_echo_round_trip_and_extra_info(loop, run):
    async def main():
        st, _ = await loop.create_datagram_endpoint(Echo, local_addr=("127.0.0.1", 0))
        server = st.get_extra_info("sockname")
        ct, cp = await loop.create_datagram_endpoint(Recorder, remote_addr=server)
        # (3.11's own selector transport forgot the DatagramTransport base.)
        assert isinstance(ct, asyncio.DatagramTransport) or sys.version_info < (3, 12)
        assert isinstance(ct, asyncio.BaseTransport)
        assert cp.events == ["made"]
        assert ct.get_extra_info("peername") == server
        assert ct.get_extra_info("socket").type == socket.SOCK_DGRAM
        assert ct.get_extra_info("nothing", 42) == 42
        for i in range(20):
            ct.sendto(b"ping %d" % i)
        ct.sendto(bytearray(b"ba"))
        ct.sendto(memoryview(b"mv"))
        await cp.wait(22)
        got = [d for d, _ in cp.datagrams]
        assert got == [b"ping %d" % i for i in range(20)] + [b"ba", b"mv"]
        assert {a for _, a in cp.datagrams} == {server}
        assert ct.get_write_buffer_size() == 0
        ct.close()
        assert ct.is_closing()
        assert await cp.lost is None
        assert cp.events == ["made", "lost"]
        st.close()

    run(main())


def test_unconnected_sendto_addresses(loop, run):
    async def main():
        st, sp = await loop.create_datagram_endpoint(Recorder, local_addr=("127.0.0.1", 0))
        port = st.get_extra_info("sockname")[1]
        ct, cp = await loop.create_datagram_endpoint(Recorder, family=socket.AF_INET)
        assert ct.get_extra_info("peername") is None
        ct.sendto(b"numeric", ("127.0.0.1", port))
        ct.sendto(b"by name", ("localhost", port))
        await sp.wait(2)
        assert sorted(d for d, _ in sp.datagrams) == [b"by name", b"numeric"]
        sender = sp.datagrams[0][1]
        # Reply to the address the server saw.
        st.sendto(b"reply", sender)
        await cp.wait(1)
        assert cp.datagrams == [(b"reply", ("127.0.0.1", port))]
        ct.close()
        st.close()
        await cp.lost
        await sp.lost

    run(main())


def test_sendto_argument_errors(loop, run):
    async def main():
        st, _ = await loop.create_datagram_endpoint(Recorder, local_addr=("127.0.0.1", 0))
        server = st.get_extra_info("sockname")
        ct, cp = await loop.create_datagram_endpoint(Recorder, remote_addr=server)
        with pytest.raises(TypeError, match="bytes-like"):
            ct.sendto("text")
        with pytest.raises(ValueError, match="Invalid address"):
            ct.sendto(b"x", ("127.0.0.1", 1))
        ct.sendto(b"x", server)  # the connected address itself is fine
        ct.sendto(b"y", addr=None)
        ct.close()
        st.close()
        await cp.lost

    run(main())


def test_icmp_error_goes_to_error_received(loop, run):
    async def main():
        ct, cp = await loop.create_datagram_endpoint(Recorder, remote_addr=_dead_udp_address())
        ct.sendto(b"anyone?")
        await cp.wait(0, errors=1)
        assert isinstance(cp.errors[0], ConnectionRefusedError)
        assert not ct.is_closing()  # an error_received does not close
        ct.close()
        assert await cp.lost is None

    run(main())


def test_abort_and_double_close(loop, run):
    async def main():
        ct, cp = await loop.create_datagram_endpoint(Recorder, local_addr=("127.0.0.1", 0))
        ct.abort()
        ct.close()
        ct.abort()
        assert await cp.lost is None
        assert cp.events == ["made", "lost"]
        assert ct.get_extra_info("socket") is not None

    run(main())


_tmpdir = tempfile.mkdtemp(prefix="zloop-udp-")


def _unix_pair():
    """A Unix datagram socket connected to a named peer that never reads
    unless told to (unnamed socketpairs have an empty peername, which
    asyncio's transport takes for 'not connected')."""
    path = tempfile.mktemp(dir=_tmpdir)
    peer = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    peer.bind(path)
    mine = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    mine.connect(path)
    os.unlink(path)
    return mine, peer


# What a non-blocking Unix datagram send to a peer that holds no more gets:
# Linux's EAGAIN, and the transport queues the datagram (with write flow
# control) until the peer reads; macOS's and FreeBSD's ENOBUFS (XNU's and
# FreeBSD's uipc_send), which the transport hands to error_received, the
# datagram lost and nothing ever queued.
_QUEUES = pytest.mark.skipif(
    full_unix_receiver_errno() != errno.EAGAIN,
    reason="this kernel refuses a datagram to a full Unix receiver (ENOBUFS) rather than "
    "making the sender wait: a datagram transport never queues one (see "
    "test_flow_control_when_the_socket_is_full)")


def test_flow_control_when_the_socket_is_full(loop, run):
    if full_unix_receiver_errno() != errno.EAGAIN:
        return _refused_when_the_socket_is_full(loop, run, full_unix_receiver_errno())

    # A Unix datagram peer that does not read makes sendto() block: what
    # the socket refuses is queued, with write flow control.
    async def main():
        mine, peer = _unix_pair()
        ct, cp = await loop.create_datagram_endpoint(Recorder, sock=mine)
        ct.set_write_buffer_limits(high=4096)
        assert ct.get_write_buffer_limits() == (1024, 4096)
        for _ in range(10000):
            ct.sendto(b"z" * 1000)
            if ct.get_write_buffer_size():
                break
        assert ct.get_write_buffer_size() > 0
        for _ in range(10):
            ct.sendto(b"q" * 1000)
        assert cp.events == ["made", "pause"]
        peer.setblocking(False)
        got = []
        # (3.13's asyncio over-counts queued bytes, so wait for the
        # resume, not for an empty buffer.)
        while cp.events[-1] != "resume":
            try:
                while True:
                    got.append(peer.recv(2000))
            except BlockingIOError:
                pass
            await asyncio.sleep(0.001)
        for _ in range(20):
            await asyncio.sleep(0.001)
        assert cp.events == ["made", "pause", "resume"]
        try:
            while True:
                got.append(peer.recv(2000))
        except BlockingIOError:
            pass
        assert got[-10:] == [b"q" * 1000] * 10
        ct.close()
        await cp.lost
        peer.close()

    run(main())


def _refused_when_the_socket_is_full(loop, run, refusal):
    async def main():
        mine, peer = _unix_pair()
        ct, cp = await loop.create_datagram_endpoint(Recorder, sock=mine)
        ct.set_write_buffer_limits(high=4096)
        sent = 0
        while not cp.errors and sent < 10000:
            ct.sendto(b"z" * 1000)
            sent += 1
        # Reported at once, from sendto itself, as asyncio does.
        assert [e.errno for e in cp.errors] == [refusal]
        assert isinstance(cp.errors[0], OSError)
        assert ct.get_write_buffer_size() == 0
        for _ in range(3):
            ct.sendto(b"q" * 1000)
        assert [e.errno for e in cp.errors] == [refusal] * 4
        assert ct.get_write_buffer_size() == 0
        assert cp.events == ["made"]
        peer.setblocking(False)
        got = []
        try:
            while True:
                got.append(peer.recv(2000))
        except BlockingIOError:
            pass
        assert got == [b"z" * 1000] * (sent - 1)
        ct.sendto(b"after")
        assert peer.recv(100) == b"after"
        ct.close()
        await cp.lost
        assert cp.events == ["made", "lost"]
        peer.close()

    run(main())


@_QUEUES
def test_close_with_queue_flushes_first(loop, run):
    async def main():
        mine, peer = _unix_pair()
        ct, cp = await loop.create_datagram_endpoint(Recorder, sock=mine)
        n = 0
        while not ct.get_write_buffer_size():
            ct.sendto(b"%d" % n)
            n += 1
        ct.sendto(b"last")
        ct.close()
        assert not cp.lost.done()
        peer.setblocking(False)
        got = []
        while not cp.lost.done():
            try:
                got.append(peer.recv(100))
            except BlockingIOError:
                await asyncio.sleep(0.001)
        assert await cp.lost is None
        got += [peer.recv(100) for _ in range(n + 1 - len(got))]
        assert got[-1] == b"last" and len(got) == n + 1
        peer.close()

    run(main())


@_QUEUES
def test_abort_drops_the_queue(loop, run):
    async def main():
        mine, peer = _unix_pair()
        ct, cp = await loop.create_datagram_endpoint(Recorder, sock=mine)
        while not ct.get_write_buffer_size():
            ct.sendto(b"x" * 100)
        ct.abort()
        assert ct.is_closing()
        assert await cp.lost is None
        # (asyncio's abort leaves get_write_buffer_size() stale: not checked.)
        peer.close()

    run(main())


def test_pause_and_resume_reading(loop, run):
    async def main():
        st, sp = await loop.create_datagram_endpoint(Recorder, local_addr=("127.0.0.1", 0))
        ct, cp = await loop.create_datagram_endpoint(Recorder, remote_addr=st.get_extra_info("sockname"))
        await asyncio.sleep(0)
        assert st.is_reading()
        st.pause_reading()
        assert not st.is_reading()
        ct.sendto(b"held")
        for _ in range(5):
            await asyncio.sleep(0.005)
        assert sp.datagrams == []
        st.resume_reading()
        await sp.wait(1)
        assert sp.datagrams[0][0] == b"held"
        ct.close()
        st.close()
        await sp.lost

    run(main())


def test_protocol_error_in_datagram_received_is_reported(loop, run):
    class Bad(Recorder):
        def datagram_received(self, data, addr):
            super().datagram_received(data, addr)
            raise ZeroDivisionError

    async def main():
        contexts = []
        loop.set_exception_handler(lambda lp, ctx: contexts.append(ctx))
        st, sp = await loop.create_datagram_endpoint(Bad, local_addr=("127.0.0.1", 0))
        ct, cp = await loop.create_datagram_endpoint(Recorder, remote_addr=st.get_extra_info("sockname"))
        ct.sendto(b"1")
        await sp.wait(1)
        ct.sendto(b"2")
        await sp.wait(2)  # the transport keeps receiving
        assert len(contexts) == 2
        assert isinstance(contexts[0]["exception"], ZeroDivisionError)
        ct.close()
        st.close()
        await sp.lost

    run(main())


def test_ipv6(loop, run):
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).close()
    except OSError:
        pytest.skip("no IPv6")

    async def main():
        try:
            st, sp = await loop.create_datagram_endpoint(Recorder, local_addr=("::1", 0))
        except OSError:
            pytest.skip("no ::1")
        port = st.get_extra_info("sockname")[1]
        ct, cp = await loop.create_datagram_endpoint(Recorder, family=socket.AF_INET6)
        ct.sendto(b"six", ("::1", port))
        await sp.wait(1)
        data, addr = sp.datagrams[0]
        assert data == b"six" and addr[0] == "::1" and len(addr) == 4
        st.sendto(b"back", addr)
        await cp.wait(1)
        assert cp.datagrams[0] == (b"back", ("::1", port, 0, 0))
        ct.close()
        st.close()
        await sp.lost

    run(main())


def test_unix_datagram_sockets(loop, run):
    async def main():
        with tempfile.TemporaryDirectory() as d:
            server_path = os.path.join(d, "server.sock")
            client_path = os.path.join(d, "client.sock")
            st, sp = await loop.create_datagram_endpoint(
                Recorder, local_addr=server_path, family=socket.AF_UNIX
            )
            ct, cp = await loop.create_datagram_endpoint(
                Recorder, local_addr=client_path, remote_addr=server_path, family=socket.AF_UNIX
            )
            ct.sendto(b"over unix")
            await sp.wait(1)
            assert sp.datagrams == [(b"over unix", client_path)]
            st.sendto(b"and back", client_path)
            await cp.wait(1)
            assert cp.datagrams == [(b"and back", server_path)]
            with pytest.raises(TypeError, match="string is expected"):
                await loop.create_datagram_endpoint(
                    Recorder, local_addr=("127.0.0.1", 0), family=socket.AF_UNIX
                )
            ct.close()
            st.close()
            await cp.lost
            await sp.lost

    run(main())


def test_sock_argument_and_its_errors(loop, run):
    async def main():
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        t, p = await loop.create_datagram_endpoint(Recorder, sock=sock)
        assert t.get_extra_info("sockname") == sock.getsockname()
        assert sock.gettimeout() == 0
        t.close()
        await p.lost
        assert sock.fileno() == -1
        tcp = socket.socket()
        try:
            with pytest.raises(ValueError, match="(?i)socket was expected"):
                await loop.create_datagram_endpoint(Recorder, sock=tcp)
        finally:
            tcp.close()
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            with pytest.raises(ValueError, match="local_addr="):
                await loop.create_datagram_endpoint(Recorder, sock=udp, local_addr=("127.0.0.1", 0))
        finally:
            udp.close()
        with pytest.raises(ValueError, match="unexpected address family"):
            await loop.create_datagram_endpoint(Recorder)
        with pytest.raises(TypeError, match="2-tuple"):
            await loop.create_datagram_endpoint(Recorder, local_addr="127.0.0.1")

    run(main())


def test_reuse_port_and_broadcast(loop, run):
    async def main():
        a, pa = await loop.create_datagram_endpoint(
            Recorder, local_addr=("127.0.0.1", 0), reuse_port=True
        )
        port = a.get_extra_info("sockname")[1]
        b, pb = await loop.create_datagram_endpoint(
            Recorder, local_addr=("127.0.0.1", port), reuse_port=True
        )
        sock = b.get_extra_info("socket")
        # Set: 1 on Linux; the option's bit (0x200) on macOS and FreeBSD,
        # whose getsockopt answers so_options & SO_REUSEPORT.
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) != 0
        c, pc = await loop.create_datagram_endpoint(
            Recorder, remote_addr=("127.0.0.1", port), allow_broadcast=True
        )
        csock = c.get_extra_info("socket")
        assert csock.getsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST) != 0
        # allow_broadcast leaves the socket unconnected, remembering the address.
        assert c.get_extra_info("peername") is None
        c.sendto(b"b")
        while not (pa.datagrams or pb.datagrams):
            await asyncio.sleep(0.001)
        for t, p in ((a, pa), (b, pb), (c, pc)):
            t.close()
            await p.lost

    run(main())


def test_instances_have_dict_and_weakref(loop, run):
    async def main():
        t, p = await loop.create_datagram_endpoint(Recorder, local_addr=("127.0.0.1", 0))
        t.anything = 1
        assert weakref.ref(t)() is t
        assert "fd=" in repr(t)
        t.close()
        await p.lost
        assert "closed" in repr(t)

    run(main())


def test_many_endpoints_leave_no_descriptors(loop, run):
    async def main():
        pairs = []
        for _ in range(50):
            pairs.append(await loop.create_datagram_endpoint(Recorder, local_addr=("127.0.0.1", 0)))
        for t, _ in pairs:
            t.sendto(b"x", pairs[0][0].get_extra_info("sockname"))
        for t, p in pairs:
            t.close()
        for t, p in pairs:
            await p.lost

    before = _fds()
    run(main())
    assert _fds() == before


def test_closing_the_loop_with_a_live_endpoint(loop_factory):
    gc.collect()
    before = _fds()
    lp = loop_factory()

    async def main():
        return await lp.create_datagram_endpoint(asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0))

    t, _ = lp.run_until_complete(main())
    lp.close()
    with pytest.warns(ResourceWarning):
        del t
        gc.collect()
    assert _fds() == before


_datagram_var = __import__("contextvars").ContextVar("datagram_var")


def test_datagram_received_runs_in_the_endpoint_context(loop, run):
    # As asyncio: datagram_received runs in a copy of the context current
    # when the endpoint was created (its reader Handle's context).
    class ContextRecorder(Recorder):
        def datagram_received(self, data, addr):
            self.events.append(("data", _datagram_var.get("MISSING")))
            super().datagram_received(data, addr)

    async def main():
        _datagram_var.set("endpoint")
        st, sp = await loop.create_datagram_endpoint(
            ContextRecorder, local_addr=("127.0.0.1", 0))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"x", st.get_extra_info("sockname"))
            await sp.wait(1)
        st.close()
        await sp.lost
        return sp.events

    assert run(main()) == ["made", ("data", "endpoint"), "lost"]
    assert _datagram_var.get("outside") == "outside"


def test_datagram_from_an_unnamed_socket_has_address_none(loop, run):
    # The other end of a socketpair has no address: asyncio hands
    # datagram_received None (CPython's makesockaddr of an empty address).
    # zloop used to fail on it and close the transport silently.
    async def main():
        s1, s2 = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM, 0)
        with s1, s2:
            tr, pr = await loop.create_datagram_endpoint(Recorder, sock=s1)
            s2.send(b"hello, socketpair")
            await pr.wait(1)
            closing = tr.is_closing()
            tr.close()
            await pr.lost
        return pr.datagrams, closing

    assert run(main()) == ([(b"hello, socketpair", None)], False)


def test_datagram_from_an_unbound_unix_socket_has_the_platforms_address(loop, run, tmp_path):
    # A sender with no name of its own, to a bound path: Linux writes no
    # address (None), macOS and FreeBSD a 16-byte empty one (''), which a
    # reading of Linux's abstract-namespace rule would take for 14 NUL
    # bytes. Whatever the kernel, the address is the one socket.recvfrom
    # gives for the same exchange.
    path = str(tmp_path / "d")
    if len(path.encode()) >= 100:
        pytest.skip("temporary directory too deep for an AF_UNIX path")

    def reference():
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as r, \
                socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            r.bind(path + "r")
            s.sendto(b"ref", path + "r")
            return r.recvfrom(16)[1]

    async def main():
        tr, pr = await loop.create_datagram_endpoint(Recorder, local_addr=path,
                                                     family=socket.AF_UNIX)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.sendto(b"unbound", path)
            await pr.wait(1)
        tr.close()
        await pr.lost
        return pr.datagrams

    expected = reference()
    ((data, addr),) = run(main())
    assert (data, addr, type(addr)) == (b"unbound", expected, type(expected))
    assert addr in (None, "")


def test_datagram_transport_is_an_asyncio_transport(loop, run):
    # asyncio's datagram transport derives from asyncio.Transport (through
    # _SelectorTransport) on every supported Python; CPython's test_events
    # asserts it.
    async def main():
        tr, pr = await loop.create_datagram_endpoint(Recorder, local_addr=("127.0.0.1", 0))
        kinds = (isinstance(tr, asyncio.Transport), isinstance(tr, asyncio.BaseTransport))
        tr.close()
        await pr.lost
        return kinds

    assert run(main()) == (True, True)


def test_error_received_that_closes_still_hears_the_next_send(loop):
    # An unconnected endpoint keeps sending until connection_lost() has run:
    # error_received() closes the transport on the first oversized datagram,
    # and the second, sent before connection_lost(), fails there too (CPython
    # gh-156920's test); connection_lost() then comes.
    class Proto(asyncio.DatagramProtocol):
        def __init__(self):
            self.errors = []
            self.lost = loop.create_future()

        def connection_made(self, transport):
            self.transport = transport

        def error_received(self, exc):
            self.errors.append(type(exc))
            self.transport.close()

        def connection_lost(self, exc):
            self.lost.set_result(exc)

    async def main():
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        tr, proto = await loop.create_datagram_endpoint(Proto, sock=sock)
        addr = sock.getsockname()
        tr.sendto(b"\0" * 70000, addr)
        tr.sendto(b"\0" * 70000, addr)
        lost = await asyncio.wait_for(proto.lost, 5)
        return proto.errors, lost

    assert loop.run_until_complete(main()) == ([OSError, OSError], None)
