"""Echo benchmark: uvloop's own echoserver.py / echoclient.py, unchanged.

The two scripts come from the uvloop sdist on PyPI, pinned by version and
sha256 (UVLOOP_SDIST), fetched with pip into bench/.cache/ and never
committed.  Each loop is injected into the unmodified server by
echo_launcher.py (an event-loop policy, then runpy); two minimal C servers
compiled here with gcc give the kernel-only floors: echo_floor.c (epoll,
recv, send) and echo_floor_uring.c (io_uring, one io_uring_enter a pass).

The server is pinned to one CPU and the client (3 worker processes) to the
other: on a 2-core machine the client saturates first, so requests/s alone
hides the loop.  The figure that shows the loop is the server's CPU time per
request, read from /proc before and after the timed client run (so start-up
and warm-up are not counted).
"""

import hashlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import time

import common
import loops

UVLOOP_SDIST = {
    "name": "uvloop",
    "version": "0.23.0",
    "sha256": "28d160f51ab4da3b187063652e643dea6831072add4adc1e6d62afbe73b6be27",
    "files": ["examples/bench/echoserver.py", "examples/bench/echoclient.py",
              # echoserver.py --ssl loads these, relative to itself.
              "tests/certs/ssl_cert.pem", "tests/certs/ssl_key.pem"],
}

# Server arguments per mode; "sock" is echoserver.py's default
# (loop.sock_recv / loop.sock_sendall).
MODES = {
    "proto": ["--proto"],
    "buffered": ["--proto", "--buffered"],
    "streams": ["--streams"],
    "sock": [],
    # Protocol echo over TLS (echoserver.py --ssl, its own certificate from
    # the sdist; echoclient.py --ssl): only when --modes names it.
    "tls": ["--proto", "--ssl"],
}
DEFAULT_MODES = ["proto", "buffered", "streams", "sock"]
# Client arguments per mode, beyond the defaults.
CLIENT_ARGS = {"tls": ["--ssl"]}

# Message size -> messages per client worker in the warm-up run.  The timed
# run that follows is sized from the warm-up's rate to last about
# TIMED_S seconds, so that a slow loop does not stretch the whole suite and a
# fast one still gets a long enough sample.
SIZES = {1024: 1500, 10240: 1000, 102400: 300}
TIMED_S = 1.2
QUICK_TIMED_S = 0.6
WORKERS = 3  # echoclient.py's default: three connections, one per process
FLOOR = "C floor"
FLOOR_URING = "C floor (io_uring)"
# The floors, in the order of their columns: name -> C source in bench/.
FLOORS = {FLOOR: "echo_floor.c", FLOOR_URING: "echo_floor_uring.c"}


def uring_loops(names):
    """The loops among names that run on io_uring: their own floor is FLOOR_URING."""
    return [n for n in names if n in loops.LOOPS and loops.backend(n) == "io_uring"]


