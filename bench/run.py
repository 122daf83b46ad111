"""zloop benchmark suite: one entry point for every benchmark.

    python bench/run.py setup  [--python /root/.pyenv/versions/3.12.1/bin/python] [--with-zloop]
                               [--zloop-cpu x86_64_v3]
    python bench/run.py micro|echo|http|conn|tls|idle|icount|soak|all
                        [--loops asyncio,uvloop,rloop,zloop]
                        [--python PATH] [--rounds N] [--quick] [--baseline uvloop]

Each loop runs in a process of its own, the loops interleaved round by round
so that a slow spell of the machine hits all of them alike.  Results go to
bench/results/<suite>-<date>.json and .md (medians, bests, ratios).  A loop
that the Python under test cannot import is reported as MISSING in the table
and on stderr, and makes the exit status 3 unless --allow-missing is given.
See bench/README.md.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import loops  # noqa: E402

DEFAULT_VENV = os.path.join(common.REPO_DIR, ".venv-bench", "py3.12")
DEFAULT_BASE_PYTHON = "/root/.pyenv/versions/3.12.1/bin/python"


def default_python():
    """The private benchmark venv's Python if it exists, else this one."""
    candidate = os.path.join(DEFAULT_VENV, "bin", "python")
    return candidate if os.path.exists(candidate) else sys.executable


def resolve_python(python):
    """An absolute path: the children run in bench/, not in the caller's cwd."""
    path = python if os.sep in python else shutil.which(python)
    if not path or not os.path.exists(path):
        raise common.PreconditionError("no Python at %s" % python)
    return os.path.abspath(path)


# --- setup ----------------------------------------------------------------

