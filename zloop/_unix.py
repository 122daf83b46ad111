"""Pipes and subprocesses for ``zloop.Loop``: ``connect_read_pipe``,
``connect_write_pipe``, ``subprocess_exec`` and ``subprocess_shell``, with
stock asyncio's semantics (``unix_events._UnixReadPipeTransport``,
``_UnixWritePipeTransport``, ``base_subprocess``).

Pipe I/O waits on the loop's native reactor (``_add_reader`` /
``_add_writer``). A child's exit is heard natively too
(``LoopCore._watch_child``: a pidfd on Linux 5.3+, kqueue's EVFILT_PROC on
macOS and the BSDs): no thread per child and no SIGCHLD handler, so other
users of SIGCHLD are left alone. Where the kernel offers neither (Linux
before 5.3), one daemon thread per child blocks in waitpid instead (what
asyncio's ThreadedChildWatcher does).

Spawning is a cold path: ``subprocess.Popen`` does it, with
``asyncio.subprocess``'s protocol and ``Process`` on top.
"""

import asyncio
import collections
import errno
import logging
import os
import stat
import subprocess
import sys
import threading
import warnings
import weakref
from asyncio import base_subprocess, futures, transports

logger = logging.getLogger("asyncio")

# Bytes asked of one read(), as asyncio's pipe transports.
_MAX_READ = 256 * 1024
# After this many writes to a lost pipe, warn (asyncio's
# constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES).
_LOG_THRESHOLD_CONN_LOST = 5
# A child whose exit was heard but cannot be collected yet (see
# _SubprocessTransport._reap) is asked again after this many seconds,
# doubled each time up to the second figure.
_REAP_RETRY_FIRST_S = 0.001
_REAP_RETRY_MAX_S = 0.1


def _stands_for(pipe, fd):
    """Whether the pipe object a transport was given still stands for
    ``fd``. User code may close (or detach) it while the transport still
    uses the number, which the next file opened anywhere in the process
    then gets: the transport must not read or write that file."""
    try:
        return pipe is not None and pipe.fileno() == fd
    except (OSError, ValueError):  # closed or detached file objects raise
        return False


def _ebadf():
    """What os.read/os.write raise on a closed fd."""
    return OSError(errno.EBADF, os.strerror(errno.EBADF))


def _pipe_name(fd):
    # How asyncio's debug lines name a child's stdio argument.
    if fd == subprocess.PIPE:
        return "<pipe>"
    if fd == subprocess.STDOUT:
        return "<stdout>"
    return repr(fd)


class _PipeWatch:
    """The reader and writer handles a pipe transport put on its fd. Each
    is removed only while it is still the fd's: a handle another watcher
    replaced (after user code closed the pipe and a new file took its
    number) is not ours to remove. Both are set up with `_add_reader_for`
    (`_add_writer_for`), which names the pipe object the fd came from: once
    user code closed it, a newcomer on the number takes the fd, and the
    handle's callback runs once more to find the pipe gone."""

    __slots__ = ()
    _reader = None
    _writer = None

    def _unwatch_reader(self):
        handle, self._reader = self._reader, None
        if handle is not None and not handle.cancelled() and not self._loop.is_closed():
            self._loop._remove_reader(self._fileno)

    def _unwatch_writer(self):
        handle, self._writer = self._writer, None
        if handle is not None and not handle.cancelled() and not self._loop.is_closed():
            self._loop._remove_writer(self._fileno)


def _exit_code(status):
    """A wait status as a returncode (negative for a signal)."""
    try:
        return os.waitstatus_to_exitcode(status)
    except ValueError:
        return status  # not an exit nor a signal: hand on the raw status


