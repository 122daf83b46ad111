"""Datagrams for ``zloop.Loop``: ``create_datagram_endpoint`` (UDP and Unix
datagram sockets) and the datagram transport's cold paths, with stock
asyncio's semantics (``base_events.create_datagram_endpoint``,
``selector_events._SelectorDatagramTransport``).

The transport's I/O is native (``_zloop.DatagramTransportCore``,
src/python/transport/datagram.zig): ``sendto`` tries the socket first and queues only
what the socket refuses; readiness receives straight into a ``bytes``.
"""

import logging
import socket
import sys
from asyncio import futures, transports, trsock

from . import _flow
from ._net import _SocketOwner, _remove_stale_unix_socket
from ._zloop import DatagramTransportCore, _sock_fd

logger = logging.getLogger("asyncio")

# 3.13 sends empty datagrams and counts 8 header bytes per queued datagram.
_SEND_EMPTY = sys.version_info >= (3, 13)
_HEADER_SIZE = 8 if sys.version_info >= (3, 13) else 0
_SOCK_KIND = "A datagram socket" if sys.version_info >= (3, 13) else "A UDP Socket"


class _DatagramTransport(_SocketOwner, DatagramTransportCore, transports.Transport):
    """A datagram transport over a non-blocking socket.

    ``DatagramTransportCore`` derives from ``asyncio.DatagramTransport``;
    this class adds an instance ``__dict__`` and weak references, as
    asyncio's transports have, and ``asyncio.Transport`` as a base: asyncio's
    datagram transport is one too (through ``_SelectorTransport``), and
    CPython's test_events asserts it. Its own attributes are slots, as
    the stream transport's are (see there: 3.13 specializes
    ``transport.sendto(...)`` while no ``__dict__`` was made).
    """

    __slots__ = ("_sock", "_loop", "__dict__", "__weakref__")

    max_size = 256 * 1024

    @property
    def _closed(self):
        return self._sock is None

    def _close_socket(self):
        self._sock.close()

    def __del__(self):
        # Unset if __init__ failed early.
        if getattr(self, "_sock", None) is not None:
            self._warn_unclosed()

    def __init__(self, loop, sock, protocol, address=None, waiter=None, extra=None, borrowed=False):
        # `borrowed`: sock is the caller's (create_datagram_endpoint(sock=)),
        # who may close it while the transport still uses it; the native
        # side then asks it for its fd before each system call.
        super().__init__(extra)
        self._extra["socket"] = trsock.TransportSocket(sock)
        try:
            self._extra["sockname"] = sock.getsockname()
        except OSError:
            self._extra["sockname"] = None
        if "peername" not in self._extra:
            try:
                self._extra["peername"] = sock.getpeername()
            except OSError:
                self._extra["peername"] = None
        # Looked up before the fd joins the loop: a factory that returned no
        # protocol fails here (AttributeError, as in asyncio) and leaves no
        # transport holding the fd for ever.
        connection_made = protocol.connection_made
        self._sock = sock
        self._loop = loop
        self._setup(
            loop,
            _sock_fd(sock),
            protocol,
            address,
            bool(self._extra["peername"]),
            sock.family,
            _SEND_EMPTY,
            _HEADER_SIZE,
            sock if borrowed else None,
        )
        loop.call_soon(connection_made, self)
        # Only once connection_made ran may datagrams arrive.
        loop.call_soon(self._start_reading)
        if waiter is not None:
            loop.call_soon(futures._set_result_unless_cancelled, waiter, None)

    def set_protocol(self, protocol):
        self._set_protocol(protocol)

    def set_write_buffer_limits(self, high=None, low=None):
        self._set_limits(*_flow.write_limits(high, low))

    # Called by the native side (cold).

    def _sendto_py(self, data, addr):
        # Addresses the native side does not parse (host names, IPv6 scope
        # ids): the socket module resolves them and raises what it raises.
        self._sock.sendto(data, addr)

    def _fatal_error(self, exc, message="Fatal error on transport"):
        if isinstance(exc, OSError):
            if self._loop is not None and self._loop.get_debug():
                logger.debug("%r: %s", self, message, exc_info=True)
        elif self._loop is not None:
            self._loop.call_exception_handler(
                {
                    "message": message,
                    "exception": exc,
                    "transport": self,
                    "protocol": self._protocol,
                }
            )
        self._force_close(exc)

    def _callback_error(self, exc):
        # A protocol callback raised under the readiness dispatch: report it
        # as asyncio's Handle._run reports an exception out of _read_ready.
        self._loop.call_exception_handler(
            {
                "message": f"Exception in callback {type(self).__name__}._read_ready()",
                "exception": exc,
                "transport": self,
                "protocol": self._protocol,
            }
        )

    def _call_connection_lost(self, exc):
        try:
            self._protocol.connection_lost(exc)
        finally:
            # Leave the reactor before the fd number can be reused.
            self._detach()
            self._sock.close()
            self._sock = None
            self._set_protocol(None)
            self._loop = None



