"""HTTP benchmark: uvicorn (httptools) serving http_app.py, loaded by wrk.

Each loop goes to uvicorn's --loop: the built-in "asyncio" and "uvloop", and
"module:attr" factories for the others ("rloop:new_event_loop",
"zloop:new_event_loop"); see loops.LOOPS.  uvicorn runs pinned to one CPU and
wrk (the Debian package) to the other, for a fixed duration after a warm-up,
the loops interleaved round by round.  Besides requests/s the server's CPU
time per request is read from /proc around the timed run, as in echo.py.
"""

import contextlib
import os
import re
import shutil
import ssl
import subprocess
import sys
import time
import urllib.request

import common
import loops

CONNECTIONS = 64
DURATION_S = 8
QUICK_DURATION_S = 3
WARMUP_S = 2


def check(args):
    """Fail early, saying how to fix it, if the HTTP run cannot work."""
    if shutil.which("wrk") is None:
        raise common.PreconditionError(
            "wrk not found: apt-get update && apt-get install -y wrk")
    if len(common.cpus()) < 2:
        raise common.PreconditionError("http needs 2 CPUs to pin server and wrk apart")
    proc = subprocess.run(
        [args.python, "-c", "import uvicorn, httptools; print(uvicorn.__version__)"],
        capture_output=True, text=True, cwd=common.CHILD_CWD,
    )
    if proc.returncode != 0:
        raise common.PreconditionError(
            "%s cannot import uvicorn and httptools: %s\n"
            "install the pinned set: python bench/run.py setup"
            % (args.python, proc.stderr.strip().splitlines()[-1:]))
    args.uvicorn_version = proc.stdout.strip()


def url(port, tls, path="/"):
    """The server's URL: https when it serves TLS."""
    return "%s://127.0.0.1:%d%s" % ("https" if tls else "http", port, path)


def wrk(args, port, duration_s, extra=(), tls=None):
    """Run wrk on the client CPU; return (requests/s, requests, errors, p50 ms, p99 ms).
    `extra`: more wrk arguments (a header, say); `tls`: the server's (cert, key)."""
    cmd = ["wrk", "-t1", "-c%d" % CONNECTIONS, "-d%ds" % duration_s, "--latency",
           *extra, url(port, tls)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=duration_s + 30,
                          preexec_fn=common.pin(args.client_cpu))
    out = proc.stdout
    rps = re.search(r"Requests/sec:\s+([0-9.]+)", out)
    total = re.search(r"(\d+) requests in", out)
    if proc.returncode != 0 or not rps or not total:
        raise RuntimeError("wrk failed (%d): %s" % (proc.returncode, (proc.stderr + out)[-500:]))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: (.*)", out)

    def pct(p):
        m = re.search(r"^\s+%s%%\s+([0-9.]+)(us|ms|s)" % p, out, re.M)
        if not m:
            return None
        return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]

    return {
        "rps": float(rps.group(1)),
        "requests": int(total.group(1)),
        "non_2xx": int(errors.group(1)) if errors else 0,
        "socket_errors": socket_errors.group(1) if socket_errors else "",
        "p50_ms": pct(50),
        "p99_ms": pct(99),
    }


def certificate():
    """(certfile, keyfile) of a self-signed certificate for 127.0.0.1, made
    once into the cache; None without openssl."""
    if shutil.which("openssl") is None:
        return None
    cert = os.path.join(common.CACHE_DIR, "bench-cert.pem")
    key = os.path.join(common.CACHE_DIR, "bench-key.pem")
    if not (os.path.exists(cert) and os.path.exists(key)):
        os.makedirs(common.CACHE_DIR, exist_ok=True)
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                        "-keyout", key, "-out", cert, "-days", "3650",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, capture_output=True)
    return cert, key


def uvicorn_cmd(args, name, port, tls=None):
    """(argv, environment) of uvicorn serving http_app on `name`'s loop at
    127.0.0.1:port, over TLS with tls=(certfile, keyfile)."""
    cmd = [args.python, "-m", "uvicorn", "http_app:app", "--app-dir", common.BENCH_DIR,
           "--host", "127.0.0.1", "--port", str(port), "--loop", loops.LOOPS[name][2],
           "--http", "httptools", "--lifespan", "off", "--no-access-log",
           "--log-level", "warning"]
    if tls:
        cmd += ["--ssl-certfile", tls[0], "--ssl-keyfile", tls[1]]
    return cmd, dict(os.environ, **loops.environment(name))


