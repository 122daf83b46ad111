"""Networking for ``zloop.Loop``: the ``sock_*`` coroutines, socket stream
transports, ``create_connection``/``create_server`` (TCP and Unix) and the
``Server`` object, each with stock asyncio's semantics.

The I/O of a stream transport is native (``_zloop.SocketTransportCore``,
src/python/transport/stream.zig); this module holds the cold paths: resolving
addresses, building sockets, the transport's construction and teardown,
servers. ``sock_*`` wait on the loop's native ``_add_reader``/``_add_writer``
and finish their future from the readiness callback.
"""

import asyncio
import collections.abc
import contextvars
import errno
import itertools
import logging
import operator
import os
import socket
import stat
import sys
import warnings
import weakref
from asyncio import base_events, constants, futures, protocols, trsock

from . import _flow, _sendfile, _tls
from ._zloop import (
    AcceptorCore,
    ServerConnections,
    SocketTransportCore,
    _install_net,
    _path_stat as _native_path_stat,
    _sock_fd,
    _sock_recv_into_ready,
    _unlink,
)

logger = logging.getLogger("asyncio")

# Seconds before accepting again after EMFILE and friends (asyncio's
# constants.ACCEPT_RETRY_DELAY).
_ACCEPT_RETRY_DELAY_S = 1
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_HAS_IPV6 = hasattr(socket, "AF_INET6")
# Listening sockets whose accept loop is native (transport/accept.zig converts their
# peer addresses); any other family keeps the Python loop (_accept_ready).
_NATIVE_ACCEPT_FAMILIES = frozenset((socket.AF_INET, socket.AF_INET6, socket.AF_UNIX))
# asyncio 3.14: a cancelled serve_forever() also closes the server's client
# transports, so that wait_closed() does not wait on a hanging client.
_SERVE_FOREVER_CLOSES_CLIENTS = sys.version_info >= (3, 14)
# gh-140947 (3.15): a transport's callbacks run in its own context, the one
# current when it was made (a server's connection: a copy of the context the
# server started serving in), even after resume_reading() from a task whose
# context differs. Before 3.15 each resume_reading() takes the caller's.
_TRANSPORT_OWNS_CONTEXT = sys.version_info >= (3, 15)


def _set_nodelay(sock):
    if (
        sock.family in (socket.AF_INET, socket.AF_INET6)
        and sock.type == socket.SOCK_STREAM
        and sock.proto == socket.IPPROTO_TCP
    ):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


try:
    from ssl import SSLSocket as _SSLSocket
except ImportError:  # pragma: no cover - CPython built without OpenSSL
    _SSLSocket = ()


def _check_ssl_socket(sock):
    if isinstance(sock, _SSLSocket):
        raise TypeError("Socket cannot be of type SSLSocket")


# ----------------------------------------------------------- transport


def _reads(protocol):
    """How the native transport reads for `protocol`: into the buffer it
    always gives out (zloop's TLS protocol: its loop's one buffer, so the
    transport need not call get_buffer() for it), through get_buffer() (a
    BufferedProtocol), or into a new bytes for data_received() (False)."""
    if type(protocol) is _tls._SSLProtocol:
        return protocol.get_buffer(-1)
    return isinstance(protocol, protocols.BufferedProtocol)


class _SocketOwner:
    """repr() and the flow-control callbacks shared by zloop's socket
    transports (stream and datagram), in the shape asyncio's take. The
    native side calls the _-methods; ``_closed`` says what asyncio's
    ``_sock is None`` says."""

    __slots__ = ()

    def _flow_callback(self, name):
        _flow.tell_protocol(self._loop, self._protocol, name, self, self._protocol)

    def _pause_protocol(self):
        self._flow_callback("pause_writing")

    def _resume_protocol(self):
        self._flow_callback("resume_writing")

    def _warn_write_after_lost(self):
        logger.warning("socket.send() raised exception.")

    def _debug_log(self, what):
        # Debug mode's "<transport> received EOF" and the like (the native side
        # says which).
        logger.debug("%r %s", self, what)

    def _warn_unclosed(self, _warn=warnings.warn):
        # Collected with its socket open: as asyncio's __del__.
        _warn(f"unclosed transport {self!r}", ResourceWarning, source=self)
        self._close_socket()

    def __repr__(self):
        info = [self.__class__.__name__]
        if self._closed:
            info.append("closed")
        elif self.is_closing():
            info.append("closing")
        info.append(f"fd={self._sock_fd}")
        if not self._closed:
            # Whether the loop reads for it now, as asyncio's selector tells.
            polling = getattr(self, "_read_polling", None)
            if polling is None:
                polling = self.is_reading()
            info.append("read=" + ("polling" if polling else "idle"))
            size = self.get_write_buffer_size()
            info.append(f"write=<{'polling' if size else 'idle'}, bufsize={size}>")
        return "<{}>".format(" ".join(info))