def size_label(size):
    return "%d KiB" % (size // 1024)


# --- preconditions ----------------------------------------------------------

def check(args):
    """Fail early, saying how to fix it, if the echo run cannot work."""
    if shutil.which("gcc") is None:
        raise common.PreconditionError(
            "gcc not found (needed for the C floor servers): apt-get install -y gcc")
    if len(common.cpus()) < 2:
        raise common.PreconditionError(
            "echo needs 2 CPUs to pin server and client apart; this process has %s"
            % common.cpus())
    fetch_scripts(args.python)
    for floor in FLOORS:
        build_floor(floor)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_scripts(python):
    """Return the directory holding the pinned echoserver.py / echoclient.py.

    Downloads the sdist with pip (--require-hashes) on first use; later runs
    reuse bench/.cache/ after checking the tarball's sha256 again.
    """
    sd = UVLOOP_SDIST
    stem = "%s-%s" % (sd["name"], sd["version"])
    dest = os.path.join(common.CACHE_DIR, stem)
    tarball = os.path.join(common.CACHE_DIR, "sdist", stem + ".tar.gz")
    if not (os.path.exists(tarball) and sha256(tarball) == sd["sha256"]):
        os.makedirs(os.path.dirname(tarball), exist_ok=True)
        req = os.path.join(common.CACHE_DIR, "sdist", "requirements.txt")
        with open(req, "w") as f:
            f.write("%s==%s --hash=sha256:%s\n" % (sd["name"], sd["version"], sd["sha256"]))
        print("fetching %s sdist from PyPI ..." % stem, file=sys.stderr)
        proc = subprocess.run(
            # The sdist alone from source: ":all:" would build its build
            # requirements from source too (Cython: many minutes) just to
            # read its metadata.
            [python, "-m", "pip", "download", "--no-deps", "--no-binary", sd["name"],
             "--require-hashes", "-r", req, "-d", os.path.dirname(tarball)],
            capture_output=True, text=True,
        )
        if proc.returncode != 0 or not os.path.exists(tarball):
            raise common.PreconditionError(
                "could not download %s with pip:\n%s" % (stem, proc.stderr.strip()[-2000:]))
    got = sha256(tarball)
    if got != sd["sha256"]:
        raise common.PreconditionError("%s: sha256 %s, expected %s" % (tarball, got, sd["sha256"]))
    with tarfile.open(tarball) as tar:
        for rel in sd["files"]:
            member = tar.getmember("%s/%s" % (stem, rel))  # exact names only
            data = tar.extractfile(member).read()
            path = os.path.join(dest, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if not os.path.exists(path) or open(path, "rb").read() != data:
                with open(path, "wb") as f:
                    f.write(data)
    return os.path.join(dest, "examples", "bench")


def build_floor(floor=FLOOR):
    """Compile a floor's C source (FLOORS) into bench/.cache/ when the source
    is newer; return the executable."""
    source = FLOORS[floor]
    src = os.path.join(common.BENCH_DIR, source)
    exe = os.path.join(common.CACHE_DIR, source[:-len(".c")])
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
        os.makedirs(common.CACHE_DIR, exist_ok=True)
        proc = subprocess.run(["gcc", "-O2", "-Wall", "-o", exe, src],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise common.PreconditionError("gcc failed on %s:\n%s" % (source, proc.stderr))
    return exe


# --- one measurement ----------------------------------------------------------

def run_client(args, script_dir, port, size, num, mode):
    """Run echoclient.py on the client CPU; return its requests/s."""
    cmd = [args.python, os.path.join(script_dir, "echoclient.py"),
           "--msize", str(size), "--num", str(num), "--workers", str(WORKERS),
           "--addr", "127.0.0.1:%d" % port] + CLIENT_ARGS.get(mode, [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          cwd=common.CHILD_CWD, preexec_fn=common.pin(args.client_cpu))
    match = re.search(r"^([0-9.e+]+) requests/sec", proc.stdout, re.M)
    if proc.returncode != 0 or not match:
        raise RuntimeError("echoclient failed (%d): %s" % (
            proc.returncode, (proc.stderr or proc.stdout).strip()[-500:]))
    return float(match.group(1))


def measure(args, script_dir, server_cmd, size, warm_num, timed_s, check_line=None,
            mode="proto"):
    """Start a server, warm it up, time one client run; return the figures."""
    busy = common.settle(args.settle_s)
    port = common.free_port()
    cmd = [a.replace("{port}", str(port)) for a in server_cmd]
    log_path = os.path.join(common.CACHE_DIR, "echo-server.log")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                cwd=common.CHILD_CWD, preexec_fn=common.pin(args.server_cpu))
    try:
        common.wait_port(port, proc)
        warm_rps = run_client(args, script_dir, port, size, warm_num, mode)
        num = max(200, int(warm_rps * timed_s / WORKERS))
        cpu0, ticks0 = common.cpu_ns(proc.pid), common.cpu_ticks_ns(proc.pid)
        rps = run_client(args, script_dir, port, size, num, mode)
        cpu1, ticks1 = common.cpu_ns(proc.pid), common.cpu_ticks_ns(proc.pid)
    finally:
        common.stop(proc)
        with open(log_path) as f:
            log_text = f.read()
    if check_line and check_line not in log_text:
        raise RuntimeError("server log lacks %r (loop not injected?):\n%s"
                           % (check_line, log_text[-500:]))
    requests = num * WORKERS
    return {
        "rps": rps,
        "requests": requests,
        "busy_before": busy,
        "cpu_us_per_req": (cpu1 - cpu0) / 1e3 / requests,
        "cpu_us_per_req_ticks": (ticks1 - ticks0) / 1e3 / requests,
    }


# --- the suite ------------------------------------------------------------------

def run_suite(args, names, info):
    """All modes × sizes × loops (+ the C floors), interleaved over rounds."""
    script_dir = fetch_scripts(args.python)
    floor_exes = {floor: build_floor(floor) for floor in FLOORS}
    server_script = os.path.join(script_dir, "echoserver.py")
    launcher = os.path.join(common.BENCH_DIR, "echo_launcher.py")
    cpus = common.cpus()
    args.server_cpu, args.client_cpu = cpus[0], cpus[1]
    rounds = args.rounds or (1 if args.quick else 3)
    present = [n for n in names if "missing" not in info["loops"][n]]
    modes = list(DEFAULT_MODES)
    sizes = list(SIZES)
    if args.quick:
        modes, sizes = ["proto", "sock"], [1024, 102400]
    if getattr(args, "modes", None):
        modes = [m for m in args.modes.split(",") if m]
        unknown = set(modes) - set(MODES)
        if unknown:
            raise common.PreconditionError("unknown echo modes: %s" % ", ".join(sorted(unknown)))
    if getattr(args, "sizes", None):
        sizes = [int(k) * 1024 for k in args.sizes.split(",") if k]
        unknown = set(sizes) - set(SIZES)
        if unknown:
            raise common.PreconditionError("echo sizes must be among 1, 10, 100 (KiB)")
    timed_s = getattr(args, "timed_s", None) or (QUICK_TIMED_S if args.quick else TIMED_S)

    samples = {}  # (mode, size, loop) -> list of measure() dicts
    errors = {}
    for rnd in range(rounds):
        for size in sizes:
            jobs = [("floor", floor, [exe, "127.0.0.1", "{port}"], None)
                    for floor, exe in floor_exes.items()]
            for mode in modes:
                for name in present:
                    cmd = [args.python, launcher, name, server_script] + MODES[mode] + [
                        "--addr", "127.0.0.1:{port}"]
                    jobs.append((mode, name, cmd, "echo_launcher: loop created:"))
            for mode, name, cmd, check_line in jobs:
                print("echo round %d/%d: %s %s %s" % (rnd + 1, rounds, mode, size_label(size),
                                                       name), file=sys.stderr)
                try:
                    res = measure(args, script_dir, cmd, size, SIZES[size], timed_s,
                                  check_line, mode)
                except Exception as exc:  # one failure must not hide the rest
                    errors[(mode, size, name)] = str(exc)
                    print("  FAILED: %s" % exc, file=sys.stderr)
                    continue
                res["round"] = rnd
                samples.setdefault((mode, size, name), []).append(res)
                time.sleep(0.2)  # let TIME_WAIT sockets and the scheduler settle

    return build_report(args, names, info, modes, sizes, samples, errors, rounds, timed_s)


def floor_gaps(samples, mode, size, name, floor_name=FLOOR):
    """A loop's CPU per request minus a C floor's in the same round, in µs.

    The floors run just before the loops of each round, so a pair shares
    most of the machine's slow drifts (another VM's load, the host's
    frequency) that make single cells wander by 2 µs here.
    """
    floor = {s["round"]: s["cpu_us_per_req"]
             for s in samples.get(("floor", size, floor_name), [])}
    return [s["cpu_us_per_req"] - floor[s["round"]]
            for s in samples.get((mode, size, name), []) if s["round"] in floor]


def floor_table(rows, names, samples, floor_name=FLOOR, key="floor_gap_us",
                label="C floor"):
    """Markdown: each loop's gap to a C floor, paired by round (kept in each
    row's loop entry under `key`)."""
    head = "| mode, size | %s |" % " | ".join(names)
    lines = [head, "|" + "---|" * (len(names) + 1)]
    for row in rows:
        cells = []
        for name in names:
            gaps = floor_gaps(samples, row["mode"], row["size"], name, floor_name)
            row["loops"][name][key] = gaps
            if not gaps:
                cells.append("n/a")
                continue
            cells.append("%+.2f (%+.1f to %+.1f)" % (statistics.median(gaps), min(gaps), max(gaps)))
        lines.append("| %s | %s |" % (row["bench"], " | ".join(cells)))
    return ("\n### echo: server CPU µs per request above the %s's in the same round, "
            "median (range)\n\n" % label + "\n".join(lines) + "\n")


def build_report(args, names, info, modes, sizes, samples, errors, rounds, timed_s):
    rows = []
    for mode in modes:
        for size in sizes:
            row = {"bench": "%s %s" % (mode, size_label(size)), "mode": mode, "size": size,
                   "loops": {}}
            for name in names + list(FLOORS):
                key = ("floor" if name in FLOORS else mode, size, name)
                row["loops"][name] = common.loop_entry(
                    name, None if name in FLOORS else info, samples.get(key), errors.get(key),
                    {"rps": ("rps", True),
                     "cpu_us_per_req": ("cpu_us_per_req", False),
                     "cpu_us_per_req_ticks": ("cpu_us_per_req_ticks", False)})
            rows.append(row)
    cols = names + list(FLOORS)
    busy = [g["busy_before"] for v in samples.values() for g in v]
    stat = args.stat or "median"
    md = ("### echo: server CPU µs per request, %s (in brackets: %s's CPU per request "
          "÷ this one's, >1 is cheaper)\n\n" % (stat, args.baseline))
    md += common.ratio_table(rows, cols, "cpu_us_per_req", args.baseline, "mode, size",
                             higher_is_better=False, stat=stat)
    md += floor_table(rows, names, samples)
    if uring_loops(names):
        md += floor_table(rows, uring_loops(names), samples, FLOOR_URING,
                          "uring_floor_gap_us", "io_uring C floor")
    md += "\n### echo: requests/s, %s (ratio to %s)\n\n" % (stat, args.baseline)
    md += common.ratio_table(rows, cols, "rps", args.baseline, "mode, size", stat=stat)
    md += ("\nuvloop %s examples/bench/echoserver.py + echoclient.py (%d workers), unchanged; "
           "server on CPU %d, client on CPU %d; %s of %d rounds; each timed client run "
           "about %.1f s after a warm-up run; machine busy before each server start: median %s.\n"
           % (UVLOOP_SDIST["version"], WORKERS, args.server_cpu, args.client_cpu, stat,
              rounds, timed_s, common.pct(busy)))
    params = {"rounds": rounds, "workers": WORKERS, "server_cpu": args.server_cpu,
              "client_cpu": args.client_cpu, "sdist": UVLOOP_SDIST,
              "timed_s": timed_s,
              "warmup_messages_per_worker": {str(s): SIZES[s] for s in sizes}}
    return {"rows": rows, "params": params}, md