class _ReadPipeTransport(_PipeWatch, transports.ReadTransport):
    """Reads a pipe, FIFO, socket or character device into a Protocol.

    The pipe object stays the caller's: before each read, and before its
    fd is watched again, the transport checks that the object still stands
    for the fd (`_stands_for`); once user code closed it, that read fails
    with EBADF (a fatal read error: connection_lost(OSError(EBADF))), where
    asyncio, which keeps the number, reads whatever file took it since."""

    max_size = _MAX_READ

    def __init__(self, loop, pipe, protocol, waiter=None, extra=None):
        super().__init__(extra)
        self._extra["pipe"] = pipe
        self._loop = loop
        self._pipe = pipe
        self._fileno = pipe.fileno()
        self._protocol = protocol
        self._closing = False
        self._paused = False
        mode = os.fstat(self._fileno).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
            self._pipe = None
            self._fileno = None
            self._protocol = None
            raise ValueError("Pipe transport is for pipes/sockets only.")
        os.set_blocking(self._fileno, False)
        loop.call_soon(protocol.connection_made, self)
        # Only once connection_made ran may data arrive.
        loop.call_soon(self._start_reading)
        if waiter is not None:
            loop.call_soon(futures._set_result_unless_cancelled, waiter, None)

    def __repr__(self):
        state = "closed" if self._pipe is None else ("closing" if self._closing else "open")
        reading = "polling" if self.is_reading() else "idle"
        return f"<{type(self).__name__} fd={self._fileno} {state} read={reading}>"

    def __del__(self, _warn=warnings.warn):
        if self._pipe is not None:
            _warn(f"unclosed transport {self!r}", ResourceWarning, source=self)
            self._pipe.close()

    def _start_reading(self):
        if not self._closing and not self._paused and self._pipe is not None:
            self._watch()

    def _watch(self):
        if not _stands_for(self._pipe, self._fileno):
            self._fatal_error(_ebadf(), "Fatal read error on pipe transport")
            return
        self._reader = self._loop._add_reader_for(self._pipe, self._fileno, self._read_ready)

    def _read_ready(self):
        try:
            if not _stands_for(self._pipe, self._fileno):
                raise _ebadf()
            data = os.read(self._fileno, self.max_size)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._fatal_error(exc, "Fatal read error on pipe transport")
            return
        if data:
            self._protocol.data_received(data)
            return
        # EOF: the writer closed its end.
        if self._loop.get_debug():
            logger.info("%r was closed by peer", self)
        self._closing = True
        self._unwatch_reader()
        self._loop.call_soon(self._protocol.eof_received)
        self._loop.call_soon(self._call_connection_lost, None)

    def pause_reading(self):
        if self._closing or self._paused:
            return
        self._paused = True
        self._unwatch_reader()

    def resume_reading(self):
        if self._closing or not self._paused:
            return
        self._paused = False
        self._watch()

    def is_reading(self):
        return not self._paused and not self._closing

    def set_protocol(self, protocol):
        self._protocol = protocol

    def get_protocol(self):
        return self._protocol

    def is_closing(self):
        return self._closing

    def close(self):
        if not self._closing:
            self._close(None)

    def _fatal_error(self, exc, message="Fatal error on pipe transport"):
        # EIO on a pty whose other side closed is an ordinary end.
        if isinstance(exc, OSError) and exc.errno == errno.EIO:
            if self._loop.get_debug():
                logger.debug("%r: %s", self, message, exc_info=True)
        else:
            self._loop.call_exception_handler(
                {"message": message, "exception": exc, "transport": self, "protocol": self._protocol}
            )
        self._close(exc)

    def _close(self, exc):
        self._closing = True
        self._unwatch_reader()
        self._loop.call_soon(self._call_connection_lost, exc)

    def _call_connection_lost(self, exc):
        try:
            self._protocol.connection_lost(exc)
        finally:
            self._pipe.close()
            self._pipe = None
            self._protocol = None
            self._loop = None


