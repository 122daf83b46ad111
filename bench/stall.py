"""Stalls: an echo's round trips while the same loop frees bursts of write
buffers (`bench/run.py stall`).

    python bench/stall.py --loop zloop [--bursts 4] [--burst-mib 256]

One server process, on the loop under test, serves two ports: an echo, and
a burst port whose every connection is sent its share of `--burst-mib` in
`--write-kib` writes at once (a server streaming to clients that stop
reading: all of it stays in the transports' buffers). A client process
pings the echo every 2 ms and times each round trip, while it opens
`--connections` burst connections that never read (the server keeps a small
object beside each write, so that the freed buffers are holes in its
heap), waits for the server to
have buffered them, and resets them: the server frees the buffers, and
whatever gives that memory back to the system (zloop's `malloc_trim`) runs
on the loop thread. After the last burst the echo stops and the loop is
left idle for a moment. Printed: the round trips' median; the 99th
percentile and worst of those that began within half a second of a reset
(where the frees, and a trim, fall; a burst's own writes, the same work on
every loop, stall the echo elsewhere), in ms; the trims done while the echo ran and after it stopped
(zloop); and the server's resident memory before the bursts, at the last
peak and at the end, in MiB.

`run_suite` runs it for every loop, interleaved round by round.
"""

import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loops  # noqa: E402  (after the path tweak, on purpose)

PING_BYTES = 64
PING_EVERY_S = 0.002


def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def trims():
    try:
        from zloop import _zloop
    except ImportError:
        return None
    return _zloop._trims()


