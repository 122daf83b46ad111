"""Per-connection benchmarks in wall clock: short connections (`conn`) and
TLS (`tls`).

conn: uvloop's echoserver.py --proto on each loop (through
echo_launcher.py, as in echo.py), and conn_client.py making short
connections (connect, 100 B echo, close): one after another, and in rounds
of 100 at once.

tls: TLS echo at 1 and 64 KiB on one connection per client worker
(echoserver.py --proto --ssl and echoclient.py --ssl, as echo.py's tls
mode), TLS connections one after another (conn_client.py --tls: a
handshake, 100 B echo, close_notify both ways), and uvicorn over HTTPS
under wrk (httpbench.py --tls). rloop has no TLS.

As in echo.py the server is pinned to one CPU and the client to the other;
the figure that shows the loop is the server's CPU time per connection or
request, from /proc around a timed client run sized from a warm-up run.
The loops are interleaved round by round.
"""

import os
import re
import subprocess
import sys
import time

import common
import echo
import httpbench

CLIENT = os.path.join(common.BENCH_DIR, "conn_client.py")
LAUNCHER = os.path.join(common.BENCH_DIR, "echo_launcher.py")
TIMED_S = 1.2
QUICK_TIMED_S = 0.6
# Loops without TLS: their TLS cells say so instead of failing.

# Cell -> (server mode in echo.MODES, conn_client arguments, warm-up
# connections). A round of 100 counts as 100 connections.
CONN_CELLS = {
    "short connection, sequential": ("proto", [], 500),
    "short connection, 100 concurrent": ("proto", ["--concurrency", "100"], 1000),
}
HANDSHAKE_CELL = "TLS connection (handshake, 100 B echo, close)"
HANDSHAKE_WARMUP = 100
# TLS echo: message size -> messages per client worker in the warm-up run.
TLS_ECHO_SIZES = {1024: 1500, 65536: 200}


def check_conn(args):
    """Fail early, saying how to fix it, if the conn run cannot work."""
    if len(common.cpus()) < 2:
        raise common.PreconditionError("conn and tls need 2 CPUs to pin server and client apart")
    echo.fetch_scripts(args.python)


def check_tls(args):
    """The same for the tls run, which also needs uvicorn, wrk and openssl."""
    check_conn(args)
    httpbench.check(args)
    if httpbench.certificate() is None:
        raise common.PreconditionError("tls needs the openssl command to make a certificate")


def raise_fd_limit():
    """A preexec step: as many fds as the hard limit allows."""
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def server_cmd(args, name, script_dir, mode, port):
    return [args.python, LAUNCHER, name, os.path.join(script_dir, "echoserver.py")] + \
        echo.MODES[mode] + ["--addr", "127.0.0.1:%d" % port]


def run_client(args, port, n, client_args):
    """conn_client.py short on the client CPU: (connections, seconds)."""
    cmd = [args.python, CLIENT, str(port), "short", str(n)] + client_args
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          cwd=common.CHILD_CWD, preexec_fn=common.pin(args.client_cpu))
    match = re.search(r"^(\d+) connections in ([0-9.]+) s", proc.stdout, re.M)
    if proc.returncode != 0 or not match:
        raise RuntimeError("conn_client failed (%d): %s" % (
            proc.returncode, (proc.stderr or proc.stdout).strip()[-500:]))
    return int(match.group(1)), float(match.group(2))


