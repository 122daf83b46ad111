"""``zloop.Loop``: the public event loop.

The hot paths (scheduling, timers, fd readiness, the run loop) are native,
inherited from ``_zloop.LoopCore``. This module holds the cold paths:
running/closing, executors, DNS, signals, async generators, exception
handling and debug-mode support, each with stock asyncio's semantics.
"""

import asyncio
import concurrent.futures
import errno
import inspect
import logging
import os
import signal
import socket
import sys
import threading
import traceback
import warnings
import weakref
from asyncio import coroutines, events, format_helpers, futures, tasks

from . import _handles, _net, _udp, _unix
from ._zloop import LoopCore, _install

# The modules, not their classes: the loop makes whatever futures.Future and
# tasks.Task are when it is called, as asyncio's does.
_install(_handles.handle_repr, futures, tasks)

logger = logging.getLogger("asyncio")

# A loop that asked for io_uring and runs epoll says so once a process.
_fallback_said = False


def _say_backend(loop):
    global _fallback_said
    if _fallback_said or loop._backend == "io_uring":
        return
    if os.environ.get("ZLOOP_BACKEND") != "io_uring":
        return
    _fallback_said = True
    logger.debug(
        "zloop: ZLOOP_BACKEND asks for io_uring, which this kernel refuses (too old, "
        "a seccomp profile, or the io_uring_disabled sysctl): loops run on %s", loop._backend
    )


# Depth of coroutine origin tracking in debug mode, as asyncio's constant.
_DEBUG_STACK_DEPTH = 10
# asyncio's own check for coroutine functions: 3.14 deprecates the public
# name (for removal in 3.16) and keeps a private one that does not warn.
_iscoroutinefunction = getattr(coroutines, "_iscoroutinefunction", None) or getattr(
    coroutines, "iscoroutinefunction", inspect.iscoroutinefunction
)


def _fileobj_to_fd(fileobj):
    """An int fd from an int or an object with fileno(), as selectors do."""
    if isinstance(fileobj, int):
        fd = fileobj
    else:
        try:
            fd = int(fileobj.fileno())
        except (AttributeError, TypeError, ValueError):
            raise ValueError(f"Invalid file object: {fileobj!r}") from None
    if fd < 0:
        raise ValueError(f"Invalid file descriptor: {fd}")
    return fd


def _remember_fileobj(fileobjs, fd, fileobj):
    """Note which object a watched fd came from (ints need no note)."""
    if isinstance(fileobj, int):
        fileobjs.pop(fd, None)
    else:
        fileobjs[fd] = fileobj


def _registered_fd(fileobjs, fileobj):
    """The fd to stop watching for ``fileobj``. A closed socket's fileno() is
    -1: as asyncio's selector (which then searches its keys for the object
    itself), find the fd it was added with; one not watched is refused."""
    if not isinstance(fileobj, int):
        try:
            fd = int(fileobj.fileno())
        except (AttributeError, TypeError, ValueError):
            raise ValueError(f"Invalid file object: {fileobj!r}") from None
        if fd < 0:
            for known_fd, known in fileobjs.items():
                if known is fileobj:
                    return known_fd
    return _fileobj_to_fd(fileobj)


def _stop_when_done(fut):
    # run_until_complete's done-callback: stop the loop the future belongs to
    # unless the future was cancelled by a KeyboardInterrupt-style exit.
    if not fut.cancelled():
        exc = fut.exception()
        if isinstance(exc, (SystemExit, KeyboardInterrupt)):
            return
    futures._get_loop(fut).stop()


def _noop_signal_handler(signum, frame):
    """Python-level handler whose only job is to make CPython write the
    signal number to the wakeup fd; the loop dispatches from there."""