def serve(loop, args):
    """The server: echo, burst and control ports; runs until the control
    connection asks for the figures."""
    import asyncio

    per_conn = args.burst_mib * 1024 * 1024 // args.connections
    chunk = args.write_kib * 1024
    done = loop.create_future()
    marks = {}

    class Echo(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport

        def data_received(self, data):
            self.transport.write(data)

    kept = []

    class Burst(asyncio.Protocol):
        def connection_made(self, transport):
            # Each write its own object, as a stream sent in chunks, and
            # between them small objects the server keeps (its state grows
            # as it serves): the buffers, once freed, are holes in the heap
            # between live blocks, which only a trim gives back.
            for _ in range(per_conn // chunk):
                transport.write(bytes(chunk))
                kept.append(bytes(600))
            marks["peak"] = max(marks.get("peak", 0), rss_mib())

        def connection_lost(self, exc):
            pass

    class Control(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport

        def data_received(self, data):
            if data.startswith(b"mark"):  # the echo stops: what was trimmed so far
                marks["trims_busy"] = trims()
                self.transport.write(b"ok")
            elif data.startswith(b"stats"):
                marks["rss_end"] = rss_mib()
                marks["trims_end"] = trims()
                self.transport.write(json.dumps(marks).encode())
                done.set_result(None)

    async def main():
        servers = [await loop.create_server(p, "127.0.0.1", 0) for p in (Echo, Burst, Control)]
        ports = [s.sockets[0].getsockname()[1] for s in servers]
        marks["rss_start"] = rss_mib()
        marks["trims_start"] = trims()
        client = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--client", ",".join(map(str, ports)),
             "--bursts", str(args.bursts), "--connections", str(args.connections)],
            stdout=subprocess.PIPE,
        )
        await done
        out, _ = await loop.run_in_executor(None, client.communicate)
        for s in servers:
            s.close()
        return json.loads(out)

    result = loop.run_until_complete(main())
    start = marks["trims_start"]
    result.update({
        "rss_start_mib": marks["rss_start"],
        "rss_peak_mib": marks.get("peak"),
        "rss_end_mib": marks["rss_end"],
        "trims_while_echoing": None if start is None else marks["trims_busy"] - start,
        "trims_after": None if start is None else marks["trims_end"] - marks["trims_busy"],
    })
    return result


def client(ports, bursts, connections):
    """The client: pings the echo while it opens and resets the bursts."""
    echo_port, burst_port, control_port = ports
    echo = socket.create_connection(("127.0.0.1", echo_port))
    echo.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    control = socket.create_connection(("127.0.0.1", control_port))
    rtts = []  # (when it started, round trip), s
    resets = []  # when each burst's reset began
    stop = threading.Event()

    def ping():
        msg = b"p" * PING_BYTES
        while not stop.is_set():
            t0 = time.perf_counter()
            echo.sendall(msg)
            got = 0
            while got < PING_BYTES:
                got += len(echo.recv(PING_BYTES - got))
            rtts.append((t0, time.perf_counter() - t0))
            time.sleep(PING_EVERY_S)

    pinger = threading.Thread(target=ping)
    pinger.start()
    time.sleep(0.3)
    for _ in range(bursts):
        socks = []
        for _ in range(connections):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", burst_port))
            socks.append(s)
        time.sleep(0.6)  # the server buffers its writes to them
        resets.append(time.perf_counter())
        for s in socks:
            # Reset: the server's transports end at once, their buffers freed.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        time.sleep(0.6)
    stop.set()
    pinger.join()
    control.sendall(b"mark")
    control.recv(16)
    time.sleep(0.5)  # the loop idle: what it does when nothing is ready
    control.sendall(b"stats")
    chunks = []
    while chunk := control.recv(65536):
        chunks.append(chunk)
        try:
            json.loads(b"".join(chunks))
            break
        except ValueError:
            continue
    echo.close()
    control.close()
    # The round trips that began within RESET_WINDOW_S of a reset: the
    # frees and whatever follows them (a trim) fall there; the bursts'
    # own writes (the same work on every loop) do not.
    near = sorted(r for t, r in rtts if any(0 <= t - at < RESET_WINDOW_S for at in resets))
    every = sorted(r for _, r in rtts)
    print(json.dumps({
        "pings": len(every),
        "pings_near_resets": len(near),
        "rtt_p50_ms": _pct(every, 0.5),
        "rtt_p99_ms": _pct(near, 0.99),
        "rtt_max_ms": near[-1] * 1000,
        "rtt_max_overall_ms": every[-1] * 1000,
    }))


RESET_WINDOW_S = 0.5


def _pct(sorted_s, q):
    return sorted_s[min(len(sorted_s) - 1, int(len(sorted_s) * q))] * 1000


# --- the orchestrator's side (bench/run.py stall) ---------------------------


def check(args):
    if not os.path.exists("/proc/self/status"):
        raise RuntimeError("stall reads /proc/self/status (Linux)")


def _measure(args, name):
    import common

    env = dict(os.environ, **loops.environment(name))
    cmd = [args.python, os.path.abspath(__file__), "--loop", name]
    if args.quick:
        cmd += ["--bursts", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          cwd=common.CHILD_CWD, env=env)
    if proc.returncode != 0:
        raise RuntimeError((proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1])
    return json.loads(proc.stdout)


def run_suite(args, names, info):
    import common

    rounds = args.rounds or (1 if args.quick else 3)
    label = "2 ms echo beside bursts of 256 MiB in 16 KiB writes, reset"
    figures = {key: (key, False) for key in ("rtt_p50_ms", "rtt_p99_ms", "rtt_max_ms")}
    rows, _ = common.interleave_cells([(label, False, lambda n: _measure(args, n))],
                                      names, info, rounds, "stall", figures, pause_s=0.5)
    stat = args.stat or "median"
    md = ("### stall: an echo's round trips while the loop frees write-buffer bursts, ms, %s "
          "(p99 and max: within 0.5 s of a reset)\n\n" % stat)
    md += "| loop | p50 | p99 | max | trims while echoing | trims once idle | RSS start / peak / end, MiB |\n"
    md += "|---|---|---|---|---|---|---|\n"
    for name in names:
        entry = rows[0]["loops"][name]
        if entry.get("status") != "ok":
            md += "| %s | %s |  |  |  |  |  |\n" % (name, entry.get("status"))
            continue
        last = entry["samples"][-1]
        md += "| %s | %s | %s | %s | %s | %s | %.0f / %.0f / %.0f |\n" % (
            name, common.fmt(entry["rtt_p50_ms"][stat]), common.fmt(entry["rtt_p99_ms"][stat]),
            common.fmt(entry["rtt_max_ms"][stat]),
            "/".join(str(s["trims_while_echoing"]) for s in entry["samples"]),
            "/".join(str(s["trims_after"]) for s in entry["samples"]),
            last["rss_start_mib"], last["rss_peak_mib"] or 0, last["rss_end_mib"])
    md += ("\nEach loop's server in a process of its own, its client in another, the loops "
           "interleaved round by round; %s of %d rounds (trims: each round's). The last "
           "column is the last round's.\n" % (stat, rounds))
    return {"rows": rows, "params": {"rounds": rounds}}, md


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loop", choices=list(loops.LOOPS))
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--bursts", type=int, default=4)
    parser.add_argument("--burst-mib", type=int, default=256)
    parser.add_argument("--write-kib", type=int, default=16)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    if args.client:
        client([int(p) for p in args.client.split(",")], args.bursts, args.connections)
        return 0
    return loops.run_child(args.loop, lambda loop: serve(loop, args))


if __name__ == "__main__":
    sys.exit(main())