def measure_conn(args, name, script_dir, mode, client_args, warm_num, timed_s):
    """Start the server, warm it up, time one client run: server CPU µs
    and connections/s."""
    busy = common.settle(args.settle_s)
    port = common.free_port()
    per_round = 1
    if "--concurrency" in client_args:
        per_round = int(client_args[client_args.index("--concurrency") + 1])
    log_path = os.path.join(common.CACHE_DIR, "conn-server.log")

    def pinned():
        raise_fd_limit()
        os.sched_setaffinity(0, {args.server_cpu})

    with open(log_path, "w") as log:
        proc = subprocess.Popen(server_cmd(args, name, script_dir, mode, port), stdout=log,
                                stderr=subprocess.STDOUT, cwd=common.CHILD_CWD,
                                preexec_fn=pinned)
    try:
        common.wait_port(port, proc)
        done, elapsed = run_client(args, port, max(1, warm_num // per_round), client_args)
        rounds = max(1, int(done / elapsed * timed_s / per_round))
        cpu0 = common.cpu_ns(proc.pid)
        done, elapsed = run_client(args, port, rounds, client_args)
        cpu1 = common.cpu_ns(proc.pid)
    finally:
        common.stop(proc)
        with open(log_path) as f:
            log_text = f.read()
    if "echo_launcher: loop created:" not in log_text:
        raise RuntimeError("server log lacks the loop line:\n%s" % log_text[-500:])
    # The wait_port() probe is one more connection, before the timed run.
    return {"rps": done / elapsed, "connections": done, "busy_before": busy,
            "cpu_us_per_req": (cpu1 - cpu0) / 1e3 / done}


def interleave(args, names, info, cells, title):
    """Run cells {label: (needs_tls, measure(name))} for every present loop,
    round by round: (rows, rounds, the machine's busy fractions)."""
    rounds = args.rounds or (1 if args.quick else 3)
    rows, samples = common.interleave_cells(
        [(label, needs_tls, measure) for label, (needs_tls, measure) in cells.items()],
        names, info, rounds, title,
        {"rps": ("rps", True), "cpu_us_per_req": ("cpu_us_per_req", False)},
        pause_s=0.2)  # let TIME_WAIT sockets and the scheduler settle
    busy = [s["busy_before"] for v in samples.values() for s in v]
    return rows, rounds, busy


def report(args, names, rows, title, what, whats, rounds, busy, note):
    stat = args.stat or "median"
    md = ("### %s: server CPU µs per %s, %s (in brackets: %s's ÷ this one's, >1 is "
          "cheaper)\n\n" % (title, what, stat, args.baseline))
    md += common.ratio_table(rows, names, "cpu_us_per_req", args.baseline, "cell",
                             higher_is_better=False, stat=stat)
    md += "\n### %s: %s per second, %s (ratio to %s)\n\n" % (title, whats, stat, args.baseline)
    md += common.ratio_table(rows, names, "rps", args.baseline, "cell", stat=stat)
    md += ("\n%s Server on CPU %d, client on CPU %d; %s of %d rounds; machine busy before "
           "each server start: median %s.\n"
           % (note, args.server_cpu, args.client_cpu, stat, rounds, common.pct(busy)))
    return md


def setup_cpus(args):
    cpus = common.cpus()
    args.server_cpu, args.client_cpu = cpus[0], cpus[1]
    return getattr(args, "timed_s", None) or (QUICK_TIMED_S if args.quick else TIMED_S)


def run_conn(args, names, info):
    """The conn suite: short connections, sequential and 100 at once."""
    timed_s = setup_cpus(args)
    script_dir = echo.fetch_scripts(args.python)
    cells = {label: (False, lambda name, m=mode, a=cargs, w=warm: measure_conn(
        args, name, script_dir, m, a, w, timed_s))
        for label, (mode, cargs, warm) in CONN_CELLS.items()}
    rows, rounds, busy = interleave(args, names, info, cells, "conn")
    note = ("uvloop's echoserver.py --proto; conn_client.py: a blocking connect, 100 B "
            "echoed, a close (rounds of 100: all connected, then each step on all); each "
            "timed client run about %.1f s after a warm-up run." % timed_s)
    md = report(args, names, rows, "conn", "connection", "connections", rounds, busy, note)
    return {"rows": rows, "params": {"rounds": rounds, "timed_s": timed_s,
                                     "server_cpu": args.server_cpu,
                                     "client_cpu": args.client_cpu}}, md


def run_tls(args, names, info):
    """The tls suite: TLS echo, TLS connections, uvicorn over HTTPS."""
    timed_s = setup_cpus(args)
    script_dir = echo.fetch_scripts(args.python)
    cert = httpbench.certificate()
    duration_s = httpbench.QUICK_DURATION_S if args.quick else httpbench.DURATION_S
    server_script = os.path.join(script_dir, "echoserver.py")
    cells = {}
    for size, warm in TLS_ECHO_SIZES.items():
        def echo_cell(name, size=size, warm=warm):
            cmd = [args.python, LAUNCHER, name, server_script] + echo.MODES["tls"] + [
                "--addr", "127.0.0.1:{port}"]
            return echo.measure(args, script_dir, cmd, size, warm, timed_s,
                                "echo_launcher: loop created:", "tls")
        cells["TLS echo %s" % echo.size_label(size)] = (True, echo_cell)
    cells[HANDSHAKE_CELL] = (True, lambda name: measure_conn(
        args, name, script_dir, "tls", ["--tls"], HANDSHAKE_WARMUP, timed_s))
    cells["uvicorn over HTTPS (wrk -c%d)" % httpbench.CONNECTIONS] = (
        True, lambda name: httpbench.measure(args, name, duration_s, cert))
    rows, rounds, busy = interleave(args, names, info, cells, "tls")
    note = ("TLS echo: uvloop's echoserver.py --proto --ssl and echoclient.py --ssl (%d "
            "workers), each timed run about %.1f s; TLS connections: the same server, "
            "conn_client.py --tls (a handshake, 100 B echoed, close_notify both ways, a "
            "close); uvicorn: httpbench.py --tls, wrk -t1 -c%d -d%ds. rloop has no TLS."
            % (echo.WORKERS, timed_s, httpbench.CONNECTIONS, duration_s))
    md = report(args, names, rows, "tls", "request or connection", "requests or connections",
                rounds, busy, note)
    return {"rows": rows, "params": {"rounds": rounds, "timed_s": timed_s,
                                     "http_duration_s": duration_s,
                                     "server_cpu": args.server_cpu,
                                     "client_cpu": args.client_cpu}}, md