class Loop(LoopCore, _net.NetMixin, _udp.DatagramMixin, _unix.UnixMixin, asyncio.AbstractEventLoop):
    """An asyncio event loop whose engine is written in Zig."""

    # The loop's own attributes are slots, so its __dict__ is made only when
    # someone else assigns one: on 3.13, whose instances of a native-based
    # class keep no inline values, a dict that was never made is what lets
    # the interpreter specialize `loop.call_later(...)` and the like
    # (LOAD_ATTR_METHOD_LAZY_DICT). 3.11 and 3.12 specialize either way.
    __slots__ = (
        "_pid", "_default_executor", "_executor_shutdown_called", "_exception_handler",
        "_asyncgens", "_asyncgens_shutdown_called", "_coroutine_origin_tracking_enabled",
        "_coroutine_origin_tracking_saved_depth", "_signal_handlers", "_signal_rsock",
        "_signal_wsock", "_reader_fileobjs", "_writer_fileobjs", "_zloop_children",
        "_tls_read_buffer",
        "__dict__",  # LoopCore has weak references already
    )

    @property
    def backend(self):
        """The backend this loop runs on: one of ``zloop.BACKENDS``. It is
        what ``ZLOOP_BACKEND`` asked for when the loop was created, except
        that a kernel that refuses io_uring gives the loop epoll."""
        return self._backend

    def __init__(self):
        self._pid = os.getpid()
        self._default_executor = None
        self._executor_shutdown_called = False
        self._exception_handler = None
        self._asyncgens = weakref.WeakSet()
        self._asyncgens_shutdown_called = False
        self._coroutine_origin_tracking_enabled = False
        self._coroutine_origin_tracking_saved_depth = None
        self._signal_handlers = {}
        self._signal_rsock = None
        self._signal_wsock = None
        # fd -> the object (not an int) that add_reader/add_writer was given,
        # so that remove_reader(obj) still works once obj is closed and its
        # fileno() is -1, as asyncio's selector finds the key by the object.
        self._reader_fileobjs = {}
        self._writer_fileobjs = {}
        self._tls_read_buffer = None  # made by the first TLS transport: _tls._read_buffer
        self.set_debug(coroutines._is_debug_mode())
        if not _fallback_said:
            _say_backend(self)

    def __repr__(self):
        return (
            f"<{type(self).__name__} running={self.is_running()} "
            f"closed={self.is_closed()} debug={self.get_debug()}>"
        )

    # Late in the interpreter's shutdown the modules' globals are None and
    # the builtins may be gone: what this and _close use is bound here.
    # (ResourceWarning too: the shadowing name keeps the line dev mode
    # prints with the warning the same as asyncio's.)
    def __del__(self, _warn=warnings.warn, ResourceWarning=ResourceWarning, _finalizing=sys.is_finalizing):  # noqa: A002
        if self.is_closed():
            return
        try:
            _warn(f"unclosed event loop {self!r}", ResourceWarning, source=self)
        finally:
            # Closed even when the warning fails (the warnings machinery
            # gone, or -W error making it an exception).
            if not self.is_running():
                try:
                    self.close()
                except:  # noqa: E722  (a bare except: no name to look up)
                    if not _finalizing():
                        raise
                    # A subclass's close() that needs what the shutdown
                    # took: what the loop holds natively goes anyway.
                    self._close_native()

    # ------------------------------------------------------------ running

    def _check_closed(self):
        if self.is_closed():
            raise RuntimeError("Event loop is closed")

    def _check_running(self):
        if self.is_running():
            raise RuntimeError("This event loop is already running")
        if events._get_running_loop() is not None:
            raise RuntimeError("Cannot run the event loop while another loop is running")

    def _check_process(self):
        if os.getpid() != self._pid:
            raise RuntimeError(
                f"this zloop event loop was created in process {self._pid} and "
                f"cannot be used in forked process {os.getpid()}"
            )

    def run_forever(self):
        """Run until stop() is called."""
        self._check_closed()
        self._check_running()
        self._check_process()
        self._set_coroutine_origin_tracking(self.get_debug())
        old_hooks = sys.get_asyncgen_hooks()
        try:
            self._thread_id = threading.get_ident()
            sys.set_asyncgen_hooks(
                firstiter=self._asyncgen_firstiter_hook,
                finalizer=self._asyncgen_finalizer_hook,
            )
            events._set_running_loop(self)
            self._run_forever_native()
        finally:
            self._stopping = False
            self._thread_id = None
            events._set_running_loop(None)
            self._set_coroutine_origin_tracking(False)
            sys.set_asyncgen_hooks(*old_hooks)

    def run_until_complete(self, future):
        """Run until the future (or coroutine, wrapped in a task) is done."""
        self._check_closed()
        self._check_running()
        wrapped = not futures.isfuture(future)
        future = tasks.ensure_future(future, loop=self)
        if wrapped:
            # The caller never sees this task, so an exception it raises is
            # not "never retrieved": run_until_complete re-raises it.
            future._log_destroy_pending = False
        future.add_done_callback(_stop_when_done)
        try:
            self.run_forever()
        except BaseException:
            if wrapped and future.done() and not future.cancelled():
                future.exception()  # mark retrieved; the caller gets the raise
            raise
        finally:
            future.remove_done_callback(_stop_when_done)
        if not future.done():
            raise RuntimeError("Event loop stopped before Future completed.")
        return future.result()

    def close(self):
        """Close the loop: drop pending callbacks, shut the executor down."""
        self._close()

    # The module's globals are None once the interpreter tears its modules
    # down, and a loop nobody closed may be freed after that (a policy's, a
    # module global's): what closing needs is bound here (see __del__).
    def _close(self, _finalizing=sys.is_finalizing, _warn=warnings.warn, _logger=logger, _list=list):
        if self.is_running():
            raise RuntimeError("Cannot close a running event loop")
        if self.is_closed():
            return
        # Not while the interpreter shuts down: logging fails there (its
        # modules torn down), and nobody would see a debug line.
        if self.get_debug() and not _finalizing():
            _logger.debug("Close %r", self)
        # In a fork child the epoll instance or ring, and the subprocesses,
        # are the parent's too: this close leaves them as they are.
        forked = self._abandon_if_forked()
        if not _finalizing():
            for sig in _list(self._signal_handlers):
                self.remove_signal_handler(sig)
        elif self._signal_handlers:
            _warn(
                f"Closing the loop {self!r} on interpreter shutdown stage, "
                "skipping signal handlers removal",
                ResourceWarning,
                source=self,
            )
            self._signal_handlers.clear()
        self._close_signal_pipe()
        self._close_children(forked)
        self._close_native()
        self._reader_fileobjs.clear()
        self._writer_fileobjs.clear()
        self._executor_shutdown_called = True
        executor = self._default_executor
        if executor is not None:
            self._default_executor = None
            executor.shutdown(wait=False)

    # -------------------------------------------------------- debug mode

    def set_debug(self, enabled):
        self._debug = enabled
        if self.is_running():
            self.call_soon_threadsafe(self._set_coroutine_origin_tracking, enabled)

    def _set_coroutine_origin_tracking(self, enabled):
        if bool(enabled) == bool(self._coroutine_origin_tracking_enabled):
            return
        if enabled:
            self._coroutine_origin_tracking_saved_depth = sys.get_coroutine_origin_tracking_depth()
            sys.set_coroutine_origin_tracking_depth(_DEBUG_STACK_DEPTH)
        else:
            sys.set_coroutine_origin_tracking_depth(self._coroutine_origin_tracking_saved_depth)
        self._coroutine_origin_tracking_enabled = enabled

    def _check_thread(self):
        thread_id = self._thread_id
        if thread_id is None:
            return
        if threading.get_ident() != thread_id:
            raise RuntimeError(
                "Non-thread-safe operation invoked on an event loop other "
                "than the current one"
            )

    def _check_callback(self, callback, method):
        if coroutines.iscoroutine(callback) or _iscoroutinefunction(callback):
            raise TypeError(f"coroutines cannot be used with {method}()")
        if not callable(callback):
            raise TypeError(
                f"a callable object was expected by {method}(), got {callback!r}"
            )

    # Called by the native side in debug mode only.
    def _debug_check(self, callback, method, check_thread):
        if check_thread:
            self._check_thread()
        self._check_callback(callback, method)

    def _debug_traceback(self, handle):
        handle._source_traceback = format_helpers.extract_stack(sys._getframe(1))

    def _log_slow_callback(self, handle, duration):
        callback = handle._callback
        owner = getattr(callback, "__self__", None)
        text = repr(owner) if isinstance(owner, tasks.Task) else str(handle)
        logger.warning("Executing %s took %.3f seconds", text, duration)

    def _log_slow_io(self, transport, reading, duration):
        # A native transport's readiness work stands for asyncio's reader
        # or writer Handle of its transport, and is named as that Handle's
        # repr would be: `<Handle cancelled _SocketTransport._read_ready()>`
        # (cancelled: the callback stopped the reading, or the writing is
        # done). No "created at": no Python line made it.
        if reading:
            method, cancelled = "_read_ready", not transport.is_reading()
        else:
            method, cancelled = "_write_ready", not transport.get_write_buffer_size()
        text = f"<Handle {'cancelled ' if cancelled else ''}{type(transport).__name__}.{method}()>"
        logger.warning("Executing %s took %.3f seconds", text, duration)

    # ------------------------------------------------------- exceptions

    def _report_callback_exception(self, handle, exc):
        source = _handles.format_callback(handle._callback, handle._args, self.get_debug())
        context = {
            "message": f"Exception in callback {source}",
            "exception": exc,
            "handle": handle,
        }
        if handle._source_traceback:
            context["source_traceback"] = handle._source_traceback
        self.call_exception_handler(context)

    def get_exception_handler(self):
        return self._exception_handler

    def set_exception_handler(self, handler):
        if handler is not None and not callable(handler):
            raise TypeError(f"A callable object or None is expected, got {handler!r}")
        self._exception_handler = handler

    def default_exception_handler(self, context):
        """Log ``context`` on the 'asyncio' logger, formatted as asyncio's."""
        message = context.get("message") or "Unhandled exception in event loop"
        exception = context.get("exception")
        exc_info = (type(exception), exception, exception.__traceback__) if exception is not None else False
        lines = [message]
        for key in sorted(context):
            if key in ("message", "exception"):
                continue
            value = context[key]
            if key == "source_traceback":
                value = "Object created at (most recent call last):\n" + "".join(
                    traceback.format_list(value)
                ).rstrip()
            elif key == "handle_traceback":
                value = "Handle created at (most recent call last):\n" + "".join(
                    traceback.format_list(value)
                ).rstrip()
            else:
                value = repr(value)
            lines.append(f"{key}: {value}")
        logger.error("\n".join(lines), exc_info=exc_info)

    def call_exception_handler(self, context):
        if self._exception_handler is None:
            try:
                self.default_exception_handler(context)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException:
                logger.error("Exception in default exception handler", exc_info=True)
            return
        try:
            owner = context.get("task") or context.get("future") or context.get("handle")
            ctx = owner.get_context() if owner is not None and hasattr(owner, "get_context") else None
            if ctx is not None and hasattr(ctx, "run"):
                ctx.run(self._exception_handler, self, context)
            else:
                self._exception_handler(self, context)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            try:
                self.default_exception_handler(
                    {
                        "message": "Unhandled error in exception handler",
                        "exception": exc,
                        "context": context,
                    }
                )
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException:
                logger.error(
                    "Exception in default exception handler while handling an "
                    "unexpected error in custom exception handler",
                    exc_info=True,
                )

    # ---------------------------------------------------- futures, tasks

    # create_future() and create_task() are native (LoopCore); debug mode
    # (and on 3.14 an unusual call) comes back here, so that the task's
    # source traceback is trimmed and bad arguments are refused as asyncio's.

    if sys.version_info >= (3, 14):

        def _create_task_py(self, coro, **kwargs):
            self._check_closed()
            factory = self._task_factory
            if factory is not None:
                return factory(self, coro, **kwargs)
            task = tasks.Task(coro, loop=self, **kwargs)
            if task._source_traceback:
                del task._source_traceback[-1]
            return task

    else:

        def _create_task_py(self, coro, *, name=None, context=None):
            self._check_closed()
            factory = self._task_factory
            if factory is None:
                task = tasks.Task(coro, loop=self, name=name, context=context)
                if task._source_traceback:
                    del task._source_traceback[-1]
            else:
                if context is None:
                    task = factory(self, coro)
                else:
                    task = factory(self, coro, context=context)
                if name is not None:
                    task.set_name(name)
            return task

    def set_task_factory(self, factory):
        if factory is not None and not callable(factory):
            raise TypeError("task factory must be a callable or None")
        self._task_factory = factory

    def get_task_factory(self):
        return self._task_factory

    # ------------------------------------------------------ async gens

    def _asyncgen_finalizer_hook(self, agen):
        self._asyncgens.discard(agen)
        if not self.is_closed():
            self.call_soon_threadsafe(self.create_task, agen.aclose())

    def _asyncgen_firstiter_hook(self, agen):
        if self._asyncgens_shutdown_called:
            warnings.warn(
                f"asynchronous generator {agen!r} was scheduled after "
                "loop.shutdown_asyncgens() call",
                ResourceWarning,
                source=self,
            )
        self._asyncgens.add(agen)

    async def shutdown_asyncgens(self):
        """Close every async generator still open on this loop."""
        self._asyncgens_shutdown_called = True
        if not self._asyncgens:
            return
        agens = list(self._asyncgens)
        self._asyncgens.clear()
        results = await tasks.gather(*[ag.aclose() for ag in agens], return_exceptions=True)
        for result, agen in zip(results, agens):
            if isinstance(result, Exception):
                self.call_exception_handler(
                    {
                        "message": f"an error occurred during closing of asynchronous generator {agen!r}",
                        "exception": result,
                        "asyncgen": agen,
                    }
                )

    # -------------------------------------------------------- executors

    def _check_default_executor(self):
        if self._executor_shutdown_called:
            raise RuntimeError("Executor shutdown has been called")

    def run_in_executor(self, executor, func, *args):
        self._check_closed()
        if self.get_debug():
            self._check_callback(func, "run_in_executor")
        if executor is None:
            executor = self._default_executor
            self._check_default_executor()
            if executor is None:
                executor = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="asyncio")
                self._default_executor = executor
        return futures.wrap_future(executor.submit(func, *args), loop=self)

    def set_default_executor(self, executor):
        if not isinstance(executor, concurrent.futures.ThreadPoolExecutor):
            raise TypeError("executor must be ThreadPoolExecutor instance")
        self._default_executor = executor

    async def shutdown_default_executor(self, timeout=None):
        """Shut the default executor down, joining its threads (bounded by
        ``timeout`` seconds where given)."""
        self._executor_shutdown_called = True
        executor = self._default_executor
        if executor is None:
            return
        done = self.create_future()
        thread = threading.Thread(target=self._join_executor, args=(executor, done))
        thread.start()
        try:
            if timeout is None:
                await done
            else:
                await tasks.wait_for(done, timeout)
        except TimeoutError:
            warnings.warn(
                "The executor did not finishing joining "
                f"its threads within {timeout} seconds.",
                RuntimeWarning,
                stacklevel=2,
            )
            executor.shutdown(wait=False)
        else:
            thread.join()

    def _join_executor(self, executor, done):
        try:
            executor.shutdown(wait=True)
            if not self.is_closed():
                self.call_soon_threadsafe(futures._set_result_unless_cancelled, done, None)
        except Exception as ex:
            if not self.is_closed() and not done.cancelled():
                self.call_soon_threadsafe(done.set_exception, ex)

    # -------------------------------------------------------------- DNS

    async def getaddrinfo(self, host, port, *, family=0, type=0, proto=0, flags=0):
        if self.get_debug():
            # As asyncio's: every lookup in the executor, logged before and
            # after (info when it took slow_callback_duration or more).
            return await self.run_in_executor(
                None, self._getaddrinfo_logged, host, port, family, type, proto, flags
            )
        # Numeric hosts need no resolver: answer inline instead of paying a
        # thread-pool round trip. AI_NUMERICHOST makes libc refuse anything
        # that would need a lookup, and then the executor path takes over.
        if _numeric_port(port) and isinstance(flags, int):
            try:
                # Plain ints: AddressInfo's `|` would turn a negative flags
                # into every known flag, which libc accepts.
                return socket.getaddrinfo(
                    host, port, family, type, proto, int(flags) | _AI_NUMERICHOST
                )
            except socket.gaierror:
                pass
        return await self.run_in_executor(
            None, socket.getaddrinfo, host, port, family, type, proto, flags
        )

    def _getaddrinfo_logged(self, host, port, family, type, proto, flags):
        # In the executor's thread.
        words = [f"{host}:{port!r}"]
        for name, value in (("family", family), ("type", type), ("proto", proto), ("flags", flags)):
            if value:
                words.append(f"{name}={value!r}")
        what = ", ".join(words)
        logger.debug("Get address info %s", what)
        t0 = self.time()
        infos = socket.getaddrinfo(host, port, family, type, proto, flags)
        took = self.time() - t0
        text = f"Getting address info {what} took {took * 1e3:.3f}ms: {infos!r}"
        if took >= self.slow_callback_duration:
            logger.info(text)
        else:
            logger.debug(text)
        return infos

    async def getnameinfo(self, sockaddr, flags=0):
        numeric = socket.NI_NUMERICHOST | socket.NI_NUMERICSERV
        if isinstance(flags, int) and flags & numeric == numeric:
            return socket.getnameinfo(sockaddr, flags)
        return await self.run_in_executor(None, socket.getnameinfo, sockaddr, flags)

    # ------------------------------------------------------ fd watchers

    def add_reader(self, fd, callback, *args):
        self._check_closed()
        if self.get_debug():
            self._check_callback(callback, "add_reader")
        fileno = _fileobj_to_fd(fd)
        self._add_reader(fileno, callback, *args)
        _remember_fileobj(self._reader_fileobjs, fileno, fd)

    def remove_reader(self, fd):
        if self.is_closed():
            return False
        fileno = _registered_fd(self._reader_fileobjs, fd)
        self._reader_fileobjs.pop(fileno, None)
        return self._remove_reader(fileno)

    def add_writer(self, fd, callback, *args):
        self._check_closed()
        if self.get_debug():
            self._check_callback(callback, "add_writer")
        fileno = _fileobj_to_fd(fd)
        self._add_writer(fileno, callback, *args)
        _remember_fileobj(self._writer_fileobjs, fileno, fd)

    def remove_writer(self, fd):
        if self.is_closed():
            return False
        fileno = _registered_fd(self._writer_fileobjs, fd)
        self._writer_fileobjs.pop(fileno, None)
        return self._remove_writer(fileno)

    # ---------------------------------------------------------- signals

    def _check_signal(self, sig):
        if not isinstance(sig, int):
            raise TypeError(f"sig must be an int, not {sig!r}")
        if sig not in signal.valid_signals():
            raise ValueError(f"invalid signal number {sig}")

    def _open_signal_pipe(self):
        if self._signal_rsock is not None:
            return
        rsock, wsock = socket.socketpair()
        rsock.setblocking(False)
        wsock.setblocking(False)
        self._signal_rsock, self._signal_wsock = rsock, wsock
        self._add_reader(rsock.fileno(), self._read_signal_pipe)

    def _close_signal_pipe(self):
        if self._signal_rsock is None:
            return
        self._remove_reader(self._signal_rsock.fileno())
        self._signal_rsock.close()
        self._signal_wsock.close()
        self._signal_rsock = self._signal_wsock = None

    def _read_signal_pipe(self):
        while True:
            try:
                data = self._signal_rsock.recv(4096)
            except (BlockingIOError, InterruptedError):
                return
            if not data:
                return
            for signum in data:
                self._handle_signal(signum)

    def _handle_signal(self, sig):
        handle = self._signal_handlers.get(sig)
        if handle is None:
            return
        if handle.cancelled():
            self.remove_signal_handler(sig)
        else:
            self._add_callback(handle)

    def add_signal_handler(self, sig, callback, *args):
        """Run callback(*args) from the loop when signal ``sig`` arrives."""
        if coroutines.iscoroutine(callback) or _iscoroutinefunction(callback):
            raise TypeError("coroutines cannot be used with add_signal_handler()")
        self._check_signal(sig)
        self._check_closed()
        self._open_signal_pipe()
        try:
            # Raises ValueError outside the main thread, so a loop running in
            # another thread cannot take signals over.
            signal.set_wakeup_fd(self._signal_wsock.fileno())
        except (ValueError, OSError) as exc:
            raise RuntimeError(str(exc))
        handle = self._make_handle(callback, *args)
        self._signal_handlers[sig] = handle
        try:
            signal.signal(sig, _noop_signal_handler)
            # Restart interrupted syscalls instead of failing with EINTR.
            signal.siginterrupt(sig, False)
        except OSError as exc:
            del self._signal_handlers[sig]
            if not self._signal_handlers:
                try:
                    signal.set_wakeup_fd(-1)
                except (ValueError, OSError) as nexc:
                    logger.info("set_wakeup_fd(-1) failed: %s", nexc)
            if exc.errno == errno.EINVAL:
                raise RuntimeError(f"sig {sig:d} cannot be caught")
            raise

    def remove_signal_handler(self, sig):
        """Remove the handler for ``sig``; True if there was one."""
        self._check_signal(sig)
        try:
            del self._signal_handlers[sig]
        except KeyError:
            return False
        handler = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
        try:
            signal.signal(sig, handler)
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                raise RuntimeError(f"sig {sig:d} cannot be caught")
            raise
        if not self._signal_handlers:
            try:
                signal.set_wakeup_fd(-1)
            except (ValueError, OSError) as exc:
                logger.info("set_wakeup_fd(-1) failed: %s", exc)
        return True


_AI_NUMERICHOST = int(socket.AI_NUMERICHOST)


def _numeric_port(port):
    if port is None or isinstance(port, int):
        return True
    if isinstance(port, (str, bytes)):
        return port.isdigit()
    return False