@contextlib.contextmanager
def server(args, name, tls=None):
    """Start uvicorn serving http_app on `name`'s loop, pinned to the server
    CPU, over TLS with tls=(certfile, keyfile); yield (process, port, loop
    class) once it answers and runs the loop (and backend) asked for; kill
    it on the way out."""
    port = common.free_port()
    cmd, env = uvicorn_cmd(args, name, port, tls)
    context = ssl.create_default_context(cafile=tls[0]) if tls else None
    log_path = os.path.join(common.CACHE_DIR, "http-server.log")
    os.makedirs(common.CACHE_DIR, exist_ok=True)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                cwd=common.CHILD_CWD, preexec_fn=common.pin(args.server_cpu),
                                env=env)
    try:
        common.wait_port(port, proc)
        with urllib.request.urlopen(url(port, tls, "/loop"), timeout=5, context=context) as resp:
            loop_class = resp.read().decode()
        want = loops.backend(name)
        if want is not None and not loop_class.endswith(" backend=" + want):
            raise RuntimeError("%s: asked for backend %s, the server runs %s"
                               % (name, want, loop_class))
        yield proc, port, loop_class
    finally:
        common.stop(proc)


def check_clean(res):
    """Raise if wrk saw anything but 2xx answers."""
    if res["non_2xx"] or res["socket_errors"]:
        raise RuntimeError("wrk saw errors: %s non-2xx, socket errors %s"
                           % (res["non_2xx"], res["socket_errors"]))


def measure(args, name, duration_s, tls=None):
    busy = common.settle(args.settle_s)
    with server(args, name, tls=tls) as (proc, port, loop_class):
        wrk(args, port, WARMUP_S, tls=tls)
        cpu0 = common.cpu_ns(proc.pid)
        res = wrk(args, port, duration_s, tls=tls)
        cpu1 = common.cpu_ns(proc.pid)
    check_clean(res)
    res["cpu_us_per_req"] = (cpu1 - cpu0) / 1e3 / res["requests"]
    res["loop_class"] = loop_class
    res["busy_before"] = busy
    return res


def run_suite(args, names, info):
    cpus = common.cpus()
    args.server_cpu, args.client_cpu = cpus[0], cpus[1]
    rounds = args.rounds or (1 if args.quick else 3)
    duration_s = QUICK_DURATION_S if args.quick else DURATION_S
    tls = None
    if args.tls:
        tls = certificate()
        if tls is None:
            raise common.PreconditionError("--tls needs the openssl command to make a certificate")
    present = [n for n in names if "missing" not in info["loops"][n]]
    samples, errors = {}, {}
    for rnd in range(rounds):
        for name in present:
            print("http round %d/%d: %s" % (rnd + 1, rounds, name), file=sys.stderr)
            try:
                samples.setdefault(name, []).append(measure(args, name, duration_s, tls))
            except Exception as exc:  # report, go on with the other loops
                errors[name] = str(exc)
                print("  FAILED: %s" % exc, file=sys.stderr)
            time.sleep(0.5)

    row = {"bench": "GET / (13 B)" + (" over TLS" if tls else ""), "loops": {}}
    for name in names:
        got = samples.get(name)
        if "missing" in info["loops"][name]:
            row["loops"][name] = {"status": "MISSING"}
        elif not got:
            row["loops"][name] = {"status": "FAILED", "error": errors.get(name)}
        else:
            row["loops"][name] = {
                "status": "ok",
                "rps": common.summarize([g["rps"] for g in got]),
                "cpu_us_per_req": common.summarize([g["cpu_us_per_req"] for g in got],
                                                   higher_is_better=False),
                "p99_ms": common.summarize([g["p99_ms"] for g in got if g["p99_ms"]],
                                           higher_is_better=False),
                "loop_class": got[0]["loop_class"],
                "samples": got,
            }
    rows = [row]
    busy = [g["busy_before"] for v in samples.values() for g in v]
    stat = args.stat or "median"
    md = "### http: requests/s, %s (ratio to %s)\n\n" % (stat, args.baseline)
    md += common.ratio_table(rows, names, "rps", args.baseline, "uvicorn + httptools",
                             stat=stat)
    md += ("\n### http: server CPU µs per request, %s (in brackets: %s's ÷ this one's, "
           ">1 is cheaper)\n\n" % (stat, args.baseline))
    md += common.ratio_table(rows, names, "cpu_us_per_req", args.baseline,
                             "uvicorn + httptools", higher_is_better=False, stat=stat)
    md += ("\nuvicorn %s --http httptools, wrk -t1 -c%d -d%ds after a %d s warm-up; "
           "server on CPU %d, wrk on CPU %d; %s of %d rounds; machine busy before each "
           "server start: median %s.\n"
           % (getattr(args, "uvicorn_version", "?"), CONNECTIONS, duration_s, WARMUP_S,
              args.server_cpu, args.client_cpu, stat, rounds, common.pct(busy)))
    params = {"rounds": rounds, "connections": CONNECTIONS, "duration_s": duration_s,
              "tls": bool(tls),
              "warmup_s": WARMUP_S, "server_cpu": args.server_cpu,
              "client_cpu": args.client_cpu}
    return {"rows": rows, "params": params}, md
