"""Instruction counts per operation of the micro-benchmarks, under callgrind.

Wall-clock figures on a shared 2-core machine are noisy; instructions are
not.  micro.py --icount runs each benchmark for n and then 3n operations with
a marker call (os.getpgrp) around each run; callgrind --dump-before=getpgrp
writes one profile per stretch between markers, so

    instructions per op = (I(3n) - I(n)) / 2n

with start-up, warm-up, loop creation and the collector's pass cancelled out.
Lower is better; ratios are shown as baseline ÷ loop, so >1 is cheaper.
The threadsafe benchmark is left out: how often the loop wakes up depends on
thread timing, which valgrind's serialised threads distort; threadsafe_post
counts call_soon_threadsafe's own post and run instead (from the loop's
thread).

The echo part runs uvloop's unmodified echoserver.py (as echo.py does) under
callgrind with one client connection making sequential round trips, so that
every request takes the same path. callgrind_control zeroes the counters
after a warm-up, then dumps after n and after 3n more requests: per request
= (I(3n) - I(n)) / 2n again, for the instructions of the server process
(user space: what the kernel does inside the syscalls is not counted). The
syscalls per request come from two runs of the same server under `strace -c`
(not valgrind, under which clock_gettime is a syscall rather than a vDSO
call), taking n and 3n requests: their difference over 2n. glibc is told not to copy
with `rep movsb`, which callgrind counts once per byte (a 10 KiB memcpy would
read as 10,240 instructions); its vector loop counts as what it executes.

The C floors (echo.py's echo_floor.c: epoll_wait, recv, send and nothing
else; echo_floor_uring.c: one io_uring_enter per request) are counted the
same way, once per message size, so each loop's instructions above the
floor's are its own work per request, repeatable to a few percent where the
wall-clock gap to the floor (echo.py) spreads by microseconds.  The loops on
io_uring get a second gap table, above the io_uring floor.
"""

import glob
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time

import common
import conn_client
import echo
import httpbench

BENCHES = ["call_soon", "call_later", "sleep0", "gather", "threadsafe_post"]
# This run's profiles and strace tables: a directory of its own, so that
# two runs at once (another Python, another build) never take each other's
# files.
RUN_DIR = os.path.join(common.CACHE_DIR, "callgrind", "run-%d" % os.getpid())
N_OPS = 3000  # multiple of gather's batch (1000); 3n = 9000


def check(args):
    if parts(args) & {"http", "tls"}:
        proc = subprocess.run(
            [args.python, "-c", "import uvicorn, httptools; print(uvicorn.__version__)"],
            capture_output=True, text=True, cwd=common.CHILD_CWD)
        if proc.returncode != 0:
            raise common.PreconditionError(
                "%s cannot import uvicorn and httptools (icount's http part): "
                "python bench/run.py setup" % args.python)
        args.uvicorn_version = proc.stdout.strip()
    if shutil.which("strace") is None:
        raise common.PreconditionError("strace not found: apt-get install -y strace")
    if shutil.which("valgrind") is None:
        raise common.PreconditionError(
            "valgrind not found: apt-get update && apt-get install -y valgrind")


def count(args, name, n):
    """Run micro.py --icount for one loop; return {bench: instructions/op}."""
    os.makedirs(RUN_DIR, exist_ok=True)
    base = os.path.join(RUN_DIR, "%s.out" % name)
    for old in glob.glob(base + "*"):
        os.remove(old)
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + base,
           "--dump-before=getpgrp", args.python,
           os.path.join(common.BENCH_DIR, "micro.py"), "--loop", name,
           "--bench", ",".join(BENCHES), "--n", str(n), "--icount"]
    env = dict(os.environ, PYTHONHASHSEED="0")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                          cwd=common.CHILD_CWD, env=env)
    if proc.returncode != 0:
        hint = ""
        if "unhandled instruction bytes: 0x62" in proc.stderr:
            # 0x62 starts an EVEX (AVX-512) instruction, which valgrind cannot run.
            hint = ("%s was compiled with AVX-512 (a native-CPU build); valgrind cannot "
                    "run that: `python3 bench/run.py setup --with-zloop --zloop-cpu "
                    "x86_64_v3`, then icount --python .venv-bench/pyX.Y-x86_64_v3/bin/python. "
                    % name)
        raise RuntimeError("%scallgrind run failed (%d): %s"
                           % (hint, proc.returncode, proc.stderr.strip()[-800:]))

    def total(i):
        with open("%s.%d" % (base, i)) as f:
            match = re.search(r"^totals:\s+(\d+)", f.read(), re.M)
        return int(match.group(1))

    result = {}
    for k, bench in enumerate(BENCHES):
        small, large = total(3 * k + 2), total(3 * k + 3)
        result[bench] = {"per_op": (large - small) / (2 * n),
                         "instructions_n": small, "instructions_3n": large}
    return result