class _SocketTransport(_SocketOwner, SocketTransportCore):
    """A stream transport over a connected, non-blocking socket.

    ``SocketTransportCore`` derives from ``asyncio.Transport`` and holds
    what asyncio's transports keep as attributes (``_sock``, ``_loop``,
    ``_extra``...); this class adds an instance ``__dict__`` and weak
    references, as asyncio's transports have. A server's connections are
    made natively (transport/stream.zig's ``serve``), without this ``__init__``.

    The ``__dict__`` of a transport that nobody assigned attributes to is
    never made: on 3.13, whose instances of a native-based class keep no
    inline values, that is what lets the interpreter specialize
    ``transport.write(...)`` and the like (``LOAD_ATTR_METHOD_LAZY_DICT``)
    instead of looking them up each time.
    """

    __slots__ = ("__dict__", "__weakref__")

    _start_tls_compatible = True
    # loop.sendfile() runs os.sendfile on the socket (zloop._sendfile).
    _sendfile_compatible = constants._SendfileMode.TRY_NATIVE

    def __init__(self, loop, sock, protocol, waiter=None, extra=None, server=None, borrowed=False):
        # `borrowed`: sock is the caller's (create_connection(sock=) and the
        # like), who may close it while the transport still uses it; the
        # native side then asks it for its fd before each system call.
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
        self._sock = sock
        # Looked up before the fd joins the loop: a factory that returned no
        # protocol fails here (AttributeError, as in asyncio) and leaves no
        # transport holding the fd for ever.
        connection_made = protocol.connection_made
        self._protocol_connected = True
        self._setup(loop, _sock_fd(sock), protocol, _reads(protocol), sock if borrowed else None)
        if server is not None:
            server._attach(self)
        _set_nodelay(sock)
        ctx = None
        if _TRANSPORT_OWNS_CONTEXT:
            ctx = contextvars.copy_context()
            self._set_context(ctx)
        loop.call_soon(connection_made, self, context=ctx)
        # Only once connection_made ran may data arrive.
        loop.call_soon(self._start_reading, context=ctx)
        if waiter is not None:
            loop.call_soon(futures._set_result_unless_cancelled, waiter, None)

    def set_protocol(self, protocol):
        self._set_protocol(protocol, _reads(protocol))
        self._protocol_connected = True

    def set_write_buffer_limits(self, high=None, low=None):
        self._set_limits(*_flow.write_limits(high, low))

    # Called by the native side (cold).

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

    @staticmethod
    def _sendfile_lost(fut, exc):
        # _call_connection_lost() during a loop.sendfile(): it fails (as
        # asyncio's empty waiter).
        if not fut.done():
            fut.set_exception(exc if exc is not None else ConnectionError("Connection is closed by peer"))



# A server's connections are made natively, of these classes.
_install_net(_SocketTransport, _tls._SSLProtocol, protocols.BufferedProtocol,
             trsock.TransportSocket, socket.socket)


# --------------------------------------------------------------- server


class Server(asyncio.AbstractServer):
    """What create_server()/create_unix_server() return (asyncio.Server's API)."""

    def __init__(self, loop, sockets, protocol_factory, backlog, unix_paths=(), borrowed=False):
        self._loop = loop
        self._sockets = sockets
        # The sockets are the caller's (create_server(sock=)), who may close
        # one while it is served (see _Acceptor).
        self._borrowed = borrowed
        self._waiters = []
        # The connections served, counted natively; their transports are
        # listed there (ServerConnections, transport/connections.zig). Anything else
        # handed to _attach() is kept here, as asyncio keeps its clients.
        self._conns = ServerConnections(self._wakeup)
        self._clients = weakref.WeakSet()
        self._protocol_factory = protocol_factory
        self._backlog = backlog
        self._serving = False
        self._serving_forever_fut = None
        # Unix socket files this server created, removed again on close().
        self._unix_paths = list(unix_paths)
        # Listening socket -> its native accept loop (_Acceptor), while serving.
        self._acceptors = {}

    def __repr__(self):
        return f"<{self.__class__.__name__} sockets={self.sockets!r}>"

    @property
    def _active_count(self):
        return self._conns.count

    # The transport is optional: asyncio's Server took none before 3.13,
    # and code written against 3.12 (CPython's own test_server) calls
    # _attach()/_detach() bare to hold the server open.
    def _attach(self, transport=None):
        assert self._sockets is not None
        if not self._conns._attach(transport) and transport is not None:
            self._clients.add(transport)

    def _detach(self, transport=None):
        if transport is not None:
            self._clients.discard(transport)
        # Wakes the server when that was its last connection after close().
        self._conns._detach(transport)

    def _wakeup(self):
        waiters = self._waiters
        self._waiters = None
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _start_serving(self):
        if self._serving:
            return
        self._serving = True
        for sock in self._sockets:
            sock.listen(self._backlog)
            acceptor = self._loop._start_serving(self._protocol_factory, sock, self, self._backlog)
            if acceptor is not None:
                acceptor._serve_natively(self._protocol_factory, self._conns)
                self._acceptors[sock] = acceptor

    def get_loop(self):
        return self._loop

    def is_serving(self):
        return self._serving

    @property
    def sockets(self):
        if self._sockets is None:
            return ()
        return tuple(trsock.TransportSocket(s) for s in self._sockets)

    def close(self):
        sockets = self._sockets
        if sockets is None:
            return
        self._sockets = None
        self._conns._close()
        for sock in sockets:
            self._loop._stop_serving(sock, self._acceptors.pop(sock, None))
        self._serving = False
        for path, inode in self._unix_paths:
            _unlink_socket_file(path, inode)
        self._unix_paths = []
        fut = self._serving_forever_fut
        if fut is not None and not fut.done():
            fut.cancel()
            self._serving_forever_fut = None
        if self._active_count == 0:
            self._wakeup()

    if sys.version_info >= (3, 13):  # new in 3.13, as asyncio.Server's

        def close_clients(self):
            for transport in self._conns._transports() + list(self._clients):
                transport.close()

        def abort_clients(self):
            for transport in self._conns._transports() + list(self._clients):
                transport.abort()

    async def start_serving(self):
        self._start_serving()
        # Let the loop register the listening sockets before returning.
        await asyncio.sleep(0)

    async def serve_forever(self):
        if self._serving_forever_fut is not None:
            raise RuntimeError(f"server {self!r} is already being awaited on serve_forever()")
        if self._sockets is None:
            raise RuntimeError(f"server {self!r} is closed")
        self._start_serving()
        self._serving_forever_fut = self._loop.create_future()
        try:
            await self._serving_forever_fut
        except asyncio.CancelledError:
            try:
                self.close()
                if _SERVE_FOREVER_CLOSES_CLIENTS:
                    self.close_clients()
                await self.wait_closed()
            finally:
                raise
        finally:
            self._serving_forever_fut = None

    async def wait_closed(self):
        if self._waiters is None:
            return
        waiter = self._loop.create_future()
        self._waiters.append(waiter)
        await waiter