def _set_reuseport(sock):
    if not hasattr(socket, "SO_REUSEPORT"):
        raise ValueError("reuse_port not supported by socket module")
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    except OSError:
        raise ValueError(
            "reuse_port not supported by socket module, SO_REUSEPORT defined but not implemented."
        ) from None


class DatagramMixin:
    """The loop's datagram API; mixed into ``zloop.Loop``."""

    def _make_datagram_transport(self, sock, protocol, address=None, waiter=None, extra=None, borrowed=False):
        return _DatagramTransport(self, sock, protocol, address, waiter, extra, borrowed)

    async def _resolve_dgram(self, addr, family, proto, flags):
        if not (isinstance(addr, tuple) and len(addr) == 2):
            raise TypeError("2-tuple is expected")
        return await self._resolve_address(addr, family, socket.SOCK_DGRAM, proto, flags)

    async def _datagram_pairs(self, local_addr, remote_addr, family, proto, flags):
        """[((family, proto), (local, remote))] to try, in resolver order."""
        if not (local_addr or remote_addr):
            if family == 0:
                raise ValueError("unexpected address family")
            return [((family, proto), (None, None))]
        if hasattr(socket, "AF_UNIX") and family == socket.AF_UNIX:
            for addr in (local_addr, remote_addr):
                if addr is not None and not isinstance(addr, str):
                    raise TypeError("string is expected")
            _remove_stale_unix_socket(local_addr)
            return [((family, proto), (local_addr, remote_addr))]
        by_key = {}
        for idx, addr in ((0, local_addr), (1, remote_addr)):
            if addr is None:
                continue
            infos = await self._resolve_dgram(addr, family, proto, flags)
            if not infos:
                raise OSError("getaddrinfo() returned empty list")
            for fam, _, pro, _, address in infos:
                by_key.setdefault((fam, pro), [None, None])
                if by_key[(fam, pro)][idx] is None:
                    by_key[(fam, pro)][idx] = address
        pairs = [
            (key, pair)
            for key, pair in by_key.items()
            if not ((local_addr and pair[0] is None) or (remote_addr and pair[1] is None))
        ]
        if not pairs:
            raise ValueError("can not get address information")
        return pairs

    async def _open_datagram_socket(self, pairs, local_addr, remote_addr, reuse_port, allow_broadcast):
        errors = []
        for (fam, pro), (local, remote) in pairs:
            sock = None
            try:
                sock = socket.socket(family=fam, type=socket.SOCK_DGRAM, proto=pro)
                if reuse_port:
                    _set_reuseport(sock)
                if allow_broadcast:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
                sock.setblocking(False)
                if local_addr:
                    sock.bind(local)
                if remote_addr and not allow_broadcast:
                    await self.sock_connect(sock, remote)
                return sock, (remote if remote_addr else None)
            except OSError as exc:
                if sock is not None:
                    sock.close()
                errors.append(exc)
            except BaseException:
                if sock is not None:
                    sock.close()
                raise
        raise errors[0]

    async def create_datagram_endpoint(
        self,
        protocol_factory,
        local_addr=None,
        remote_addr=None,
        *,
        family=0,
        proto=0,
        flags=0,
        reuse_port=None,
        allow_broadcast=None,
        sock=None,
    ):
        """Create a datagram endpoint: (transport, protocol)."""
        borrowed = sock is not None
        if sock is not None:
            if sock.type != socket.SOCK_DGRAM:
                raise ValueError(f"{_SOCK_KIND} was expected, got {sock!r}")
            opts = dict(
                local_addr=local_addr,
                remote_addr=remote_addr,
                family=family,
                proto=proto,
                flags=flags,
                reuse_port=reuse_port,
                allow_broadcast=allow_broadcast,
            )
            problems = ", ".join(f"{k}={v}" for k, v in opts.items() if v)
            if problems:
                raise ValueError(
                    "socket modifier keyword arguments can not be used "
                    f"when sock is specified. ({problems})"
                )
            sock.setblocking(False)
            r_addr = None
        else:
            pairs = await self._datagram_pairs(local_addr, remote_addr, family, proto, flags)
            sock, r_addr = await self._open_datagram_socket(
                pairs, local_addr, remote_addr, reuse_port, allow_broadcast
            )
        try:
            protocol = protocol_factory()
            waiter = self.create_future()
            transport = self._make_datagram_transport(sock, protocol, r_addr, waiter, borrowed=borrowed)
        except BaseException:
            sock.close()
            raise
        if self.get_debug():
            # asyncio's words and levels: info with a local address.
            if local_addr:
                logger.info(
                    "Datagram endpoint local_addr=%r remote_addr=%r created: (%r, %r)",
                    local_addr,
                    remote_addr,
                    transport,
                    protocol,
                )
            else:
                logger.debug(
                    "Datagram endpoint remote_addr=%r created: (%r, %r)", remote_addr, transport, protocol
                )
        try:
            await waiter
        except BaseException:
            transport.close()
            raise
        return transport, protocol