class _WritePipeTransport(_PipeWatch, transports._FlowControlMixin, transports.WriteTransport):
    """Writes to a pipe, FIFO, socket or character device, buffering what
    the pipe does not take, with write flow control.

    As the read side, each write checks first that the pipe object still
    stands for the fd: once user code closed it, the write fails with
    EBADF (connection_lost(OSError(EBADF))); asyncio's writes go to
    whatever file took the number since."""

    def __init__(self, loop, pipe, protocol, waiter=None, extra=None):
        super().__init__(extra, loop)
        self._extra["pipe"] = pipe
        self._pipe = pipe
        self._fileno = pipe.fileno()
        self._protocol = protocol
        self._buffer = bytearray()
        self._conn_lost = 0
        self._closing = False
        mode = os.fstat(self._fileno).st_mode
        is_fifo = stat.S_ISFIFO(mode)
        is_socket = stat.S_ISSOCK(mode)
        if not (stat.S_ISCHR(mode) or is_fifo or is_socket):
            self._pipe = None
            self._fileno = None
            self._protocol = None
            raise ValueError("Pipe transport is only for pipes, sockets and character devices")
        os.set_blocking(self._fileno, False)
        loop.call_soon(protocol.connection_made, self)
        # A pipe's write end turns readable when the read end closes: that
        # is how a vanished reader is noticed without writing.
        if is_socket or is_fifo:
            loop.call_soon(self._watch_peer)
        if waiter is not None:
            loop.call_soon(futures._set_result_unless_cancelled, waiter, None)

    def __repr__(self):
        state = "closed" if self._pipe is None else ("closing" if self._closing else "open")
        return f"<{type(self).__name__} fd={self._fileno} {state} bufsize={len(self._buffer)}>"

    def __del__(self, _warn=warnings.warn):
        if self._pipe is not None:
            _warn(f"unclosed transport {self!r}", ResourceWarning, source=self)
            self._pipe.close()

    def _watch_peer(self):
        if self._pipe is not None and not self._closing and _stands_for(self._pipe, self._fileno):
            self._reader = self._loop._add_reader_for(self._pipe, self._fileno, self._peer_closed)

    def _peer_closed(self):
        if not _stands_for(self._pipe, self._fileno):
            # Woken for a file that took the number since: not our peer.
            self._conn_lost += 1
            self._fatal_error(_ebadf(), "Fatal error on pipe transport")
            return
        self._close(BrokenPipeError() if self._buffer else None)

    def get_write_buffer_size(self):
        return len(self._buffer)

    def write(self, data):
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data argument must be a bytes-like object, not {type(data).__name__!r}")
        if isinstance(data, bytearray):
            data = memoryview(data)
        if not data:
            return
        if self._conn_lost or self._closing:
            if self._conn_lost >= _LOG_THRESHOLD_CONN_LOST:
                logger.warning("pipe closed by peer or os.write(pipe, data) raised exception.")
            self._conn_lost += 1
            return
        if not self._buffer:
            try:
                if not _stands_for(self._pipe, self._fileno):
                    raise _ebadf()
                n = os.write(self._fileno, data)
            except (BlockingIOError, InterruptedError):
                n = 0
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._conn_lost += 1
                self._fatal_error(exc, "Fatal write error on pipe transport")
                return
            if n == len(data):
                return
            data = memoryview(data)[n:]
            try:
                watch = self._loop._add_writer_for(self._pipe, self._fileno, self._write_ready)
            except OSError as exc:
                # FreeBSD's kqueue refuses to watch a pipe whose reader is
                # gone (EPIPE), as it may be since the write: that is the
                # write's error, as the next write would say (epoll and
                # macOS's kqueue watch it, and report it at once).
                self._conn_lost += 1
                self._fatal_error(exc, "Fatal write error on pipe transport")
                return
            self._writer = watch
        self._buffer += data
        self._maybe_pause_protocol()

    def _write_ready(self):
        try:
            if not _stands_for(self._pipe, self._fileno):
                raise _ebadf()
            n = os.write(self._fileno, self._buffer)
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._buffer.clear()
            self._conn_lost += 1
            self._unwatch_writer()
            self._fatal_error(exc, "Fatal write error on pipe transport")
            return
        if n < len(self._buffer):
            del self._buffer[:n]
            return
        self._buffer.clear()
        self._unwatch_writer()
        self._maybe_resume_protocol()  # may write more
        if self._closing and not self._buffer:
            self._unwatch_reader()
            self._call_connection_lost(None)

    def can_write_eof(self):
        return True

    def write_eof(self):
        if self._closing:
            return
        self._closing = True
        if not self._buffer:
            self._unwatch_reader()
            self._loop.call_soon(self._call_connection_lost, None)

    def set_protocol(self, protocol):
        self._protocol = protocol

    def get_protocol(self):
        return self._protocol

    def is_closing(self):
        return self._closing

    def close(self):
        if self._pipe is not None and not self._closing:
            # Flush first, as write_eof does.
            self.write_eof()

    def abort(self):
        self._close(None)

    def _fatal_error(self, exc, message="Fatal error on pipe transport"):
        if isinstance(exc, OSError):
            if self._loop.get_debug():
                logger.debug("%r: %s", self, message, exc_info=True)
        else:
            self._loop.call_exception_handler(
                {"message": message, "exception": exc, "transport": self, "protocol": self._protocol}
            )
        self._close(exc)

    def _close(self, exc=None):
        self._closing = True
        self._unwatch_writer()
        self._unwatch_reader()
        self._buffer.clear()
        self._loop.call_soon(self._call_connection_lost, exc)

    def _call_connection_lost(self, exc):
        try:
            self._protocol.connection_lost(exc)
        finally:
            self._pipe.close()
            self._pipe = None
            self._protocol = None
            self._loop = None


