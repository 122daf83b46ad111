"""The facts about the machine under test that differ between Linux, macOS
and FreeBSD, each answered by asking the machine (a probe made once, when
first needed), not by reading ``sys.platform``: this process's open
descriptors and memory, AF_UNIX's limits, and what the kernel poller under
a loop accepts. The behaviour tests take these facts from here only.

On Linux the answers come from /proc where it is mounted; the kqueue lane of
``scripts/test`` runs the suite with /proc hidden, so every other way is
used on Linux too.
"""

import contextlib
import errno
import os
import resource
import select
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile

# ------------------------------------------------------------ descriptors

# Probed without /proc: every number below this is checked (or below the
# descriptor limit, if lower); the bound grows when an open descriptor
# comes near it.
_FIRST_PROBE_BOUND = 4096


def _fd_dir_lists_own_fds(path):
    """Whether listing ``path`` shows this process's descriptors as they
    come and go (FreeBSD's /dev/fd shows only 0-2 unless fdescfs is
    mounted; Linux's /dev/fd is a link into /proc)."""
    try:
        r, w = os.pipe()
    except OSError:
        return False
    try:
        with_pipe = set(os.listdir(path))
    except OSError:
        return False
    finally:
        os.close(r)
        os.close(w)
    try:
        # The listing's own descriptor may take r's number, not w's.
        return {str(r), str(w)} <= with_pipe and str(w) not in os.listdir(path)
    except OSError:
        return False


class _FdProbe:
    """open_fds(), the cheapest way this machine offers (it runs twice
    around every test). Measured on Linux (2 cores, loaded): listing
    /proc/self/fd 0.015 ms; without it, poll(2) on every number with no
    events asked, the closed ones reported POLLNVAL, 1.2 us a number,
    against 5.6 us for os.fstat on each (the closed ones raise)."""

    def __init__(self):
        dirs = ("/proc/self/fd", "/dev/fd")
        self.source = next((d for d in dirs if _fd_dir_lists_own_fds(d)), None)
        self._poll = None
        self._bound = 0

    def open_fds(self):
        if self.source is not None:
            return {int(name) for name in os.listdir(self.source)}
        found = self._probe()
        if found and max(found) >= self._bound // 2 and self._bound < self._limit():
            self._grow(4 * self._bound)
            found = self._probe()
        return found

    def _limit(self):
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        return soft if soft != resource.RLIM_INFINITY else 1 << 20

    def _grow(self, bound):
        self._bound = min(bound, self._limit())
        self._poll = select.poll()
        for fd in range(self._bound):
            self._poll.register(fd, 0)

    def _probe(self):
        if self._poll is None:
            self._grow(_FIRST_PROBE_BOUND)
        try:
            closed = {fd for fd, ev in self._poll.poll(0) if ev & select.POLLNVAL}
            return set(range(self._bound)) - closed
        except OSError:  # a test lowered the descriptor limit below the bound
            return {fd for fd in range(self._bound) if _is_open(fd)}


def _is_open(fd):
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


_fd_probe = None


def open_fds():
    """The set of this process's open file descriptors."""
    global _fd_probe
    if _fd_probe is None:
        _fd_probe = _FdProbe()
    return _fd_probe.open_fds()


