"""Instruction counts per operation of the micro-benchmarks, under callgrind.

Wall-clock figures on a shared 2-core machine are noisy; instructions are
not.  micro.py --icount runs each benchmark for n and then 3n operations with
a marker call (os.getpgrp) around each run; callgrind --dump-before=getpgrp
writes one profile per stretch between markers, so

    instructions per op = (I(3n) - I(n)) / 2n

with start-up, warm-up, loop creation and the collector's pass cancelled out.
Lower is better; ratios are shown as baseline ÷ loop, so >1 is cheaper.
The threadsafe benchmark is left out: how often the loop wakes up depends on
thread timing, which valgrind's serialised threads distort.
"""

import glob
import os
import re
import shutil
import subprocess
import sys

import common

BENCHES = ["call_soon", "call_later", "sleep0", "gather"]
N_OPS = 3000  # multiple of gather's batch (1000); 3n = 9000


def check(args):
    if shutil.which("valgrind") is None:
        raise common.PreconditionError(
            "valgrind not found: apt-get update && apt-get install -y valgrind")


def count(args, name, n):
    """Run micro.py --icount for one loop; return {bench: instructions/op}."""
    out_dir = os.path.join(common.CACHE_DIR, "callgrind")
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, "%s.out" % name)
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


def run_suite(args, names, info):
    rounds = args.rounds or 1  # deterministic: one round is enough
    n = N_OPS // 3 if args.quick else N_OPS
    n = max(1000, n - n % 1000)
    present = [x for x in names if "missing" not in info["loops"][x]]
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
            got = samples.get((bench, name))
            if "missing" in info["loops"][name]:
                row["loops"][name] = {"status": "MISSING"}
            elif not got:
                row["loops"][name] = {"status": "FAILED", "error": errors.get(name)}
            else:
                row["loops"][name] = {
                    "status": "ok",
                    "instructions_per_op": common.summarize(
                        [g["per_op"] for g in got], higher_is_better=False),
                    "samples": got,
                }
        rows.append(row)
    md = ("### icount: instructions per operation under callgrind (in brackets: %s's ÷ this "
          "one's, >1 is cheaper)\n\n" % args.baseline)
    md += common.ratio_table(rows, names, "instructions_per_op", args.baseline, "benchmark",
                             higher_is_better=False, stat="median")
    md += ("\n(I(3n) − I(n)) / 2n with n = %d, PYTHONHASHSEED=0, %d round(s); same "
           "benchmarks as micro, threadsafe excluded.\n" % (n, rounds))
    return {"rows": rows, "params": {"n": n, "rounds": rounds}}, md