class _Acceptor(AcceptorCore):
    """The native accept loop of one listening socket (src/python/transport/accept.zig):
    accepts in batches and calls ``callback(*args, conn, addr)`` for each
    connection. This side holds the listening socket and reports errors in
    asyncio's words. A served listener's fd counts as a transport's:
    ``add_reader``/``remove_reader`` on it raise RuntimeError (asyncio's
    selector loop would silently replace or drop its accept reader)."""

    __slots__ = ("_sock",)

    def __init__(self, loop, sock, backlog, callback, *args, borrowed=False):
        # `borrowed`: sock is the caller's, who may close it while it is
        # served; the native side then asks it for its fd before each accept.
        self._sock = sock
        owner = sock if borrowed else None
        self._start(loop, _sock_fd(sock), sock.family, sock.type, sock.proto, backlog, callback, args, owner)

    def __repr__(self):
        state = "paused" if self._paused else "serving" if self._serving else "closed"
        return f"<{type(self).__name__} fd={self._fd} {state}>"

    def close(self):
        self._close()

    def _out_of_resources(self, exc):
        # accept() failed with EMFILE/ENFILE/ENOBUFS/ENOMEM: the native side
        # stopped watching and resumes after ACCEPT_RETRY_DELAY; report as
        # asyncio's _accept_connection does.
        self._loop.call_exception_handler(
            {
                "message": "socket.accept() out of system resource",
                "exception": exc,
                "socket": trsock.TransportSocket(self._sock),
            }
        )

    def _callback_error(self, exc):
        # Any other accept() error, or an exception out of the callback:
        # asyncio raises it out of its reader callback into Handle._run.
        self._loop.call_exception_handler(
            {
                "message": f"Exception in callback {self!r}",
                "exception": exc,
                "socket": trsock.TransportSocket(self._sock),
            }
        )


def _interleave_by_family(infos, first_family_count):
    """getaddrinfo() results reordered as RFC 8305 section 4 asks:
    ``first_family_count - 1`` more addresses of the first family, then one
    of each family in turn (families in order of first appearance). As
    asyncio's ``_interleave_addrinfos``, the count slices the first family
    only when it is above 1, so a count that is no integer (1.5, inf)
    raises TypeError there and one of 1 or less (0.5, NaN) does not."""
    by_family = {}
    for info in infos:
        by_family.setdefault(info[0], []).append(info)
    queues = list(by_family.values())
    reordered = []
    if first_family_count > 1:
        reordered += queues[0][:first_family_count - 1]
        del queues[0][:first_family_count - 1]
    for turn in itertools.zip_longest(*queues):
        reordered.extend(info for info in turn if info is not None)
    return reordered


def _staggered_deadline(loop, delay_s):
    """When the next Happy Eyeballs attempt may start without a failure.
    A delay that cannot be added to the clock (an object with only
    `__index__`, an int beyond a float) fails as asyncio's wait_for on it
    does, inside its race: 3.14's `staggered_race` reports that as an
    ExceptionGroup (with assertions on, as its `__debug__` check has it)."""
    try:
        return loop.time() + delay_s
    except Exception as exc:
        if _STAGGERED_GROUPS:
            raise ExceptionGroup("staggered race failed", [exc]) from None
        raise