def cmd_setup(args):
    """Create .venv-bench/pyX.Y from --python and install the pinned peers."""
    base = resolve_python(args.python or DEFAULT_BASE_PYTHON)
    ver = subprocess.run(
        [base, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    # A zloop built for another CPU gets a venv of its own, so that the native
    # build used for wall-clock runs stays in place (icount needs x86_64_v3:
    # valgrind cannot execute AVX-512).
    suffix = "-" + args.zloop_cpu if args.zloop_cpu else ""
    venv = os.path.join(common.REPO_DIR, ".venv-bench", "py" + ver + suffix)
    vpy = os.path.join(venv, "bin", "python")
    if not os.path.exists(vpy):
        subprocess.run([base, "-m", "venv", venv], check=True)
    req = os.path.join(common.BENCH_DIR, "requirements.txt")
    subprocess.run([vpy, "-m", "pip", "install", "-q", "-r", req], check=True)
    if args.with_zloop:
        env = dict(os.environ, ZLOOP_OPTIMIZE=os.environ.get("ZLOOP_OPTIMIZE", "ReleaseFast"))
        if args.zloop_cpu:
            env["ZLOOP_CPU"] = args.zloop_cpu
        subprocess.run(
            [vpy, "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps", common.REPO_DIR],
            check=True, env=env,
        )
    print("benchmark Python ready: %s" % vpy)
    return 0


# --- micro ----------------------------------------------------------------

def run_micro(args, names, info):
    """Run bench/micro.py once per loop per round; aggregate the ops/s."""
    import micro  # only for the benchmark names and units

    rounds = args.rounds or (1 if args.quick else 3)
    runs = 2 if args.quick else 5
    scale = 0.2 if args.quick else 1.0
    present = [n for n in names if "missing" not in info["loops"][n]]
    samples = {(b, n): [] for b in micro.BENCHES for n in present}
    cpu_samples = {(b, n): [] for b in micro.BENCHES for n in present}
    failures = {}
    busy_seen = []
    script = os.path.join(common.BENCH_DIR, "micro.py")
    for rnd in range(rounds):
        for name in present:
            cmd = [args.python, script, "--loop", name, "--runs", str(runs),
                   "--scale", str(scale)]
            busy = common.settle(args.settle_s)
            print("micro round %d/%d: %s (machine %.0f%% busy before)"
                  % (rnd + 1, rounds, name, 100 * busy), file=sys.stderr)
            busy_seen.append(busy)
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True,
                                      timeout=60 if args.quick else 180,
                                      cwd=common.CHILD_CWD, preexec_fn=common.pin(args.cpu))
            except subprocess.TimeoutExpired as exc:
                failures[name] = ["timed out after %.0f s" % exc.timeout]
                print("  FAILED: %s" % failures[name][0], file=sys.stderr)
                continue
            if proc.returncode != 0:
                last = proc.stderr.strip().splitlines()[-1:]
                failures[name] = last or ["exit %d" % proc.returncode]
                print("  FAILED: %s" % failures[name][0], file=sys.stderr)
                continue
            for bench, res in json.loads(proc.stdout)["results"].items():
                samples[(bench, name)].extend(res["ops_per_s"])
                cpu_samples[(bench, name)].extend(res["ops_per_cpu_s"])

    rows = []
    for bench, (_, n_ops, unit) in micro.BENCHES.items():
        row = {"bench": bench, "unit": unit, "loops": {}}
        for name in names:
            if "missing" in info["loops"][name]:
                row["loops"][name] = {"status": "MISSING"}
            elif not samples[(bench, name)]:
                row["loops"][name] = {"status": "FAILED", "error": failures.get(name)}
            else:
                row["loops"][name] = {
                    "status": "ok",
                    "ops_per_s": common.summarize(samples[(bench, name)]),
                    "ops_per_cpu_s": common.summarize(cpu_samples[(bench, name)]),
                    "samples": samples[(bench, name)],
                    "cpu_samples": cpu_samples[(bench, name)],
                }
        rows.append(row)
    params = {"rounds": rounds, "runs_per_process": runs, "scale": scale, "cpu": args.cpu,
              "busy_before": busy_seen}
    stat = args.stat or "best"
    md = ("### micro: %s ops per CPU-second of the loop's process (ratio to %s)\n\n"
          % (stat, args.baseline))
    md += common.ratio_table(rows, names, "ops_per_cpu_s", args.baseline, "benchmark",
                             stat=stat)
    md += "\n### micro: %s ops per wall-clock second (ratio to %s)\n\n" % (stat, args.baseline)
    md += common.ratio_table(rows, names, "ops_per_s", args.baseline, "benchmark", stat=stat)
    md += "\n" + "".join("- `%s`: one op = %s\n" % (r["bench"], r["unit"]) for r in rows)
    md += ("\nOn an idle machine the two tables agree (but for threadsafe, whose CPU time "
           "includes the producer thread); on a busy one the CPU figures are the steadier.\n")
    md += ("\n%s of %d rounds × %d runs, one process per loop per round, each warmed up; "
           "machine busy before each process: median %s.\n"
           % (stat, rounds, runs, common.pct(busy_seen)))
    return {"rows": rows, "params": params}, md


def describe(name, loop_info):
    """'name version', plus where it came from when not an installed package."""
    text = "%s %s" % (name, loop_info.get("version", "MISSING"))
    path = loop_info.get("file", "")
    if path and "site-packages" not in path and name != "asyncio":
        text += " (from %s)" % os.path.dirname(path)
    return text


# --- driver ---------------------------------------------------------------

def suite_runner(suite):
    if suite == "micro":
        return run_micro
    if suite == "echo":
        import echo
        return echo.run_suite
    if suite == "http":
        import httpbench
        return httpbench.run_suite
    if suite in ("conn", "tls"):
        import conn
        return conn.run_conn if suite == "conn" else conn.run_tls
    if suite == "idle":
        import idle
        return idle.run_suite
    if suite == "icount":
        import icount
        return icount.run_suite
    if suite == "soak":
        import soak
        return soak.run_suite
    if suite == "threads":
        import threads
        return threads.run_suite
    if suite == "stall":
        import stall
        return stall.run_suite
    raise ValueError(suite)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="See bench/README.md for what each suite measures.")
    parser.add_argument("suite", choices=["setup", "micro", "echo", "http", "conn", "tls", "idle",
                                          "icount", "soak", "threads", "stall", "all"],
                        help="all = micro, echo, http, conn, tls, idle; icount runs micro, echo, "
                             "http, conn and tls under callgrind; soak watches a server's memory "
                             "under minutes of load; threads: producer threads posting "
                             "to a loop (stalled, janus-style bridge, flood); stall: an "
                             "echo's round trips while the loop frees bursts of write buffers")
    parser.add_argument("--loops", default=",".join(loops.LOOPS),
                        help="comma-separated, from %s" % ", ".join(loops.LOOPS))
    parser.add_argument("--python", help="the Python under test (default: .venv-bench/py3.12)")
    parser.add_argument("--rounds", type=int, help="rounds of all loops (default 3, quick 1)")
    parser.add_argument("--quick", action="store_true", help="smoke run, under 2 minutes")
    parser.add_argument("--baseline", default="uvloop", help="loop the ratios divide by")
    parser.add_argument("--cpu", type=int, default=None,
                        help="micro: pin each loop's process to this CPU")
    parser.add_argument("--settle-s", type=float, default=0.5,
                        help="wait up to this long for an idle machine before each process")
    parser.add_argument("--stat", choices=["best", "median"],
                        help="figure in the tables (default: best for micro, "
                             "median for echo and http)")
    parser.add_argument("--modes",
                        help="echo: comma-separated subset of proto,buffered,streams,sock, "
                             "or tls (protocol echo over TLS, only when named); icount: echo modes "
                             "and/or micro, http, conn, tls")
    parser.add_argument("--sizes", help="echo: comma-separated subset of message sizes in KiB (1,10,100)")
    parser.add_argument("--timed-s", type=float,
                        help="echo: seconds each timed client run lasts (default 1.2, quick 0.6)")
    parser.add_argument("--tls", action="store_true",
                        help="http: serve over TLS (self-signed, made with openssl), wrk over https")
    parser.add_argument("--soak-s", type=float,
                        help="soak: seconds of load per loop and workload (default 60, quick 15)")
    parser.add_argument("--allow-missing", action="store_true",
                        help="exit 0 even when a requested loop is not installed")
    parser.add_argument("--with-zloop", action="store_true",
                        help="setup: also pip install this checkout (ReleaseFast)")
    parser.add_argument("--zloop-cpu",
                        help="setup: build zloop for this CPU (e.g. x86_64_v3, for icount) "
                             "into .venv-bench/pyX.Y-CPU")
    args = parser.parse_args()

    try:
        if args.suite == "setup":
            return cmd_setup(args)
        names = loops.parse_names(args.loops)
        args.python = resolve_python(args.python or default_python())
        info = common.probe_loops(args.python, names)
        if args.baseline not in names or "missing" in info["loops"].get(args.baseline, {}):
            args.baseline = "asyncio"
        missing = [n for n in names if "missing" in info["loops"][n]]
        for name in missing:
            print("MISSING: %s" % info["loops"][name]["missing"], file=sys.stderr)
        suites = (["micro", "echo", "http", "conn", "tls", "idle"] if args.suite == "all"
                  else [args.suite])
        # Check every suite's preconditions before spending minutes on the first.
        for suite in suites:
            if suite in ("conn", "tls"):
                import conn
                (conn.check_conn if suite == "conn" else conn.check_tls)(args)
            elif suite != "micro":
                __import__({"echo": "echo", "http": "httpbench", "icount": "icount",
                            "soak": "soak", "idle": "idle", "threads": "threads",
                            "stall": "stall"}[suite]
                           ).check(args)
        suite_failed = []
        for suite in suites:
            started = time.monotonic()
            doc = {"suite": suite, "machine": common.machine_info(info),
                   "loops": info["loops"], "baseline": args.baseline}
            try:
                result, md = suite_runner(suite)(args, names, info)
            except (OSError, RuntimeError, ValueError, KeyError) as exc:
                # A broken suite must not cost the suites after it.
                print("error: suite %s failed: %s: %s" % (suite, type(exc).__name__, exc),
                      file=sys.stderr)
                suite_failed.append(suite)
                continue
            doc.update(result)
            doc["machine"]["loadavg_end"] = os.getloadavg()
            doc["elapsed_s"] = time.monotonic() - started
            header = "## %s — %s, Python %s, git %s\n\n" % (
                suite, doc["machine"]["date"], info["python"], doc["machine"]["git"])
            header += common.missing_section(info, names)
            header += "loops: %s\n\n" % ", ".join(describe(n, info["loops"][n]) for n in names)
            footer = "\nload average %.2f at start, %.2f at end; %.0f s.\n" % (
                doc["machine"]["loadavg_start"][0], doc["machine"]["loadavg_end"][0],
                doc["elapsed_s"])
            paths = common.write_results(suite, doc, header + md + footer)
            print(header + md + footer)
            print("wrote %s and %s" % paths, file=sys.stderr)
    except common.PreconditionError as exc:
        print("error: %s" % exc, file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as exc:
        print("error: %s" % exc, file=sys.stderr)
        return 2
    if suite_failed:
        return 1
    if missing and not args.allow_missing:
        print("exit 3: requested loop(s) not installed: %s (--allow-missing to accept)"
              % ", ".join(missing), file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
