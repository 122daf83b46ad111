"""Types of zloop's public API (the package's modules are untyped inside)."""

import asyncio
import contextvars
import sys
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar, TypeVarTuple, Unpack

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")

__version__: Final[str]
BACKENDS: Final[tuple[str, ...]]
"""The backends this build of zloop has, the default first: on Linux
``("epoll", "io_uring")``."""
BACKEND: str
"""The backend a loop created now asks for: ``$ZLOOP_BACKEND``, else the
default. A name not in ``BACKENDS`` raises ``ValueError``, as creating a loop
does."""

class Handle:
    """A native handle: ``asyncio.Handle``'s methods, but not a subclass of
    it, so ``isinstance(handle, asyncio.Handle)`` is False (see
    docs/differences.md)."""

    def cancel(self) -> None: ...
    def cancelled(self) -> bool: ...
    def get_context(self) -> contextvars.Context: ...

class TimerHandle(Handle):
    """A native timer handle (not a subclass of ``asyncio.TimerHandle``)."""

    def when(self) -> float: ...
    def __hash__(self) -> int: ...
    def __lt__(self, other: TimerHandle) -> bool: ...
    def __le__(self, other: TimerHandle) -> bool: ...
    def __gt__(self, other: TimerHandle) -> bool: ...
    def __ge__(self, other: TimerHandle) -> bool: ...
    def __eq__(self, other: object) -> bool: ...

class Loop(asyncio.AbstractEventLoop):
    """An asyncio event loop whose engine is written in Zig. Its methods have
    the signatures of asyncio's own loop on the running Python, but that the
    call_* methods return zloop's own handles."""

    def __init__(self) -> None: ...
    @property
    def backend(self) -> str:
        """The backend this loop runs on, one of ``BACKENDS``."""
    @property
    def _backend(self) -> str:
        """``backend``, under the name documented before it was public."""
    @property
    def _backend_features(self) -> tuple[str, ...]:
        """The optional features the backend uses (io_uring's, by the names
        ``ZLOOP_URING_OFF`` takes); ``()`` on epoll and kqueue."""
    # The handles are zloop's, which asyncio's AbstractEventLoop does not
    # allow for: the overrides are incompatible in type as they are at run
    # time, and say so.
    def call_soon(  # type: ignore[override]
        self, callback: Callable[[Unpack[_Ts]], object], *args: Unpack[_Ts],
        context: contextvars.Context | None = None
    ) -> Handle: ...
    def call_soon_threadsafe(  # type: ignore[override]
        self, callback: Callable[[Unpack[_Ts]], object], *args: Unpack[_Ts],
        context: contextvars.Context | None = None
    ) -> Handle: ...
    def call_later(  # type: ignore[override]
        self, delay: float, callback: Callable[[Unpack[_Ts]], object], *args: Unpack[_Ts],
        context: contextvars.Context | None = None
    ) -> TimerHandle: ...
    def call_at(  # type: ignore[override]
        self, when: float, callback: Callable[[Unpack[_Ts]], object], *args: Unpack[_Ts],
        context: contextvars.Context | None = None
    ) -> TimerHandle: ...
    add_reader = asyncio.AbstractEventLoop.add_reader
    add_signal_handler = asyncio.AbstractEventLoop.add_signal_handler
    add_writer = asyncio.AbstractEventLoop.add_writer
    call_exception_handler = asyncio.AbstractEventLoop.call_exception_handler
    close = asyncio.AbstractEventLoop.close
    connect_read_pipe = asyncio.AbstractEventLoop.connect_read_pipe
    connect_write_pipe = asyncio.AbstractEventLoop.connect_write_pipe
    create_connection = asyncio.AbstractEventLoop.create_connection
    create_datagram_endpoint = asyncio.AbstractEventLoop.create_datagram_endpoint
    create_future = asyncio.AbstractEventLoop.create_future
    create_server = asyncio.AbstractEventLoop.create_server
    create_task = asyncio.AbstractEventLoop.create_task
    default_exception_handler = asyncio.AbstractEventLoop.default_exception_handler
    get_debug = asyncio.AbstractEventLoop.get_debug
    get_exception_handler = asyncio.AbstractEventLoop.get_exception_handler
    get_task_factory = asyncio.AbstractEventLoop.get_task_factory
    getaddrinfo = asyncio.AbstractEventLoop.getaddrinfo
    getnameinfo = asyncio.AbstractEventLoop.getnameinfo
    is_closed = asyncio.AbstractEventLoop.is_closed
    is_running = asyncio.AbstractEventLoop.is_running
    remove_reader = asyncio.AbstractEventLoop.remove_reader
    remove_signal_handler = asyncio.AbstractEventLoop.remove_signal_handler
    remove_writer = asyncio.AbstractEventLoop.remove_writer
    run_forever = asyncio.AbstractEventLoop.run_forever
    run_in_executor = asyncio.AbstractEventLoop.run_in_executor
    run_until_complete = asyncio.AbstractEventLoop.run_until_complete
    sendfile = asyncio.AbstractEventLoop.sendfile
    set_debug = asyncio.AbstractEventLoop.set_debug
    set_default_executor = asyncio.AbstractEventLoop.set_default_executor
    set_exception_handler = asyncio.AbstractEventLoop.set_exception_handler
    set_task_factory = asyncio.AbstractEventLoop.set_task_factory
    shutdown_asyncgens = asyncio.AbstractEventLoop.shutdown_asyncgens
    shutdown_default_executor = asyncio.AbstractEventLoop.shutdown_default_executor
    sock_accept = asyncio.AbstractEventLoop.sock_accept
    sock_connect = asyncio.AbstractEventLoop.sock_connect
    sock_recv = asyncio.AbstractEventLoop.sock_recv
    sock_recv_into = asyncio.AbstractEventLoop.sock_recv_into
    sock_recvfrom = asyncio.AbstractEventLoop.sock_recvfrom
    sock_recvfrom_into = asyncio.AbstractEventLoop.sock_recvfrom_into
    sock_sendall = asyncio.AbstractEventLoop.sock_sendall
    sock_sendfile = asyncio.AbstractEventLoop.sock_sendfile
    sock_sendto = asyncio.AbstractEventLoop.sock_sendto
    start_tls = asyncio.AbstractEventLoop.start_tls
    stop = asyncio.AbstractEventLoop.stop
    subprocess_exec = asyncio.AbstractEventLoop.subprocess_exec
    subprocess_shell = asyncio.AbstractEventLoop.subprocess_shell
    time = asyncio.AbstractEventLoop.time

def new_event_loop() -> Loop: ...
def run(main: Coroutine[Any, Any, _T], *, debug: bool | None = None, **run_kwargs: Any) -> _T: ...

if sys.version_info < (3, 16):
    class EventLoopPolicy(asyncio.DefaultEventLoopPolicy):
        """An event loop policy whose loops are zloop loops (deprecated with
        asyncio's policies from 3.14)."""

    def install() -> None: ...
