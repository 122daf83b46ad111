"""Memory per idle connection: the server process alone.

uvloop's echoserver.py (through echo_launcher.py, as in echo.py) serves on
each loop; conn_client.py idle, in a process of its own, opens connections
in two steps, each connection making one 100 B round trip and then staying
open and quiet. The server's resident memory (VmRSS) is read after each
step, once the client has every echo back and the server has gone idle:

    bytes per idle connection = (RSS(N2) - RSS(N1)) / (N2 - N1)

with N1 = 4,000 and N2 = 8,000: 4,000 idle connections, measured after
4,000 first ones, so that what the server allocates once (its first
buffers) and the memory it had free from its start (freed by its imports,
which the first connections take without growing the process) cancel
out. Measured from 0 or from 1,000, the loops' figures depend on how much
each happened to have free. The client's
sockets are in the client's process, so only the server's side counts.
Modes: proto (echoserver.py --proto: a transport and a protocol object per
connection, the loop's own cost) and streams (--streams: asyncio's
StreamReader/StreamWriter and a task per connection on top).

A figure of memory, not time: it depends on what ran, not on how busy the
machine is. Rounds repeat it (the median is reported).
"""

import os
import subprocess
import sys
import time

import common
import conn
import echo

STEPS = (4000, 8000)
MODES = ("proto", "streams")
SETTLE_S = 0.5


def check(args):
    conn.check_conn(args)


def measure(args, name, script_dir, mode):
    """One server, connections opened in STEPS: {rss_kib: [...],
    bytes_per_conn}."""
    port = common.free_port()
    log_path = os.path.join(common.CACHE_DIR, "idle-server.log")

    def pinned():
        conn.raise_fd_limit()
        os.sched_setaffinity(0, {args.server_cpu})

    with open(log_path, "w") as log:
        proc = subprocess.Popen(conn.server_cmd(args, name, script_dir, mode, port),
                                stdout=log, stderr=subprocess.STDOUT, cwd=common.CHILD_CWD,
                                preexec_fn=pinned)
    client = None
    try:
        common.wait_port(port, proc)
        client = subprocess.Popen([args.python, conn.CLIENT, str(port), "idle"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, cwd=common.CHILD_CWD,
                                  preexec_fn=common.pin(args.client_cpu))
        rss, opened = [], 0
        for total in STEPS:
            client.stdin.write("open %d\n" % (total - opened))
            client.stdin.flush()
            line = client.stdout.readline()
            if line.strip() != "open %d" % total:
                raise RuntimeError("idle client: %r %s" % (line, client.stderr.read()[-500:]))
            opened = total
            time.sleep(SETTLE_S)  # the server goes idle (its last callbacks run)
            rss.append(common.rss_kib(proc.pid))
        client.stdin.close()
        client.wait(timeout=60)
    finally:
        if client is not None and client.poll() is None:
            client.kill()
            client.wait()
        common.stop(proc)
    per = (rss[-1] - rss[0]) * 1024 / (STEPS[-1] - STEPS[0])
    return {"rss_kib": rss, "bytes_per_conn": per}


def run_suite(args, names, info):
    cpus = common.cpus()
    args.server_cpu, args.client_cpu = cpus[0], cpus[1]
    rounds = args.rounds or (1 if args.quick else 3)
    script_dir = echo.fetch_scripts(args.python)
    present = [n for n in names if "missing" not in info["loops"][n]]
    samples, errors = {}, {}
    for rnd in range(rounds):
        for mode in MODES:
            for name in present:
                print("idle round %d/%d: %s %s" % (rnd + 1, rounds, mode, name), file=sys.stderr)
                try:
                    samples.setdefault((mode, name), []).append(
                        measure(args, name, script_dir, mode))
                except Exception as exc:  # report, go on with the rest
                    errors[(mode, name)] = str(exc)
                    print("  FAILED: %s" % exc, file=sys.stderr)
                time.sleep(0.5)  # TIME_WAIT sockets of the last run
    rows = []
    for mode in MODES:
        row = {"bench": "%s, idle connections" % mode, "loops": {}}
        for name in names:
            row["loops"][name] = common.loop_entry(
                name, info, samples.get((mode, name)), errors.get((mode, name)),
                {"bytes_per_conn": ("bytes_per_conn", False)})
        rows.append(row)
    md = ("### idle: server RSS bytes per idle connection, median (in brackets: %s's ÷ "
          "this one's, >1 is leaner)\n\n" % args.baseline)
    md += common.ratio_table(rows, names, "bytes_per_conn", args.baseline, "server",
                             higher_is_better=False, stat="median")
    md += ("\nuvloop's echoserver.py (--proto, --streams), server alone on CPU %d; "
           "conn_client.py idle on CPU %d opens %d, then %d connections, each making one "
           "100 B round trip; (RSS(%d) − RSS(%d)) / %d, RSS read %.1f s after each step; "
           "median of %d rounds.\n"
           % (args.server_cpu, args.client_cpu, STEPS[0], STEPS[1], STEPS[1], STEPS[0],
              STEPS[1] - STEPS[0], SETTLE_S, rounds))
    return {"rows": rows, "params": {"rounds": rounds, "steps": STEPS, "settle_s": SETTLE_S,
                                     "server_cpu": args.server_cpu,
                                     "client_cpu": args.client_cpu}}, md