def describe_fd(fd):
    """What ``fd`` is, for a failure message: its /proc link where there is
    one, else its type from fstat (and a socket's addresses)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
    try:
        st = os.fstat(fd)
    except OSError:
        return "?"
    mode = st.st_mode
    if stat.S_ISSOCK(mode):
        try:
            with socket.socket(fileno=os.dup(fd)) as s:
                peer = s.getpeername() if s.type == socket.SOCK_STREAM else None
                return f"socket {s.family.name} {s.type.name} {s.getsockname()!r} -> {peer!r}"
        except OSError:
            return "socket"
    kinds = ((stat.S_ISFIFO, "pipe"), (stat.S_ISREG, "file"), (stat.S_ISCHR, "character device"),
             (stat.S_ISDIR, "directory"))
    kind = next((name for test, name in kinds if test(mode)), f"mode {mode:o}")
    return f"{kind} (device {st.st_dev}, inode {st.st_ino})"


# ---------------------------------------------------- children, signals

def child_pids(leave_out=()):
    """Pids of this process's children, zombies included, but those in
    ``leave_out``: from /proc, else from ps(1) (macOS, FreeBSD). Where
    neither answers (Linux with /proc hidden), only the unreaped ones: a
    zombie child shows with waitid(WNOWAIT), which leaves it unreaped; a
    running one cannot be seen."""
    me = os.getpid()
    found = _children_from_proc(me)
    if found is None:
        found = _children_from_ps(me)
    if found is None:
        found = _zombie_child()
    return sorted(pid for pid in found if pid not in leave_out)


def _children_from_proc(me):
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    if "self" not in names:
        return None  # /proc hidden (an empty directory)
    found = []
    for pid in names:
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            found.append(int(pid))
    return found


def _children_from_ps(me):
    try:
        ps = subprocess.Popen(["ps", "-A", "-o", "pid=,ppid="], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
        out, _ = ps.communicate(timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if ps.returncode != 0:
        return None
    rows = (line.split() for line in out.splitlines())
    return [int(pid) for pid, ppid in rows if int(ppid) == me and int(pid) != ps.pid]


def _zombie_child():
    if not hasattr(os, "waitid"):  # macOS before 3.13 (ps answers there)
        return []
    try:
        info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return []
    return [] if info is None or info.si_pid == 0 else [info.si_pid]


_libc = []


def signal_caught(sig):
    """Whether this process has a handler for ``sig`` in the kernel (not
    SIG_DFL, not SIG_IGN), read with sigaction(2): struct sigaction's
    handler is its first member on Linux, macOS and FreeBSD."""
    import ctypes

    if not _libc:
        _libc.append(ctypes.CDLL(None, use_errno=True))
    action = ctypes.create_string_buffer(512)  # larger than any struct sigaction
    if _libc[0].sigaction(int(sig), None, action) != 0:
        raise OSError(ctypes.get_errno(), f"sigaction({int(sig)})")
    handler = ctypes.c_void_p.from_buffer(action).value or 0
    return handler not in (int(signal.SIG_DFL), int(signal.SIG_IGN))


def signal_blocked(sig):
    """Whether ``sig`` is blocked in this thread's signal mask."""
    return sig in signal.pthread_sigmask(signal.SIG_BLOCK, [])


# ----------------------------------------------------------------- memory

def _statm_rss():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _ps_rss():
    # ps(1) reports the resident set size in KiB (macOS, FreeBSD; Linux's
    # procps reads /proc).
    out = subprocess.run(["ps", "-o", "rss=", "-p", str(os.getpid())], capture_output=True,
                         text=True, timeout=10, check=True).stdout
    return int(out.strip()) * 1024


def _rss_source():
    for source in (_statm_rss, _ps_rss):
        try:
            if source() > 0:
                return source
        except (OSError, ValueError, subprocess.SubprocessError):
            continue
    return None


_rss = []

RSS_UNKNOWN = ("no source of this process's current resident set size here (/proc is not "
               "mounted and ps(1) reads it); getrusage's ru_maxrss is the peak, which hides growth")


def rss_bytes():
    """This process's resident set size now, in bytes; None where the
    machine offers no way to read the current one (RSS_UNKNOWN says why)."""
    if not _rss:
        _rss.append(_rss_source())
    return None if _rss[0] is None else _rss[0]()


# ---------------------------------------------------------------- AF_UNIX

_unix_facts = {}