_STAGGERED_GROUPS = sys.version_info >= (3, 14) and __debug__


def _discard_attempt(task):
    """Done callback of a Happy Eyeballs attempt that lost: close the socket
    it may have connected, and mark its error as seen."""
    if task.cancelled():
        return
    if task.exception() is None:
        task.result().close()


# The socket-file calls below are _zloop's _path_stat (os.stat's (st_mode,
# st_ino)) and _unlink (os.unlink): the loop's own, as asyncio's are, which
# tools that patch os to find blocking calls in user code (blockbuster)
# allow by naming asyncio's files (sock/files.zig).


def _path_stat(path):
    """(st_mode, st_ino) of ``path``: natively through statx, or through
    os.stat on a kernel older than statx (Linux 4.11)."""
    try:
        return _native_path_stat(path)
    except OSError as err:
        if err.errno != errno.ENOSYS:
            raise
    st = os.stat(path)
    return st.st_mode, st.st_ino


def _socket_file_inode(path):
    """The inode of the socket file a server just bound, or None if gone."""
    try:
        return _path_stat(path)[1]
    except OSError:
        return None


def _unlink_socket_file(path, inode):
    """Remove a closing server's socket file, unless it is no longer the one
    the server bound (``inode``): another socket bound at the same path after
    the file was unlinked is left alone, as asyncio does."""
    if inode is None:
        return
    try:
        if _path_stat(path)[1] == inode:
            _unlink(path)
    except OSError:
        pass


def _remove_stale_unix_socket(path):
    """Remove the socket file a dead server left at ``path`` before binding
    there, as asyncio's create_unix_server and create_datagram_endpoint do;
    anything else at ``path`` stays (bind then reports it), and the abstract
    namespace (a leading NUL) has no file."""
    if not path or path[0] in (0, "\x00"):
        return
    try:
        if stat.S_ISSOCK(_path_stat(path)[0]):
            _unlink(path)
    except FileNotFoundError:
        pass
    except OSError as err:
        # The directory may allow creating the socket but not stat-ing it.
        logger.error("Unable to check or remove stale UNIX socket %r: %r", path, err)


# ---------------------------------------------------------------- mixin


