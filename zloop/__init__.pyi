"""Types of zloop's public API (the package's modules are untyped inside)."""

import asyncio
import contextvars
import sys
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar

_T = TypeVar("_T")

__version__: Final[str]
BACKEND: str
"""The backend a loop created now gets: ``$ZLOOP_BACKEND`` or ``"epoll"``."""

class Handle:
    """A native ``asyncio.Handle`` look-alike (not a subclass of it)."""

    def cancel(self) -> None: ...
    def cancelled(self) -> bool: ...
    def get_context(self) -> contextvars.Context: ...

class TimerHandle(Handle):
    def when(self) -> float: ...

class Loop(asyncio.AbstractEventLoop):
    """An asyncio event loop whose engine is written in Zig. Its methods have
    the signatures of asyncio's own loop on the running Python."""

    def __init__(self) -> None: ...
    add_reader = asyncio.AbstractEventLoop.add_reader
    add_signal_handler = asyncio.AbstractEventLoop.add_signal_handler
    add_writer = asyncio.AbstractEventLoop.add_writer
    call_at = asyncio.AbstractEventLoop.call_at
    call_exception_handler = asyncio.AbstractEventLoop.call_exception_handler
    call_later = asyncio.AbstractEventLoop.call_later
    call_soon = asyncio.AbstractEventLoop.call_soon
    call_soon_threadsafe = asyncio.AbstractEventLoop.call_soon_threadsafe
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