def unix_path_max():
    """The longest AF_UNIX path this machine binds, in bytes: sockaddr_un's
    sun_path less its terminating NUL (107 on Linux, 103 on macOS and
    FreeBSD). Told by where CPython's own check ("AF_UNIX path too long")
    starts."""
    if "path_max" not in _unix_facts:
        missing = tempfile.mkdtemp(dir="/tmp")
        os.rmdir(missing)  # binding in it fails (ENOENT) where CPython does not
        longest = 0
        with socket.socket(socket.AF_UNIX) as s:
            for n in range(len(missing) + 2, 4096):
                try:
                    s.bind((missing + "/" + "x" * n)[:n])
                except OSError as exc:
                    if exc.errno is None:  # CPython: too long for sun_path
                        break
                    longest = n  # the kernel's error: it fit
        _unix_facts["path_max"] = longest
    return _unix_facts["path_max"]


def abstract_unix_names():
    """Whether AF_UNIX names in Linux's abstract namespace (a leading NUL)
    exist here: a probe binds one and reads it back."""
    if "abstract" not in _unix_facts:
        name = b"\0zloop-probe-%d-%d" % (os.getpid(), id(_unix_facts))
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.bind(name)
                _unix_facts["abstract"] = s.getsockname() == name
        except OSError:
            _unix_facts["abstract"] = False
    return _unix_facts["abstract"]


def short_temp_dir():
    """A new directory under /tmp whose paths leave room in sun_path
    (pytest's own, under macOS's long $TMPDIR, may not). The caller
    removes it."""
    return tempfile.mkdtemp(prefix="zl-", dir="/tmp")


# ------------------------------------------------- what socket calls answer

_socket_facts = {}


@contextlib.contextmanager
def _datagram_pair(family):
    """(receiver, sender, address): a receiver of ``family`` ("udp": IPv4
    on loopback; "unix": bound under a short temporary directory) and an
    unconnected, non-blocking sender."""
    with contextlib.ExitStack() as stack:
        if family == "udp":
            receiver = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
            receiver.bind(("127.0.0.1", 0))
            sender = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        else:
            directory = short_temp_dir()
            stack.callback(shutil.rmtree, directory, ignore_errors=True)
            receiver = stack.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM))
            receiver.bind(os.path.join(directory, "r"))
            sender = stack.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM))
        receiver.setblocking(False)
        sender.setblocking(False)
        yield receiver, sender, receiver.getsockname()


def _drain(sock):
    try:
        while True:
            sock.recv(1 << 20)
    except OSError:
        pass


def _refused(exc):
    # A full receiver: Linux's EAGAIN, macOS's and FreeBSD's ENOBUFS.
    return exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.ENOBUFS)


def max_datagram(family):
    """The longest datagram a send of ``family`` ("udp" or "unix") takes
    here, in bytes; longer ones fail with EMSGSIZE. Linux: 65507 (UDP
    over IPv4), about the send buffer (AF_UNIX); macOS and FreeBSD: 9216
    (UDP: net.inet.udp.maxdgram), 2 KiB and 8 KiB (AF_UNIX). Found by
    bisection on a fresh pair of sockets."""
    key = ("max", family)
    if key not in _socket_facts:
        with _datagram_pair(family) as (receiver, sender, to):
            low, high = 1, 1 << 20
            while low < high:
                size = (low + high + 1) // 2
                try:
                    sender.sendto(bytes(size), to)
                    low = size
                except OSError as exc:
                    if exc.errno == errno.EMSGSIZE:
                        high = size - 1
                    elif _refused(exc):  # a full receiver: the size itself went
                        low = size
                    else:
                        raise
                _drain(receiver)
        _socket_facts[key] = low
    return _socket_facts[key]