class _SubprocessTransport(asyncio.SubprocessTransport):
    """A child process started by ``subprocess.Popen``, its pipes on the
    pipe transports above, its exit heard by the loop (``_watch_child``)."""

    def __init__(self, loop, protocol, args, shell, stdin, stdout, stderr, bufsize, extra=None, **kwargs):
        super().__init__(extra)
        self._loop = loop
        self._protocol = protocol
        self._closed = False
        self._proc = None
        self._pid = None
        self._returncode = None
        self._exit_waiters = []
        # Protocol calls made before connection_made ran wait here.
        self._pending_calls = collections.deque()
        self._pipes = {}
        self._finished = False
        # The handle `_watch_child` queues when the child exits, while
        # the loop watches for that.
        self._exit_watch = None
        # The timer that asks again for an exit not yet collectable, and
        # its delay (see _reap).
        self._reap_retry = None
        self._reap_retry_s = 0.0
        for fd, kind in ((0, stdin), (1, stdout), (2, stderr)):
            if kind == subprocess.PIPE:
                self._pipes[fd] = None
        try:
            self._proc = subprocess.Popen(
                args,
                shell=shell,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                universal_newlines=False,
                bufsize=bufsize,
                **kwargs,
            )
        except BaseException:
            self.close()
            raise
        self._pid = self._proc.pid
        self._extra["subprocess"] = self._proc
        loop._child_transports.add(self)
        if loop.get_debug():
            program = args if isinstance(args, (bytes, str)) else args[0]
            logger.debug("process %r created: pid %s", program, self._pid)

    def __repr__(self):
        info = [type(self).__name__]
        if self._closed:
            info.append("closed")
        if self._pid is not None:
            info.append(f"pid={self._pid}")
        if self._returncode is not None:
            info.append(f"returncode={self._returncode}")
        elif self._pid is not None:
            info.append("running")
        for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
            pipe = self._pipes.get(fd)
            if pipe is not None:
                info.append(f"{name}={pipe.pipe}")
        return "<{}>".format(" ".join(info))

    def __del__(self, _warn=warnings.warn):
        if not self._closed:
            _warn(f"unclosed transport {self!r}", ResourceWarning, source=self)
            self._close_pipes()

    async def _start(self, waiter):
        """Connect the pipes, start watching for the exit, then
        connection_made and whatever the pipes reported meanwhile."""
        loop = self._loop
        try:
            # Watch for the exit first: a cancelled or failed start still
            # reaps the child (process_exited waits in _pending_calls).
            self._watch_exit()
            proc = self._proc
            if proc.stdin is not None:
                _, pipe = await loop.connect_write_pipe(
                    lambda: base_subprocess.WriteSubprocessPipeProto(self, 0), proc.stdin
                )
                self._pipes[0] = pipe
            for fd, stream in ((1, proc.stdout), (2, proc.stderr)):
                if stream is not None:
                    _, pipe = await loop.connect_read_pipe(
                        lambda fd=fd: base_subprocess.ReadSubprocessPipeProto(self, fd), stream
                    )
                    self._pipes[fd] = pipe
            loop.call_soon(self._protocol.connection_made, self)
            while self._pending_calls:
                callback, args = self._pending_calls.popleft()
                loop.call_soon(callback, *args)
            self._pending_calls = None
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            if waiter is not None and not waiter.cancelled():
                waiter.set_exception(exc)
        else:
            if waiter is not None and not waiter.cancelled():
                waiter.set_result(None)

    # ------------------------------------------------------------- exit

    def _watch_exit(self):
        if self._returncode is not None or self._proc.returncode is not None:
            self._loop.call_soon(self._reap)
            return
        try:
            self._exit_watch = self._loop._watch_child(self._pid, self._reap)
        except ProcessLookupError:
            # Reaped already, or (macOS) exited, or exiting: reap it (see
            # _reap), or report 255 as asyncio's watchers do.
            self._loop.call_soon(self._reap)
        except OSError:
            # No pidfds (Linux before 5.3): a thread waits instead.
            threading.Thread(target=self._wait_in_thread, name=f"zloop-waitpid-{self._pid}", daemon=True).start()

    def _wait_in_thread(self):
        try:
            self._proc.wait()
        finally:
            loop = self._loop
            if loop is not None and not loop.is_closed():
                try:
                    loop.call_soon_threadsafe(self._reap)
                except RuntimeError:
                    pass

    def _unwatch_exit(self):
        watch, self._exit_watch = self._exit_watch, None
        if watch is not None:
            watch.cancel()  # heard already: queued, or running (_reap)
            self._loop._unwatch_child(watch)
        retry, self._reap_retry = self._reap_retry, None
        if retry is not None:
            retry.cancel()

    def _reap(self):
        """The child exited (the loop heard it): collect its status.

        os.waitpid is looked up at each call, not bound by Popen at import,
        so that code patching it (CPython's tests) sees the call."""
        if self._returncode is not None:
            return
        returncode = self._proc.returncode  # Popen.poll() may have reaped it
        if returncode is None:
            try:
                pid, status = os.waitpid(self._pid, os.WNOHANG)
            except ChildProcessError:
                # Reaped behind our back: asyncio's watchers report 255.
                logger.warning("child process pid %d exit status already read: will report returncode 255", self._pid)
                returncode = 255
            except BaseException:
                # Not watched again (no spinning on an exit that cannot be
                # collected); the error goes to the loop's exception handler.
                self._exit_watch = None
                raise
            else:
                if pid == 0:
                    # The exit was heard, or the watch refused as exited,
                    # but the status is not there yet: XNU posts NOTE_EXIT,
                    # and takes the process out of EVFILT_PROC's reach
                    # (ESRCH), before the process turns zombie, as the BSDs
                    # may. Watching again cannot help; asking again at once
                    # would spin the loop until the kernel is done. Ask on
                    # a timer that backs off.
                    self._exit_watch = None
                    delay = min(self._reap_retry_s * 2 or _REAP_RETRY_FIRST_S, _REAP_RETRY_MAX_S)
                    self._reap_retry_s = delay
                    self._reap_retry = self._loop.call_later(delay, self._reap)
                    return
                returncode = _exit_code(status)
        self._unwatch_exit()
        self._process_exited(returncode)

    def _process_exited(self, returncode):
        if self._loop.get_debug():
            logger.info("%r exited with return code %r", self, returncode)
        self._returncode = returncode
        if self._proc is not None and self._proc.returncode is None:
            # Reaped here, not by Popen: tell Popen, or its poll() and
            # wait() would meet ECHILD and report 0.
            self._proc.returncode = returncode
        self._call(self._protocol.process_exited)
        self._try_finish()
        for waiter in self._exit_waiters:
            if not waiter.cancelled():
                waiter.set_result(returncode)
        self._exit_waiters = None

    async def _wait(self):
        """Wait for the exit; asyncio.subprocess.Process.wait calls this."""
        if self._returncode is not None:
            return self._returncode
        waiter = self._loop.create_future()
        self._exit_waiters.append(waiter)
        return await waiter

    # ---------------------------------------------------- pipe callbacks

    def _call(self, callback, *args):
        if self._pending_calls is not None:
            self._pending_calls.append((callback, args))
        else:
            self._loop.call_soon(callback, *args)

    def _pipe_connection_lost(self, fd, exc):
        self._call(self._protocol.pipe_connection_lost, fd, exc)
        self._try_finish()

    def _pipe_data_received(self, fd, data):
        self._call(self._protocol.pipe_data_received, fd, data)

    def _try_finish(self):
        if self._returncode is None or self._finished:
            return
        if all(p is not None and p.disconnected for p in self._pipes.values()):
            self._finished = True
            self._call(self._call_connection_lost, None)

    def _call_connection_lost(self, exc):
        try:
            self._protocol.connection_lost(exc)
        finally:
            self._loop._child_transports.discard(self)
            self._protocol = None
            self._proc = None

    # ------------------------------------------------------ public API

    def get_pid(self):
        return self._pid

    def get_returncode(self):
        return self._returncode

    def get_pipe_transport(self, fd):
        pipe = self._pipes.get(fd)
        return None if pipe is None else pipe.pipe

    def set_protocol(self, protocol):
        self._protocol = protocol

    def get_protocol(self):
        return self._protocol

    def is_closing(self):
        return self._closed

    def _check_proc(self):
        if self._proc is None:
            raise ProcessLookupError()

    def send_signal(self, signal):
        self._check_proc()
        self._proc.send_signal(signal)

    def terminate(self):
        self._check_proc()
        self._proc.terminate()

    def kill(self):
        self._check_proc()
        self._proc.kill()

    def _close_pipes(self):
        for proto in self._pipes.values():
            if proto is not None and not proto.pipe.is_closing():
                proto.pipe.close()

    def close(self):
        """Close the pipes; kill the child if it still runs (as asyncio)."""
        if self._closed:
            return
        self._closed = True
        self._close_pipes()
        proc = self._proc
        if proc is not None and self._returncode is None and proc.poll() is None:
            if self._loop.get_debug():
                logger.warning("Close running child process: kill %r", self)
            try:
                proc.kill()
            except ProcessLookupError:
                pass
            # The exit watch (or the thread) still reaps it.

    def _loop_closing(self, forked=False):
        """The loop closes with this child alive: close the pipes' fds, kill
        and reap the child now (no zombie, no fd outlives the loop). In a
        fork child of the loop's process (``forked``) the child process is
        the parent's: only this process's copies of its pipes close."""
        self._closed = True
        loop = self._loop
        for proto in self._pipes.values():
            pipe = None if proto is None else proto.pipe._pipe
            if pipe is not None:
                proto.pipe._unwatch_reader()
                proto.pipe._unwatch_writer()
                pipe.close()
                proto.pipe._pipe = None
        for stream in (self._proc.stdin, self._proc.stdout, self._proc.stderr) if self._proc else ():
            if stream is not None:
                stream.close()
        self._unwatch_exit()
        proc = self._proc
        if forked:
            return
        if proc is not None and proc.poll() is None:
            try:
                proc.kill()
            except ProcessLookupError:
                pass
            proc.wait()
        if proc is not None and self._returncode is None:
            self._returncode = proc.returncode


