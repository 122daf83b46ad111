"""Helpers shared by the benchmark drivers: processes, CPU accounting, results.

Standard library only; runs in the orchestrating Python (bench/run.py), never
in the Python under test.
"""

import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time

import loops

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(BENCH_DIR)
CACHE_DIR = os.path.join(BENCH_DIR, ".cache")
# Children run here, never in the repository root: a Python started there puts
# the source tree's zloop/ (no compiled engine in it) ahead of the installed
# package on sys.path.
CHILD_CWD = BENCH_DIR
RESULTS_DIR = os.path.join(BENCH_DIR, "results")


class PreconditionError(Exception):
    """Something the benchmark needs is absent; the message says how to fix it."""


# --- the Python under test ------------------------------------------------

PROBE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import loops
out = {}
for name in sys.argv[2].split(","):
    try:
        loops.factory(name)
        module = sys.modules[loops.LOOPS[name][0]]
        out[name] = {"version": loops.version(name), "file": getattr(module, "__file__", "")}
    except loops.LoopMissing as exc:
        out[name] = {"missing": str(exc)}
print(json.dumps({"python": sys.version.split()[0], "executable": sys.executable,
                  "loops": out}))
"""


def probe_loops(python, names):
    """Ask `python` which of `names` it can import: {name: {version|missing}}."""
    proc = subprocess.run(
        [python, "-c", PROBE, BENCH_DIR, ",".join(names)],
        capture_output=True, text=True, timeout=120, cwd=CHILD_CWD,
    )
    if proc.returncode != 0:
        raise PreconditionError(
            "%s could not run the loop probe:\n%s" % (python, proc.stderr.strip())
        )
    return json.loads(proc.stdout)


# --- processes, cores, CPU time -------------------------------------------

def cpus():
    """The CPUs this process may run on, sorted."""
    return sorted(os.sched_getaffinity(0))


def pin(cpu):
    """A preexec_fn that pins the child to one CPU (None: leave it free)."""
    if cpu is None:
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_port(port, proc, timeout_s=20.0):
    """Wait until something accepts on 127.0.0.1:port; fail if proc died first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("server exited with status %s before listening" % proc.returncode)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server did not listen on port %d within %.0f s" % (port, timeout_s))


def cpu_ns(pid):
    """CPU time (user + system) that process `pid` has used so far, in ns.

    Sums /proc/<pid>/task/*/schedstat (ns resolution) over the threads alive
    now; /proc/<pid>/stat counts in clock ticks (10 ms), too coarse for a few
    seconds of load.  A thread that exited between two reads would be lost,
    which is why the result is cross-checked against stat's ticks.
    """
    total = 0
    task_dir = "/proc/%d/task" % pid
    for tid in os.listdir(task_dir):
        try:
            with open(os.path.join(task_dir, tid, "schedstat")) as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:  # the thread ended while we listed
            pass
    return total


def cpu_ticks_ns(pid):
    """utime + stime of the whole thread group from /proc/<pid>/stat, in ns."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def _cpu_jiffies():
    """(busy, total) jiffies of all CPUs from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    total = sum(fields[:8])  # guest time is already inside user
    return total - idle, total


def settle(max_wait_s, busy_below=0.15, window_s=0.25):
    """Wait (at most max_wait_s) for the machine to be nearly idle.

    Other people's jobs share this 2-core machine; starting a measurement in a
    quiet moment lowers the noise, and the busy fraction seen is returned so
    that the results can say how quiet it was.  Returns the last window's
    busy fraction of all CPUs (0.0 to 1.0).
    """
    deadline = time.monotonic() + max_wait_s
    busy_frac = 1.0
    while True:
        busy0, total0 = _cpu_jiffies()
        time.sleep(window_s)
        busy1, total1 = _cpu_jiffies()
        busy_frac = (busy1 - busy0) / max(1, total1 - total0)
        if busy_frac < busy_below or time.monotonic() >= deadline:
            return busy_frac


def stop(proc):
    """Kill a server we started and reap it."""
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


# --- statistics and results -----------------------------------------------

# Loops without TLS: their TLS cells say so.
NO_TLS = {"rloop"}


def interleave_cells(cells, names, info, rounds, title, figures, pause_s=0.0):
    """Measure cells [(label, needs_tls, measure(name) -> dict)] on every
    present loop of `names`, the loops interleaved within each round, a
    failure reported and the rest measured: one row per cell, each loop's
    entry made by loop_entry with `figures`."""
    present = [n for n in names if "missing" not in info["loops"][n]]
    samples, errors = {}, {}
    for rnd in range(rounds):
        for label, needs_tls, measure in cells:
            for name in present:
                if needs_tls and name in NO_TLS:
                    continue
                print("%s round %d/%d: %s %s" % (title, rnd + 1, rounds, label, name),
                      file=sys.stderr)
                try:
                    samples.setdefault((label, name), []).append(measure(name))
                except Exception as exc:  # report, go on with the rest
                    errors[(label, name)] = str(exc)
                    print("  FAILED: %s" % exc, file=sys.stderr)
                time.sleep(pause_s)
    rows = []
    for label, needs_tls, _ in cells:
        row = {"bench": label, "loops": {}}
        for name in names:
            if needs_tls and name in NO_TLS and "missing" not in info["loops"][name]:
                row["loops"][name] = {"status": "no TLS"}
                continue
            row["loops"][name] = loop_entry(
                name, info, samples.get((label, name)), errors.get((label, name)), figures)
        rows.append(row)
    return rows, samples