def datagram_room(family):
    """(count, bytes): how many datagrams of ``family``, and how many bytes
    of them, a fresh receiver holds unread before the kernel refuses or
    drops more. AF_UNIX: measured, by sending until the sender is refused
    (Linux: EAGAIN at net.unix.max_dgram_qlen datagrams, 10 by default, or
    at the sender's buffer; macOS and FreeBSD: ENOBUFS at the receiver's
    buffer, 4 KiB and 16 KiB), tiny datagrams for the count, the longest
    for the bytes. UDP drops silently, and macOS's loopback may deliver
    after sendto returns, so nothing is measured: the receive buffer's
    size (SO_RCVBUF) in bytes, and no count (None)."""
    key = ("room", family)
    if key in _socket_facts:
        return _socket_facts[key]
    if family == "udp":
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            room = (None, s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))
    else:
        counts = []
        for size in (1, max_datagram(family)):
            with _datagram_pair(family) as (_, sender, to):
                n = 0
                try:
                    while n < 100_000:
                        sender.sendto(bytes(size), to)
                        n += 1
                except OSError as exc:
                    if not _refused(exc):
                        raise
                    _socket_facts[("refusal", family)] = exc.errno
                counts.append(n * size)
        room = (counts[0], counts[1])
    _socket_facts[key] = room
    return room


def reset_send_errno():
    """The errno of the first send on a TCP socket whose peer reset it:
    ECONNRESET on Linux (the send takes the reset), EPIPE on macOS and
    FreeBSD (their sosend finds the socket unable to send before it looks
    at the pending error, which the next receive gets)."""
    if "reset_send" not in _socket_facts:
        with contextlib.ExitStack() as stack:
            listener = stack.enter_context(socket.socket())
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            client = stack.enter_context(socket.create_connection(listener.getsockname()))
            served, _ = listener.accept()
            served.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            served.close()
            select.select([client], [], [], 10)  # the reset makes it readable
            try:
                client.send(b"x")
                _socket_facts["reset_send"] = None
            except OSError as exc:
                _socket_facts["reset_send"] = exc.errno
    return _socket_facts["reset_send"]


def unix_peer_gone_errno():
    """What a read on an AF_UNIX stream socket whose peer closed with data
    unread gets: ECONNRESET on Linux (af_unix.c resets the survivor), None
    (the end of the stream) on macOS and FreeBSD (their unp_detach
    disconnects it with no error)."""
    if "unix_gone" not in _socket_facts:
        a, b = socket.socketpair()
        with a:
            a.send(b"unread")
            b.close()
            try:
                a.recv(1)
                _socket_facts["unix_gone"] = None
            except OSError as exc:
                _socket_facts["unix_gone"] = exc.errno
    return _socket_facts["unix_gone"]


def full_unix_receiver_errno():
    """The errno of a non-blocking AF_UNIX datagram send to a receiver
    that holds no more: EAGAIN on Linux (asyncio then queues the datagram
    and pauses writing), ENOBUFS on macOS and FreeBSD (asyncio hands it to
    error_received and the datagram is lost)."""
    datagram_room("unix")
    return _socket_facts[("refusal", "unix")]


# ---------------------------------------------------------------- pollers

def default_backend():
    """The default zloop backend on this machine: epoll where the kernel
    has it (Linux, and the portable Linux build), kqueue elsewhere."""
    return "epoll" if hasattr(select, "epoll") else "kqueue"


def build_backends():
    """The backends of the zloop build under test, its default first: epoll
    and io_uring, or epoll and kqueue (emulated) on a portable Linux build,
    kqueue on macOS and the BSDs. When zloop cannot be imported, this
    machine's default build's: the cases then fail on the import, as every
    zloop case does."""
    try:
        from zloop._zloop import BACKENDS
    except ImportError:
        return ("epoll", "io_uring") if default_backend() == "epoll" else ("kqueue",)
    return tuple(BACKENDS)


def kqueue_personality():
    """Which kernel the emulated kqueue follows (ZLOOP_KQUEUE_PERSONALITY,
    read by the emulation itself): "macos", "freebsd", or "" for its
    default rules. Only meaningful where kqueue is emulated."""
    return os.environ.get("ZLOOP_KQUEUE_PERSONALITY", "")