class UnixMixin:
    """The loop's pipe and subprocess API; mixed into ``zloop.Loop``."""

    @property
    def _child_transports(self):
        # Live subprocess transports, closed with the loop. Created lazily
        # so Loop.__init__ needs no line for it.
        # Through attributes, not self.__dict__: touching __dict__ turns the
        # instance's inline attribute values into a dict for good, and the
        # interpreter then stops specializing lookups on the loop.
        try:
            return self._zloop_children
        except AttributeError:
            children = self._zloop_children = weakref.WeakSet()
            return children

    def _close_children(self, forked=False, _getattr=getattr, _list=list):
        """Called by close(): kill and reap children still running; in a
        fork child (``forked``), whose children they are not, only let go
        of them. (The builtins are bound: see Loop.__del__.)"""
        children = _getattr(self, "_zloop_children", None)
        if children:
            for transport in _list(children):
                transport._loop_closing(forked)
            children.clear()

    async def connect_read_pipe(self, protocol_factory, pipe):
        protocol = protocol_factory()
        waiter = self.create_future()
        transport = _ReadPipeTransport(self, pipe, protocol, waiter)
        try:
            await waiter
        except BaseException:
            transport.close()
            raise
        if self.get_debug():
            logger.debug("Read pipe %r connected: (%r, %r)", pipe.fileno(), transport, protocol)
        return transport, protocol

    async def connect_write_pipe(self, protocol_factory, pipe):
        protocol = protocol_factory()
        waiter = self.create_future()
        transport = _WritePipeTransport(self, pipe, protocol, waiter)
        try:
            await waiter
        except BaseException:
            transport.close()
            raise
        if self.get_debug():
            logger.debug("Write pipe %r connected: (%r, %r)", pipe.fileno(), transport, protocol)
        return transport, protocol

    @staticmethod
    def _check_subprocess_options(universal_newlines, bufsize, text, encoding, errors):
        if universal_newlines:
            raise ValueError("universal_newlines must be False")
        if bufsize != 0:
            raise ValueError("bufsize must be 0")
        if text:
            raise ValueError("text must be False")
        if encoding is not None:
            raise ValueError("encoding must be None")
        if errors is not None:
            raise ValueError("errors must be None")

    async def _make_subprocess_transport(
        self, protocol, args, shell, stdin, stdout, stderr, bufsize, extra=None, **kwargs
    ):
        waiter = self.create_future()
        transport = _SubprocessTransport(
            self, protocol, args, shell, stdin, stdout, stderr, bufsize, extra=extra, **kwargs
        )
        self.create_task(transport._start(waiter))
        try:
            await waiter
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException:
            # Cancelled or failed: no child may outlive this call.
            transport.close()
            await transport._wait()
            raise
        return transport

    async def subprocess_exec(
        self,
        protocol_factory,
        program,
        *args,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=False,
        shell=False,
        bufsize=0,
        encoding=None,
        errors=None,
        text=None,
        **kwargs,
    ):
        if shell:
            raise ValueError("shell must be False")
        self._check_subprocess_options(universal_newlines, bufsize, text, encoding, errors)
        protocol = protocol_factory()
        # The program only, as asyncio: arguments may hold secrets.
        what = f"execute program {program!r}"
        self._log_subprocess(what, stdin, stdout, stderr)
        transport = await self._make_subprocess_transport(
            protocol, (program,) + args, False, stdin, stdout, stderr, bufsize, **kwargs
        )
        if self.get_debug():
            logger.info("%s: %r", what, transport)
        return transport, protocol

    async def subprocess_shell(
        self,
        protocol_factory,
        cmd,
        *,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=False,
        shell=True,
        bufsize=0,
        encoding=None,
        errors=None,
        text=None,
        **kwargs,
    ):
        if not isinstance(cmd, (bytes, str)):
            raise ValueError("cmd must be a string")
        if not shell:
            raise ValueError("shell must be True")
        self._check_subprocess_options(universal_newlines, bufsize, text, encoding, errors)
        protocol = protocol_factory()
        what = f"run shell command {cmd!r}"
        self._log_subprocess(what, stdin, stdout, stderr)
        transport = await self._make_subprocess_transport(
            protocol, cmd, True, stdin, stdout, stderr, bufsize, **kwargs
        )
        if self.get_debug():
            logger.info("%s: %r", what, transport)
        return transport, protocol

    def _log_subprocess(self, what, stdin, stdout, stderr):
        # Debug mode's line before a child starts, in asyncio's words.
        if not self.get_debug():
            return
        words = [what]
        if stdin is not None:
            words.append(f"stdin={_pipe_name(stdin)}")
        if stdout is not None and stderr == subprocess.STDOUT:
            words.append(f"stdout=stderr={_pipe_name(stdout)}")
        else:
            if stdout is not None:
                words.append(f"stdout={_pipe_name(stdout)}")
            if stderr is not None:
                words.append(f"stderr={_pipe_name(stderr)}")
        logger.debug(" ".join(words))