# (mode, message size) cells of the echo part; modes as in echo.MODES.
ECHO_CELLS = [("proto", 1024), ("buffered", 1024), ("streams", 1024), ("sock", 1024),
              ("proto", 10240), ("buffered", 10240), ("streams", 10240)]
ECHO_WARMUP = 300
# No `rep movsb`/`rep stosb` in glibc's memcpy/memset (see the docstring).
NO_REP_STRINGS = ("glibc.cpu.x86_rep_movsb_threshold=4294967295:"
                  "glibc.cpu.x86_rep_stosb_threshold=4294967295")


# Sock mode's server tries recv() before it waits, so its cost depends on
# whether the next message is already there, a race between the client and
# a server slowed down by callgrind (the same build measured 5.7k to 14.9k
# instructions a request). Its client pauses before each message, so the
# server always finds the socket empty and waits: the path of a server whose
# clients are slower than it. The other modes wait in the loop either way.
ECHO_PAUSE_S = {"sock": 0.001}


def echo_client(port, mode):
    """A connection to the echo server; over TLS (no verification, as
    echoclient.py --ssl) in tls mode."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if mode != "tls":
        return sock
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx.wrap_socket(sock)


def round_trips(sock, msg, n, pause_s=0.0):
    for _ in range(n):
        if pause_s:
            time.sleep(pause_s)
        sock.sendall(msg)
        got = 0
        while got < len(msg):
            chunk = sock.recv(len(msg))
            if not chunk:
                raise RuntimeError("the echo server closed the connection")
            got += len(chunk)


def dump_totals(path):
    """{event: total} of one callgrind dump."""
    with open(path) as f:
        text = f.read()
    events = re.search(r"^events:\s+(.*)$", text, re.M).group(1).split()
    totals = [int(x) for x in re.search(r"^totals:\s+(.*)$", text, re.M).group(1).split()]
    return dict(zip(events, totals))


def server_cmd(args, name, script_dir, mode, port):
    """The echo server's argv: uvloop's echoserver.py on loop `name`, or a
    C floor (which echoes the same way in every mode)."""
    if name in echo.FLOORS:
        return [echo.build_floor(name), "127.0.0.1", str(port)]
    return [args.python] + echo_server_args(name, script_dir, mode, port)


def count_echo(args, name, script_dir, mode, size, n):
    """One echo server under callgrind; {instructions, syscalls} per request."""
    msg = b"x" * size
    pause_s = ECHO_PAUSE_S.get(mode, 0.0)

    def connect(port):
        return echo_client(port, mode)

    def exchange(sock, k):
        round_trips(sock, msg, k, pause_s)

    # A file name: "C floor (io_uring)" -> "echo-C-floor-io_uring".
    label = "echo-" + re.sub(r"[^\w.]+", "-", name).strip("-")
    return count_server(label,
                        lambda port: (server_cmd(args, name, script_dir, mode, port), None),
                        connect, exchange, ECHO_WARMUP, n)


def count_server(label, make_cmd, connect, exchange, warmup, n):
    """A server under callgrind, then twice under strace: {instructions,
    syscalls} per request. make_cmd(port) -> (argv, environment or None);
    connect(port) -> a client socket; exchange(sock, k) makes k requests,
    each answered before the next."""
    os.makedirs(RUN_DIR, exist_ok=True)
    base = os.path.join(RUN_DIR, "%s.out" % label)
    for old in glob.glob(base + "*"):
        os.remove(old)
    port = common.free_port()
    argv, env = make_cmd(port)
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + base] + argv
    env = dict(env or os.environ, PYTHONHASHSEED="0", GLIBC_TUNABLES=NO_REP_STRINGS)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, cwd=common.CHILD_CWD, env=env)

    def control(*what):
        subprocess.run(["callgrind_control"] + list(what) + [str(proc.pid)], check=True,
                       capture_output=True, timeout=120)

    failure = None
    try:
        common.wait_port(port, proc, timeout_s=180)
        with connect(port) as sock:
            exchange(sock, warmup)
            control("--zero")
            exchange(sock, n)
            control("--dump=n")
            exchange(sock, 3 * n)
            control("--dump=3n")
    except (RuntimeError, OSError) as exc:
        failure = exc
    finally:
        exited = proc.poll()
        common.stop(proc)
        stderr = proc.stderr.read()
        proc.stderr.close()
    if failure is not None:
        # What the server said, and whether it was still running: a client
        # that met another process on a port free_port() handed out sees a
        # close while the server under test runs on, silent.
        raise RuntimeError("%s (server %s; its stderr: %s)" % (
            failure, "running" if exited is None else "exited with %s" % exited,
            stderr.strip()[-800:] or "empty")) from failure
    dumps = sorted(glob.glob(base + ".*"), key=lambda p: int(p.rsplit(".", 1)[1]))
    if len(dumps) < 2:
        raise RuntimeError("callgrind wrote %d dumps: %s" % (len(dumps), stderr.strip()[-800:]))
    small, large = dump_totals(dumps[-2]), dump_totals(dumps[-1])

    def syscalls(k):
        return count_syscalls(make_cmd, connect, exchange, warmup + k)

    return {"instructions": (large["Ir"] - small["Ir"]) / (2 * n),
            "syscalls": (syscalls(3 * n) - syscalls(n)) / (2 * n)}


def echo_server_args(name, script_dir, mode, port):
    return [os.path.join(common.BENCH_DIR, "echo_launcher.py"), name,
            os.path.join(script_dir, "echoserver.py")] + echo.MODES[mode] + [
            "--addr", "127.0.0.1:%d" % port]


def count_syscalls(make_cmd, connect, exchange, k):
    """Syscalls of a whole server run (count_server's arguments): start-up and
    k requests."""
    os.makedirs(RUN_DIR, exist_ok=True)
    out = os.path.join(RUN_DIR, "strace-server.txt")
    port = common.free_port()
    argv, env = make_cmd(port)
    cmd = ["strace", "-f", "-c", "-o", out] + argv
    env = dict(env or os.environ, PYTHONHASHSEED="0")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=common.CHILD_CWD, env=env)
    def stop_server(sig):
        # strace -c writes its table once the server it runs is gone.
        try:
            with open("/proc/%d/task/%d/children" % (proc.pid, proc.pid)) as f:
                children = f.read().split()
        except OSError:
            return
        for child in children:
            try:
                os.kill(int(child), sig)
            except ProcessLookupError:
                pass

    try:
        common.wait_port(port, proc, timeout_s=60)
        with connect(port) as sock:
            exchange(sock, k)
        stop_server(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            stop_server(signal.SIGKILL)  # never leave the server behind strace
        common.stop(proc)
    with open(out) as f:
        match = re.search(r"^-+(?: -+)*\n\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?total$",
                          f.read(), re.M)
    if not match:
        raise RuntimeError("no total in strace's table (%s)" % out)
    return int(match.group(1))


def echo_cells(args):
    cells = ECHO_CELLS
    if getattr(args, "modes", None):
        cells = [c for c in cells if c[0] in args.modes.split(",")]
    if getattr(args, "sizes", None):
        sizes = {int(x) * 1024 for x in args.sizes.split(",") if x}
        cells = [c for c in cells if c[1] in sizes]
    return cells


def run_echo(args, present, names, info, rounds):
    """The echo part: rows for ratio_table, and the syscalls table."""
    script_dir = echo.fetch_scripts(args.python)
    n = 500 if args.quick else 2000
    samples, errors = {}, {}
    cells = echo_cells(args)
    floors = list(echo.FLOORS)
    for rnd in range(rounds):
        for size in sorted({size for _, size in cells}):
            for floor in floors:
                print("icount echo round %d/%d: %s %s" % (rnd + 1, rounds, floor,
                      echo.size_label(size)), file=sys.stderr)
                try:
                    res = count_echo(args, floor, script_dir, "proto", size, n)
                    samples.setdefault(("floor", size, floor), []).append(res)
                except Exception as exc:
                    errors[("floor", size, floor)] = str(exc)
                    print("  FAILED: %s" % exc, file=sys.stderr)
        for mode, size in cells:
            for name in present:
                print("icount echo round %d/%d: %s %s %s" % (rnd + 1, rounds, name, mode,
                      echo.size_label(size)), file=sys.stderr)
                try:
                    res = count_echo(args, name, script_dir, mode, size, n)
                    samples.setdefault((mode, size, name), []).append(res)
                except Exception as exc:
                    errors[(mode, size, name)] = str(exc)
                    print("  FAILED: %s" % exc, file=sys.stderr)
    rows = []
    for mode, size in cells:
        row = {"bench": "%s %s" % (mode, echo.size_label(size)), "loops": {}}
        for name in names + floors:
            key = ("floor" if name in floors else mode, size, name)
            row["loops"][name] = common.loop_entry(
                name, None if name in floors else info, samples.get(key), errors.get(key),
                {"instructions_per_request": ("instructions", False),
                 "syscalls_per_request": ("syscalls", False)})
        rows.append(row)
    cols = names + floors
    md = ("\n### icount echo: server instructions per request under callgrind (in brackets: "
          "%s's ÷ this one's, >1 is cheaper)\n\n" % args.baseline)
    md += common.ratio_table(rows, cols, "instructions_per_request", args.baseline,
                             "mode, size", higher_is_better=False, stat="median")
    md += floor_gap_table(rows, names, echo.FLOOR)
    if echo.uring_loops(names):
        md += floor_gap_table(rows, echo.uring_loops(names), echo.FLOOR_URING,
                              "above_uring_floor", "io_uring C floor")
    md += ("\n### icount echo: server syscalls per request\n\n")
    md += common.ratio_table(rows, cols, "syscalls_per_request", args.baseline,
                             "mode, size", higher_is_better=False, stat="median")
    pauses = ", ".join("%s %g ms" % (m, p * 1000) for m, p in sorted(ECHO_PAUSE_S.items()))
    md += ("\nuvloop's echoserver.py, unchanged; one connection, sequential round trips "
           "(the client pauses before each in: %s, so the server always waits for it); "
           "(I(3n) − I(n)) / 2n with n = %d after %d warm-up requests; user-space "
           "instructions only (the kernel's work is in the syscalls).\n" % (pauses, n, ECHO_WARMUP))
    return rows, md


def floor_gap_table(rows, names, floor, key="above_floor", label="C floor"):
    """Markdown: each loop's instructions per request above a C floor's
    (medians; also kept in each row's loop entry under `key`)."""
    lines = ["| mode, size | %s |" % " | ".join(names), "|" + "---|" * (len(names) + 1)]
    for row in rows:
        base = row["loops"][floor]
        cells = []
        for name in names:
            entry = row["loops"][name]
            if entry.get("status") != "ok" or base.get("status") != "ok":
                cells.append("n/a")
                continue
            gap = (entry["instructions_per_request"]["median"]
                   - base["instructions_per_request"]["median"])
            entry[key] = gap
            cells.append(common.fmt(gap))
        lines.append("| %s | %s |" % (row["bench"], " | ".join(cells)))
    return ("\n### icount echo: server instructions per request above the %s's "
            "(its own work)\n\n" % label + "\n".join(lines) + "\n")


# The HTTP part: uvicorn (httptools) serving http_app.py as in httpbench.py,
# one keep-alive connection making sequential GET / requests. The client
# pauses before each, as in sock mode, so that the server always waits for
# the next request in its loop: the path of a server whose clients are
# slower than it, and the same path on every request. (wrk's 64 connections
# let a loop serve several per wake-up; one connection is the loop's whole
# cost per request, with nothing shared.)
HTTP_REQUEST = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
HTTP_PAUSE_S = 0.001
HTTP_WARMUP = 320
HTTP_CONNECTIONS = (1, 16)


class HttpClient:
    """k keep-alive connections to the server, used in lockstep: a round
    sends one GET / on each, then reads every answer."""

    def __init__(self, port, k, tls=False):
        self.socks = []
        ctx = conn_client.tls_context() if tls else None
        for _ in range(k):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.socks.append(ctx.wrap_socket(sock) if ctx else sock)
        self.bufs = [b""] * k

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for sock in self.socks:
            sock.close()

    def rounds(self, n, pause_s=HTTP_PAUSE_S):
        for _ in range(n):
            time.sleep(pause_s)
            for sock in self.socks:
                sock.sendall(HTTP_REQUEST)
            for i, sock in enumerate(self.socks):
                self.bufs[i] = self.answer(sock, self.bufs[i])

    @staticmethod
    def answer(sock, buf):
        """Read one whole 200 answer; return what came after it."""
        while True:
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                head = buf[:end]
                length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
                if not head.startswith(b"HTTP/1.1 200 ") or not length:
                    raise RuntimeError("unexpected answer: %r" % head[:200])
                total = end + 4 + int(length.group(1))
                if len(buf) >= total:
                    return buf[total:]
            chunk = sock.recv(65536)
            if not chunk:
                raise RuntimeError("the HTTP server closed the connection")
            buf += chunk


def count_http(args, name, connections, n, tls=None):
    """uvicorn under callgrind: {instructions, syscalls} per request, over
    `connections` connections in lockstep, about n requests (and
    HTTP_WARMUP before them); over HTTPS with tls=(certfile, keyfile)."""
    res = count_server("http%s-%s-c%d" % ("s" if tls else "", name, connections),
                       lambda port: httpbench.uvicorn_cmd(args, name, port, tls),
                       lambda port: HttpClient(port, connections, tls=bool(tls)),
                       lambda client, k: client.rounds(k),
                       max(1, HTTP_WARMUP // connections), max(1, n // connections))
    return {key: value / connections for key, value in res.items()}


def run_http(args, present, names, info, rounds):
    """The HTTP part: rows for ratio_table, and its markdown."""
    n = 320 if args.quick else 960
    samples, errors = {}, {}
    for rnd in range(rounds):
        for connections in HTTP_CONNECTIONS:
            for name in present:
                print("icount http round %d/%d: %s, %d connection(s)"
                      % (rnd + 1, rounds, name, connections), file=sys.stderr)
                try:
                    samples.setdefault((connections, name), []).append(
                        count_http(args, name, connections, n))
                except Exception as exc:
                    errors[(connections, name)] = str(exc)
                    print("  FAILED: %s" % exc, file=sys.stderr)
    rows = []
    for connections in HTTP_CONNECTIONS:
        row = {"bench": "GET /, %d connection%s" % (connections, "s" * (connections > 1)),
               "connections": connections, "loops": {}}
        for name in names:
            row["loops"][name] = common.loop_entry(
                name, info, samples.get((connections, name)), errors.get((connections, name)),
                {"instructions_per_request": ("instructions", False),
                 "syscalls_per_request": ("syscalls", False)})
        rows.append(row)
    md = ("\n### icount http: uvicorn's instructions per request under callgrind (in "
          "brackets: %s's ÷ this one's, >1 is cheaper)\n\n" % args.baseline)
    md += common.ratio_table(rows, names, "instructions_per_request", args.baseline,
                             "uvicorn + httptools", higher_is_better=False, stat="median")
    md += "\n### icount http: uvicorn's syscalls per request\n\n"
    md += common.ratio_table(rows, names, "syscalls_per_request", args.baseline,
                             "uvicorn + httptools", higher_is_better=False, stat="median")
    md += ("\nuvicorn %s --http httptools serving http_app.py (13-byte body); keep-alive "
           "connections used in lockstep (a GET / on each, then every answer read), the "
           "client pausing %g ms before each round so that the server waits for it; "
           "(I(3n) − I(n)) / 2n with n ≈ %d requests after %d warm-up requests; user-space "
           "instructions only.\n"
           % (getattr(args, "uvicorn_version", "?"), HTTP_PAUSE_S * 1000, n, HTTP_WARMUP))
    return rows, md


# The per-connection parts. conn: short connections to echoserver.py
# --proto (conn_client.ShortConnections: connect, 100 B echo, close), one
# after another and in rounds of 100 at once.
# tls: TLS echo at 1, 16 and 64 KiB on one connection (as the echo cells), a
# TLS connection per request (handshake, 100 B echo, close_notify both
# ways, close) to echoserver.py --proto --ssl, and uvicorn over HTTPS with
# one keep-alive connection. Per connection or per request, as
# (I(3n) − I(n)) / 2n again.
CONN_CELLS = [("sequential", 1), ("100 concurrent", 100)]
CONN_WARMUP = 300
TLS_ECHO_SIZES = [1024, 16384, 65536]
TLS_HANDSHAKE_WARMUP = 30
# Loops without TLS: their TLS cells say so instead of failing.


def count_conn(args, name, script_dir, concurrency, n, tls=False):
    """Short connections under callgrind: {instructions, syscalls} per
    connection, about n of them (in rounds of `concurrency`) after the
    warm-up ones."""
    warmup = TLS_HANDSHAKE_WARMUP if tls else CONN_WARMUP
    res = count_server("conn-%s-c%d%s" % (name, concurrency, "-tls" if tls else ""),
                       lambda port: (server_cmd(args, name, script_dir,
                                                "tls" if tls else "proto", port), None),
                       lambda port: conn_client.ShortConnections(port, concurrency, tls),
                       lambda client, k: client.rounds(k),
                       max(1, warmup // concurrency), max(1, n // concurrency))
    return {key: value / concurrency for key, value in res.items()}


def run_cells(args, present, names, info, rounds, title, cells, note):
    """Cells [(label, unit, needs_tls, measure(name) -> {instructions,
    syscalls})] for every loop, interleaved over rounds: (rows, markdown)."""
    rows, _ = common.interleave_cells(
        [(label, needs_tls, measure) for label, _, needs_tls, measure in cells],
        names, info, rounds, "icount " + title,
        {"instructions_per_op": ("instructions", False),
         "syscalls_per_op": ("syscalls", False)})
    for row, (_, unit, _, _) in zip(rows, cells):
        row["unit"] = unit
    md = ("\n### icount %s: server instructions per %s under callgrind (in brackets: %s's "
          "÷ this one's, >1 is cheaper)\n\n" % (title, "connection or request", args.baseline))
    md += common.ratio_table(rows, names, "instructions_per_op", args.baseline, "cell",
                             higher_is_better=False, stat="median")
    md += "\n### icount %s: server syscalls per connection or request\n\n" % title
    md += common.ratio_table(rows, names, "syscalls_per_op", args.baseline, "cell",
                             higher_is_better=False, stat="median")
    md += "\n" + "".join("- %s: per %s\n" % (label, unit) for label, unit, _, _ in cells)
    md += "\n" + note
    return rows, md


def run_conn(args, present, names, info, rounds):
    """The conn part: short connections, sequential and 100 at once."""
    script_dir = echo.fetch_scripts(args.python)
    n = 300 if args.quick else 1000
    n_each = n // 2  # count_server runs n, then 3n more
    cells = [("short connection, %s" % label, "connection", False,
              lambda name, k=k: count_conn(args, name, script_dir, k, n_each))
             for label, k in CONN_CELLS]
    note = ("echoserver.py --proto; each connection: a blocking connect, %d B sent and "
            "echoed, a close (rounds of 100: all connected, then each step on all); "
            "(I(3n) − I(n)) / 2n with 2n = %d connections after %d warm-up ones; user-space "
            "instructions only.\n"
            % (conn_client.SIZE, 2 * n_each, CONN_WARMUP))
    return run_cells(args, present, names, info, rounds, "conn", cells, note)


def run_tls(args, present, names, info, rounds):
    """The tls part: TLS echo, a TLS connection per request, uvicorn over HTTPS."""
    script_dir = echo.fetch_scripts(args.python)
    cert = httpbench.certificate()
    if cert is None:
        raise common.PreconditionError("icount's tls part needs openssl to make a certificate")
    n_echo = 500 if args.quick else 2000
    n_hs = 30 if args.quick else 100
    n_http = 320 if args.quick else 960
    cells = [("TLS echo %s" % echo.size_label(size), "request", True,
              lambda name, size=size: count_echo(args, name, script_dir, "tls", size, n_echo))
             for size in TLS_ECHO_SIZES]
    cells.append(("TLS connection (handshake, 100 B echo, close)", "connection", True,
                  lambda name: count_conn(args, name, script_dir, 1, n_hs, tls=True)))
    cells.append(("uvicorn over HTTPS, 1 connection", "request", True,
                  lambda name: count_http(args, name, 1, n_http, tls=cert)))
    note = ("TLS echo: echoserver.py --proto --ssl (the sdist's RSA-3072 certificate), one "
            "connection, sequential round trips, n = %d; TLS connection: the same server, "
            "each connection a handshake (no verification, as echoclient.py --ssl), %d B "
            "echoed, close_notify both ways, then the close, n = %d after %d warm-up ones; "
            "uvicorn: as the http part, over HTTPS (a self-signed RSA-2048 certificate), "
            "n ≈ %d. rloop has no TLS.\n"
            % (n_echo, conn_client.SIZE, n_hs, TLS_HANDSHAKE_WARMUP, n_http))
    return run_cells(args, present, names, info, rounds, "tls", cells, note)


PARTS = ("micro", "echo", "http", "conn", "tls")


def parts(args):
    """What this run measures: micro, echo, http, conn, tls. Without
    --modes, all of them (echo's default cells); --modes names echo modes,
    and/or the other parts."""
    if not getattr(args, "modes", None):
        return set(PARTS)
    named = {m for m in args.modes.split(",") if m}
    echo_modes = set(echo.MODES) - {"tls"}
    unknown = named - set(PARTS) - echo_modes
    if unknown:
        raise common.PreconditionError("unknown icount modes: %s" % ", ".join(sorted(unknown)))
    return (named & set(PARTS)) | ({"echo"} if named & echo_modes else set())


def run_micro(args, present, names, info, rounds):
    """The micro part: rows for ratio_table, and its markdown."""
    n = N_OPS // 3 if args.quick else N_OPS
    n = max(1000, n - n % 1000)
    samples, errors = {}, {}
    for rnd in range(rounds):
        for name in present:
            print("icount round %d/%d: %s" % (rnd + 1, rounds, name), file=sys.stderr)
            try:
                for bench, res in count(args, name, n).items():
                    samples.setdefault((bench, name), []).append(res)
            except Exception as exc:
                errors[name] = str(exc)
                print("  FAILED: %s" % exc, file=sys.stderr)
    rows = []
    for bench in BENCHES:
        row = {"bench": bench, "loops": {}}
        for name in names:
            row["loops"][name] = common.loop_entry(
                name, info, samples.get((bench, name)), errors.get(name),
                {"instructions_per_op": ("per_op", False)})
        rows.append(row)
    md = ("### icount: instructions per operation under callgrind (in brackets: %s's ÷ this "
          "one's, >1 is cheaper)\n\n" % args.baseline)
    md += common.ratio_table(rows, names, "instructions_per_op", args.baseline, "benchmark",
                             higher_is_better=False, stat="median")
    md += ("\n(I(3n) − I(n)) / 2n with n = %d, PYTHONHASHSEED=0, %d round(s); same "
           "benchmarks as micro, threadsafe excluded.\n" % (n, rounds))
    return rows, md, n


def run_suite(args, names, info):
    rounds = args.rounds or 1  # deterministic: one round is enough
    present = [x for x in names if "missing" not in info["loops"][x]]
    todo = parts(args)
    doc, md = {"params": {"rounds": rounds, "parts": sorted(todo)}}, ""
    if "micro" in todo:
        doc["rows"], part_md, doc["params"]["n"] = run_micro(args, present, names, info, rounds)
        md += part_md
    if "echo" in todo:
        doc["echo_rows"], part_md = run_echo(args, present, names, info, rounds)
        md += part_md
    if "http" in todo:
        doc["http_rows"], part_md = run_http(args, present, names, info, rounds)
        md += part_md
    if "conn" in todo:
        doc["conn_rows"], part_md = run_conn(args, present, names, info, rounds)
        md += part_md
    if "tls" in todo:
        doc["tls_rows"], part_md = run_tls(args, present, names, info, rounds)
        md += part_md
    return doc, md