class NetMixin(_sendfile.SendfileMixin, _tls.TLSMixin):
    """The loop's socket API; mixed into ``zloop.Loop``."""

    # ---------------------------------------------------- sock_* helpers

    def _check_sock(self, sock):
        _check_ssl_socket(sock)
        if self.get_debug() and sock.gettimeout() != 0:
            raise ValueError("the socket must be non-blocking")

    async def _sock_wait_for(self, fd, write, ready, sock, *args):
        """Wait for fd with ready(fut, fd, sock, *args) run on each readiness
        until it returns True (LoopCore._sock_wait: one-shot, no syscall to
        stop watching). A cancelled or abandoned wait stops watching at once.
        ``sock`` is the socket fd came from: once user code closed it, the
        wait ends with OSError(EBADF) rather than serve a file that took
        the number since."""
        fut = self._sock_wait(fd, write, ready, sock, *args)
        try:
            return await fut
        except BaseException:
            self._sock_cancel(fd, fut)
            raise
        finally:
            fut = None  # break the traceback cycle, as asyncio does

    @staticmethod
    def _sock_try(fut, fd, sock, op):
        """One non-blocking attempt of op(sock) finishing fut; False if
        the socket would block (op calls the socket's own method, which
        raises OSError(EBADF) once the socket is closed)."""
        if fut.done():
            return True
        try:
            result = op(sock)
        except (BlockingIOError, InterruptedError):
            return False
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            fut.set_exception(exc)
        else:
            fut.set_result(result)
        return True

    async def _sock_io(self, sock, read, op):
        self._check_sock(sock)
        try:
            return op(sock)
        except (BlockingIOError, InterruptedError):
            pass
        return await self._sock_wait_for(_sock_fd(sock), not read, self._sock_try, sock, op)

    # ------------------------------------------------------ sock_* API

    # sock_recv and sock_sendall are LoopCore's: native coroutines
    # (src/python/sock/calls.zig). sock_recv_into finishes its future from a
    # native readiness callback too (src/python/sock/ready.zig).

    async def sock_recv_into(self, sock, buf):
        self._check_sock(sock)
        try:
            return sock.recv_into(buf)
        except (BlockingIOError, InterruptedError):
            pass
        return await self._sock_wait_for(_sock_fd(sock), False, _sock_recv_into_ready, sock, buf)

    # The method is looked up on the socket at each attempt, as asyncio's
    # retry callbacks do (a socket object whose method is swapped between
    # attempts, as a test's mock, gets the new one).

    async def sock_recvfrom(self, sock, bufsize):
        return await self._sock_io(sock, True, operator.methodcaller("recvfrom", bufsize))

    async def sock_recvfrom_into(self, sock, buf, nbytes=0):
        if not nbytes:
            nbytes = len(buf)
        op = operator.methodcaller("recvfrom_into", buf, nbytes)
        return await self._sock_io(sock, True, op)

    async def sock_sendto(self, sock, data, address):
        return await self._sock_io(sock, False, operator.methodcaller("sendto", data, address))

    async def sock_connect(self, sock, address):
        self._check_sock(sock)
        if sock.family == socket.AF_INET or (_HAS_IPV6 and sock.family == socket.AF_INET6):
            address = await self._resolve_one(address, sock.family, sock.type, sock.proto)
        try:
            sock.connect(address)
            return
        except (BlockingIOError, InterruptedError):
            pass
        return await self._sock_wait_for(_sock_fd(sock), True, self._sock_connect_ready, sock, address)

    @staticmethod
    def _sock_connect_ready(fut, fd, sock, address):
        if fut.done():
            return True
        try:
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err != 0:
                raise OSError(err, f"Connect call failed {address}")
        except (BlockingIOError, InterruptedError):
            return False
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            fut.set_exception(exc)
        else:
            fut.set_result(None)
        finally:
            # exc's traceback holds this frame: without this, frame -> fut ->
            # exc -> traceback is a cycle that outlives the call (as asyncio's
            # _sock_connect_cb since CPython gh-124859).
            fut = None
        return True

    async def sock_accept(self, sock):
        return await self._sock_io(sock, True, self._accept_nonblocking)

    @staticmethod
    def _accept_nonblocking(sock):
        conn, address = sock.accept()
        conn.setblocking(False)
        return conn, address

    async def _resolve_address(self, address, family, type, proto, flags=0):
        """getaddrinfo() entries for `address` (host, port, *rest). A
        numeric host skips the resolver, as asyncio's _ensure_resolved does
        (with asyncio's own helper, so both agree on every Python): the
        port then reaches the socket call as int(port), which refuses one
        beyond 0-65535 (OverflowError) where getaddrinfo would wrap it."""
        host, port = address[:2]
        info = base_events._ipaddr_info(host, port, family, type, proto, *address[2:])
        if info is not None:
            return [info]
        return await self.getaddrinfo(host, port, family=family, type=type, proto=proto, flags=flags)

    async def _resolve_one(self, address, family, type, proto):
        infos = await self._resolve_address(address, family, type, proto)
        if not infos:
            raise OSError(f"getaddrinfo({address[0]!r}) returned empty list")
        resolved = infos[0][4]
        if len(address) > 2 and len(resolved) > 2:
            resolved = resolved[:2] + tuple(address[2:])
        return resolved

    # ----------------------------------------------------- transports

    def _make_socket_transport(self, sock, protocol, waiter=None, *, extra=None, server=None, borrowed=False):
        return _SocketTransport(self, sock, protocol, waiter, extra, server, borrowed)

    async def _create_connection_transport(
        self, sock, protocol_factory, ssl=None, server_hostname=None, server_side=False,
        ssl_handshake_timeout=None, ssl_shutdown_timeout=None, borrowed=False,
    ):
        sock.setblocking(False)
        protocol = protocol_factory()
        waiter = self.create_future()
        if ssl:
            tls = _tls.ssl_protocol(
                self, protocol, ssl, waiter, server_side=server_side,
                server_hostname=server_hostname,
                handshake_timeout=ssl_handshake_timeout,
                shutdown_timeout=ssl_shutdown_timeout,
            )
            self._make_socket_transport(sock, tls, borrowed=borrowed)
            transport = tls._app_transport
        else:
            transport = self._make_socket_transport(sock, protocol, waiter, borrowed=borrowed)
        try:
            await waiter
        except BaseException:
            transport.close()
            raise
        return transport, protocol

    def _serving_factory(self, protocol_factory, ssl, ssl_handshake_timeout, ssl_shutdown_timeout):
        """The protocol factory a server uses: with TLS, each accepted
        connection first speaks TLS (asyncio.sslproto) under the app's protocol."""
        _tls.check_server_args(ssl, ssl_handshake_timeout, ssl_shutdown_timeout)
        if ssl is None:
            return protocol_factory
        return _tls.server_protocol_factory(
            self, protocol_factory, ssl, ssl_handshake_timeout, ssl_shutdown_timeout
        )

    async def _connect_one(self, family, type, proto, address, local_infos):
        sock = socket.socket(family=family, type=type, proto=proto)
        try:
            sock.setblocking(False)
            if local_infos is not None:
                self._bind_local(sock, family, local_infos)
            await self.sock_connect(sock, address)
            return sock
        except BaseException:
            sock.close()
            raise

    async def _connect_in_turn(self, infos, local_infos, exceptions):
        """One address after the other; the first connected socket, or None
        with every OSError in ``exceptions``."""
        try:
            for fam, type_, proto_, _, address in infos:
                try:
                    return await self._connect_one(fam, type_, proto_, address, local_infos)
                except OSError as exc:
                    exceptions.append(exc)
            return None
        finally:
            # Each error's traceback holds this frame: without this, the
            # frame's `exceptions` keeps a list referring to the error alive
            # as long as the error is (asyncio's _connect_sock does the same).
            exceptions = None

    async def _connect_staggered(self, infos, local_infos, delay_s, exceptions):
        """Happy Eyeballs (RFC 8305 section 5), timed as asyncio's: attempt
        i+1 starts once attempt i failed or ``delay_s`` seconds after attempt
        i started, whichever comes first, while earlier attempts go on. The
        first socket to connect wins; every other attempt is cancelled and
        its socket closed (a connected loser too). Returns the socket, or
        None with the OSErrors in ``exceptions`` in the order the attempts
        started; any other exception ends the race and propagates."""
        pending = iter(infos)
        attempts = []  # in start order
        running = set()
        errors = {}
        winner = None
        latest = None
        deadline = 0.0  # when the next attempt may start without a failure
        turn_over = True
        try:
            while True:
                if turn_over and pending is not None:
                    info = next(pending, None)
                    if info is not None:
                        fam, type_, proto_, _, address = info
                        latest = self.create_task(
                            self._connect_one(fam, type_, proto_, address, local_infos)
                        )
                        attempts.append(latest)
                        running.add(latest)
                        deadline = _staggered_deadline(self, delay_s)
                    else:
                        pending = None
                if not running:
                    return None
                timeout = None if pending is None else max(0.0, deadline - self.time())
                done, _ = await asyncio.wait(
                    running, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                # Nothing finished before the deadline: the next address's turn.
                turn_over = not done or (pending is not None and self.time() >= deadline)
                for task in attempts:  # by start order: the earliest winner wins
                    if task not in done:
                        continue
                    running.discard(task)
                    exc = task.exception()
                    if exc is None:
                        winner = task
                        return task.result()
                    if not isinstance(exc, OSError):
                        raise exc
                    errors[task] = exc
                    turn_over = turn_over or task is latest
        finally:
            for task in attempts:
                if task is not winner:
                    task.cancel()
                    task.add_done_callback(_discard_attempt)
            exceptions.extend(errors[t] for t in attempts if t in errors)

    @staticmethod
    def _bind_local(sock, family, local_infos):
        last = None
        for lfam, _, _, _, laddr in local_infos:
            if lfam != family:
                continue
            try:
                sock.bind(laddr)
                return
            except OSError as exc:
                last = OSError(
                    exc.errno,
                    f"error while attempting to bind on address {laddr!r}: {exc.strerror.lower()}",
                )
        raise last if last is not None else OSError(f"no matching local address with family={family} found")

    async def create_connection(
        self, protocol_factory, host=None, port=None, *, ssl=None, family=0, proto=0,
        flags=0, sock=None, local_addr=None, server_hostname=None,
        ssl_handshake_timeout=None, ssl_shutdown_timeout=None,
        happy_eyeballs_delay=None, interleave=None, all_errors=False,
    ):
        """Connect to host:port (or adopt ``sock``) and build a transport."""
        server_hostname = _tls.client_server_hostname(
            ssl, host, server_hostname, ssl_handshake_timeout, ssl_shutdown_timeout
        )
        borrowed = sock is not None
        if sock is not None:
            _check_ssl_socket(sock)
        if host is not None or port is not None:
            if sock is not None:
                raise ValueError("host/port and sock can not be specified at the same time")
            infos = await self._resolve_address((host, port), family, socket.SOCK_STREAM, proto, flags)
            if not infos:
                raise OSError("getaddrinfo() returned empty list")
            local_infos = None
            if local_addr is not None:
                local_infos = await self._resolve_address(local_addr, family, socket.SOCK_STREAM, proto, flags)
                if not local_infos:
                    raise OSError("getaddrinfo() returned empty list")
            if happy_eyeballs_delay is not None and interleave is None:
                interleave = 1  # RFC 8305's default: alternate families
            if interleave:
                infos = _interleave_by_family(infos, interleave)
            exceptions = []
            if happy_eyeballs_delay is None:
                sock = await self._connect_in_turn(infos, local_infos, exceptions)
            else:
                sock = await self._connect_staggered(
                    infos, local_infos, happy_eyeballs_delay, exceptions
                )
            if sock is None:
                try:
                    if all_errors:
                        raise ExceptionGroup("create_connection failed", exceptions)
                    if len(exceptions) == 1:
                        raise exceptions[0]
                    model = str(exceptions[0])
                    if all(str(exc) == model for exc in exceptions):
                        raise exceptions[0]
                    raise OSError("Multiple exceptions: {}".format(", ".join(str(exc) for exc in exceptions)))
                finally:
                    exceptions = None
        else:
            if sock is None:
                raise ValueError("host and port was not specified and no sock specified")
            if sock.type != socket.SOCK_STREAM:
                raise ValueError(f"A Stream Socket was expected, got {sock!r}")
        transport, protocol = await self._create_connection_transport(
            sock, protocol_factory, ssl, server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout, borrowed=borrowed,
        )
        if self.get_debug():
            # As asyncio: the transport's socket (a TLS one's is the raw one).
            logger.debug("%r connected to %s:%r: (%r, %r)",
                         transport.get_extra_info("socket"), host, port, transport, protocol)
        return transport, protocol

    async def create_unix_connection(
        self, protocol_factory, path=None, *, ssl=None, sock=None, server_hostname=None,
        ssl_handshake_timeout=None, ssl_shutdown_timeout=None,
    ):
        """Connect to a Unix socket at ``path`` (or adopt ``sock``)."""
        if ssl:
            # A path is no host name: the caller must say what to verify.
            if server_hostname is None:
                raise ValueError("you have to pass server_hostname when using ssl")
        elif server_hostname is not None:
            raise ValueError("server_hostname is only meaningful with ssl")
        _tls.client_server_hostname(
            ssl, server_hostname, server_hostname, ssl_handshake_timeout, ssl_shutdown_timeout
        )
        borrowed = sock is not None
        if path is not None:
            if sock is not None:
                raise ValueError("path and sock can not be specified at the same time")
            path = os.fspath(path)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0)
            try:
                sock.setblocking(False)
                await self.sock_connect(sock, path)
            except BaseException:
                sock.close()
                raise
        else:
            if sock is None:
                raise ValueError("no path and sock were specified")
            if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
                raise ValueError(f"A UNIX Domain Stream Socket was expected, got {sock!r}")
        return await self._create_connection_transport(
            sock, protocol_factory, ssl, server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout, borrowed=borrowed,
        )

    async def connect_accepted_socket(
        self, protocol_factory, sock, *, ssl=None, ssl_handshake_timeout=None,
        ssl_shutdown_timeout=None,
    ):
        """Wrap an already accepted connection in a transport."""
        if sock.type != socket.SOCK_STREAM:
            raise ValueError(f"A Stream Socket was expected, got {sock!r}")
        _tls.check_accepted_args(ssl, ssl_handshake_timeout, ssl_shutdown_timeout)
        _check_ssl_socket(sock)
        transport, protocol = await self._create_connection_transport(
            sock, protocol_factory, ssl, "", server_side=True,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout, borrowed=True,
        )
        if self.get_debug():
            logger.debug("%r handled: (%r, %r)", transport.get_extra_info("socket"), transport, protocol)
        return transport, protocol

    # --------------------------------------------------------- servers

    async def create_server(
        self, protocol_factory, host=None, port=None, *, family=socket.AF_UNSPEC,
        flags=socket.AI_PASSIVE, sock=None, backlog=100, ssl=None, reuse_address=None,
        reuse_port=None, keep_alive=None, ssl_handshake_timeout=None,
        ssl_shutdown_timeout=None, start_serving=True,
    ):
        """Listen on host:port (every address it resolves to) or on ``sock``."""
        protocol_factory = self._serving_factory(
            protocol_factory, ssl, ssl_handshake_timeout, ssl_shutdown_timeout
        )
        if sock is not None:
            _check_ssl_socket(sock)
        if host is not None or port is not None:
            if sock is not None:
                raise ValueError("host/port and sock can not be specified at the same time")
            if reuse_address is None:
                reuse_address = os.name == "posix" and sys.platform != "cygwin"
            sockets = await self._bind_all(
                host, port, family, flags, reuse_address, reuse_port, keep_alive
            )
        else:
            if sock is None:
                raise ValueError("Neither host/port nor sock were specified")
            if sock.type != socket.SOCK_STREAM:
                raise ValueError(f"A Stream Socket was expected, got {sock!r}")
            sockets = [sock]
        for s in sockets:
            s.setblocking(False)
        server = Server(self, sockets, protocol_factory, backlog, borrowed=sock is not None)
        if start_serving:
            server._start_serving()
            await asyncio.sleep(0)
        if self.get_debug():
            # As asyncio's create_server (its create_unix_server says nothing).
            logger.info("%r is serving", server)
        return server

    async def _bind_all(self, host, port, family, flags, reuse_address, reuse_port, keep_alive):
        if host == "":
            hosts = [None]
        elif isinstance(host, str) or not isinstance(host, collections.abc.Iterable):
            hosts = [host]
        else:
            hosts = host
        infos = set()
        for h in hosts:
            found = await self._resolve_address((h, port), family, socket.SOCK_STREAM, 0, flags)
            infos.update(found)
        sockets = []
        try:
            for af, type_, proto, _, address in infos:
                try:
                    sock = socket.socket(af, type_, proto)
                except socket.error:
                    continue
                sockets.append(sock)
                if reuse_address:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, True)
                if reuse_port:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                if keep_alive:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, True)
                # As asyncio: an IPv6 socket listens on IPv6 only, so the
                # IPv4 and IPv6 wildcard binds do not clash.
                if _HAS_IPV6 and af == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, True)
                try:
                    sock.bind(address)
                except OSError as err:
                    msg = f"error while attempting to bind on address {address!r}: {err.strerror.lower()}"
                    raise OSError(err.errno, msg) from None
            # No hosts at all (host=[]) is a server with no sockets before
            # 3.13, as asyncio's; 3.13 made any socket-less server an error.
            if not sockets and (infos or sys.version_info >= (3, 13)):
                raise OSError(f"could not bind on any address out of {[i[4] for i in infos]!r}")
        except BaseException:
            for sock in sockets:
                sock.close()
            raise
        return sockets

    async def create_unix_server(
        self, protocol_factory, path=None, *, sock=None, backlog=100, ssl=None,
        ssl_handshake_timeout=None, ssl_shutdown_timeout=None, start_serving=True,
        cleanup_socket=True,
    ):
        """Listen on a Unix socket at ``path`` (replacing a stale one)."""
        protocol_factory = self._serving_factory(
            protocol_factory, ssl, ssl_handshake_timeout, ssl_shutdown_timeout
        )
        unix_paths = []
        if path is not None:
            if sock is not None:
                raise ValueError("path and sock can not be specified at the same time")
            path = os.fspath(path)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            # As asyncio, an empty path fails here, before any bind.
            if path[0] not in (0, "\x00"):
                _remove_stale_unix_socket(path)
            try:
                sock.bind(path)
            except OSError as exc:
                sock.close()
                if exc.errno == errno.EADDRINUSE:
                    raise OSError(errno.EADDRINUSE, f"Address {path!r} is already in use") from None
                raise
            except BaseException:
                sock.close()
                raise
            if cleanup_socket and sys.version_info >= (3, 13) and path[0] not in (0, "\x00"):
                unix_paths.append((path, _socket_file_inode(path)))
        else:
            if sock is None:
                raise ValueError("path was not specified, and no sock specified")
            if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
                raise ValueError(f"A UNIX Domain Stream Socket was expected, got {sock!r}")
            if cleanup_socket and sys.version_info >= (3, 13):
                name = sock.getsockname()
                if isinstance(name, str) and name and name[0] != "\x00":
                    unix_paths.append((name, _socket_file_inode(name)))
        sock.setblocking(False)
        server = Server(self, [sock], protocol_factory, backlog, unix_paths, borrowed=path is None)
        if start_serving:
            server._start_serving()
            await asyncio.sleep(0)
        return server

    def _start_serving(self, protocol_factory, sock, server, backlog):
        """Accept on listening `sock`: natively (an `_Acceptor`, returned,
        for `_stop_serving`) for TCP and Unix sockets, else through
        `_accept_ready` on a reader (None returned)."""
        if sock.family in _NATIVE_ACCEPT_FAMILIES:
            borrowed = getattr(server, "_borrowed", False)
            return _Acceptor(self, sock, backlog, self._accept_one, protocol_factory, server, borrowed=borrowed)
        self._add_reader_for(sock, _sock_fd(sock), self._accept_ready, protocol_factory, sock, server, backlog)
        return None

    def _stop_serving(self, sock, acceptor=None):
        if acceptor is not None:
            acceptor.close()
        elif not self.is_closed():
            self._remove_reader(_sock_fd(sock))
        sock.close()

    def _accept_ready(self, protocol_factory, sock, server, backlog):
        # The Python accept loop, for families transport/accept.zig does not serve.
        # Batch: take up to `backlog` connections per readiness event.
        for _ in range(backlog):
            try:
                conn, addr = sock.accept()
                conn.setblocking(False)
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                if exc.errno not in _OUT_OF_RESOURCES:
                    raise
                self.call_exception_handler(
                    {
                        "message": "socket.accept() out of system resource",
                        "exception": exc,
                        "socket": trsock.TransportSocket(sock),
                    }
                )
                self._remove_reader(_sock_fd(sock))
                self.call_later(_ACCEPT_RETRY_DELAY_S, self._start_serving, protocol_factory, sock, server, backlog)
                return
            self._accept_one(protocol_factory, server, conn, addr)

    def _accept_one(self, protocol_factory, server, conn, addr):
        # One accepted connection, from transport/accept.zig or _accept_ready: the
        # protocol and its transport (asyncio's _accept_connection2).
        if self.get_debug():
            # As asyncio's _accept_connection, which then makes them in a
            # task of their own: debug mode times its step, so a slow
            # protocol factory is reported as there.
            logger.debug("%r got a new connection from %r: %r", server, addr, conn)
            self.create_task(self._accept_connection2(protocol_factory, server, conn, addr))
            return
        self._make_accepted(protocol_factory, server, conn, addr)

    async def _accept_connection2(self, protocol_factory, server, conn, addr):
        self._make_accepted(protocol_factory, server, conn, addr)

    def _make_accepted(self, protocol_factory, server, conn, addr):
        try:
            protocol = protocol_factory()
            self._make_socket_transport(conn, protocol, extra={"peername": addr}, server=server)
        except (SystemExit, KeyboardInterrupt):
            conn.close()
            raise
        except BaseException as exc:
            conn.close()
            # As asyncio's _accept_connection2: reported in debug mode only.
            if self.get_debug():
                self.call_exception_handler(
                    {
                        "message": "Error on transport creation for incoming connection",
                        "exception": exc,
                    }
                )