def poller_of(loop):
    """The kernel facility under ``loop``: "epoll", "kqueue", "io_uring"
    (zloop's), "kqueue-emulated" (zloop's portable Linux build), or the
    name of another selector stock asyncio uses ("poll", "select")."""
    backend = getattr(loop, "_backend", None)
    if backend is not None:  # zloop
        if backend == "kqueue" and not hasattr(select, "kqueue"):
            return "kqueue-emulated"
        return backend
    selector = getattr(loop, "_selector", None)
    names = {"EpollSelector": "epoll", "KqueueSelector": "kqueue", "PollSelector": "poll",
             "DevpollSelector": "devpoll", "SelectSelector": "select"}
    return names.get(type(selector).__name__, type(selector).__name__)


def watch_refusal(loop, fd, write=False):
    """The errno with which the poller under ``loop`` refuses to watch
    ``fd`` (for reading, or writing), or None if it takes it: asked of
    that kernel facility itself, with a throwaway instance of it. Stock
    asyncio and zloop on epoll: epoll refuses regular files and /dev/null
    (EPERM); zloop's io_uring backend refuses what epoll does; kqueue takes
    regular files; FreeBSD's refuses a pipe whose reader is gone (EPIPE).
    zloop's emulated kqueue follows its personality's rules."""
    poller = poller_of(loop)
    if poller == "kqueue-emulated":
        return _emulated_kqueue_refusal(fd, write)
    if poller in ("epoll", "io_uring"):
        return _refusal(lambda: _epoll_probe(fd, write))
    if poller == "kqueue":
        return _refusal(lambda: _kqueue_probe(fd, write))
    return None  # poll(2) and select(2) take any open descriptor


def _refusal(probe):
    try:
        probe()
    except OSError as exc:
        return exc.errno
    return None


def _epoll_probe(fd, write):
    ep = select.epoll()
    try:
        ep.register(fd, select.EPOLLOUT if write else select.EPOLLIN)
    finally:
        ep.close()


def _kqueue_probe(fd, write):
    kq = select.kqueue()
    try:
        event = select.kevent(fd, select.KQ_FILTER_WRITE if write else select.KQ_FILTER_READ,
                              select.KQ_EV_ADD)
        kq.control([event], 0, 0)
    finally:
        kq.close()


def _emulated_kqueue_refusal(fd, write):
    # The rules of src/core/os/kqueue_emu.zig: regular files as the
    # personality says, a widowed pipe refused for writing under FreeBSD's,
    # everything else as epoll, which it runs on.
    mode = os.fstat(fd).st_mode
    personality = kqueue_personality()
    if stat.S_ISREG(mode):
        return errno.EPERM if personality == "" else None
    if write and personality == "freebsd" and stat.S_ISFIFO(mode) and _reader_gone(fd):
        return errno.EPIPE
    return _refusal(lambda: _epoll_probe(fd, write))


def _reader_gone(fd):
    p = select.poll()
    p.register(fd, select.POLLOUT)
    return any(ev & select.POLLERR for _, ev in p.poll(0))


def exited_child_watch_refused(loop):
    """Whether zloop's ``loop`` refuses to watch an exited child that is
    not reaped yet (ESRCH): kqueue on macOS does (XNU's EVFILT_PROC no
    longer finds an exiting process); FreeBSD's kqueue and Linux's pidfds
    report its exit at once. Asked of a real kqueue with a child made to
    exit; of the emulation, its personality."""
    poller = poller_of(loop)
    if poller == "kqueue-emulated":
        return kqueue_personality() == "macos"
    if poller != "kqueue":
        return False
    if "exited_child" not in _unix_facts:
        child = subprocess.Popen([sys.executable, "-c", ""])
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        kq = select.kqueue()
        try:
            kq.control([select.kevent(child.pid, select.KQ_FILTER_PROC, select.KQ_EV_ADD,
                                      select.KQ_NOTE_EXIT)], 0, 0)
            _unix_facts["exited_child"] = False
        except ProcessLookupError:
            _unix_facts["exited_child"] = True
        finally:
            kq.close()
            child.wait()
    return _unix_facts["exited_child"]