def rss_kib(pid):
    """A process's resident memory now, in KiB (VmRSS)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS for pid %d" % pid)


def summarize(samples, higher_is_better=True):
    """Median, best and spread of a list of numbers."""
    if not samples:
        return {}
    best = max(samples) if higher_is_better else min(samples)
    return {
        "median": statistics.median(samples),
        "best": best,
        "min": min(samples),
        "max": max(samples),
        "n": len(samples),
    }


def loop_entry(name, info, got, error, figures):
    """One loop's entry in a result row: MISSING, FAILED (with the error), or
    every sample with a summary per figure.

    figures: {entry key: (sample key, higher_is_better)}.  `info` is
    probe_loops()'s answer, or None for something that is not a loop (the
    echo suite's C floors).
    """
    if info is not None and "missing" in info["loops"][name]:
        return {"status": "MISSING"}
    if not got:
        return {"status": "FAILED", "error": error}
    entry = {"status": "ok"}
    for key, (field, higher) in figures.items():
        entry[key] = summarize([g[field] for g in got], higher_is_better=higher)
    entry["samples"] = got
    return entry


def machine_info(python_info):
    """What a reader needs to judge the figures: host, Python, load."""
    try:
        rev = subprocess.run(
            ["git", "-C", REPO_DIR, "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=10,
        ).stdout.strip()
    except OSError:
        rev = ""
    # Where git cannot answer (a chroot without git, or a worktree whose git
    # directory lies outside what the chroot sees), the caller may say.
    rev = rev or os.environ.get("ZLOOP_BENCH_GIT", "") or "unknown"
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "git": rev,
        "host": platform.node(),
        "kernel": platform.release(),
        "cpu_model": model,
        "cpus": os.cpu_count(),
        "loadavg_start": os.getloadavg(),
        "python": python_info["python"],
        "python_executable": python_info["executable"],
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "pythonpath": os.environ.get("PYTHONPATH", ""),
    }


def write_results(suite, doc, markdown):
    """Write results/<suite>-<stamp>.json and .md; return the two paths."""
    os.makedirs(RESULTS_DIR, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = os.path.join(RESULTS_DIR, "%s-%s" % (suite, stamp))
    tmp = base + ".json.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, base + ".json")
    with open(base + ".md", "w") as f:
        f.write(markdown)
    return base + ".json", base + ".md"


def fmt(value, digits=3):
    """A number for a table: 3 significant digits, thousands as k / M."""
    if value is None:
        return "—"
    for div, suffix in ((1e6, " M"), (1e3, " k")):
        if abs(value) >= div:
            return "%.*g%s" % (digits, value / div, suffix)
    return "%.*g" % (digits, value)


def ratio_table(rows, names, key, baseline, value_title, higher_is_better=True,
                stat="median"):
    """A Markdown table: one row per benchmark, per loop `stat` and its ratio.

    rows: [{"bench": str, "loops": {name: {"status", key: summary}}}].  A loop
    that is missing or failed shows as such: it is never left out.
    """
    head = "| %s | %s |" % (value_title, " | ".join(names))
    lines = [head, "|" + "---|" * (len(names) + 1)]
    for row in rows:
        base = row["loops"].get(baseline, {})
        base_med = base.get(key, {}).get(stat) if base.get("status") == "ok" else None
        cells = []
        for name in names:
            entry = row["loops"].get(name, {"status": "not run"})
            if entry.get("status") != "ok":
                cells.append(entry.get("status", "?"))
                continue
            med = entry[key][stat]
            cell = fmt(med)
            if base_med:
                ratio = med / base_med if higher_is_better else base_med / med
                cell += " (%.2f×)" % ratio
            cells.append(cell)
        lines.append("| %s | %s |" % (row["bench"], " | ".join(cells)))
    return "\n".join(lines) + "\n"


def pct(fractions):
    """Median of busy fractions as a percentage string."""
    if not fractions:
        return "n/a"
    return "%.0f%%" % (100 * statistics.median(fractions))


def missing_section(python_info, names):
    """Markdown lines naming each requested loop that is not installed."""
    out = []
    for name in names:
        info = python_info["loops"].get(name, {})
        if "missing" in info:
            out.append("- **%s: MISSING** — %s\n" % (name, info["missing"]))
    return "".join(out)
