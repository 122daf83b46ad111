"""Soak: does a server's memory stay flat under minutes of load?

uvicorn serving http_app.py (the HTTP benchmark's server, pinned to one CPU)
is loaded by wrk (on the other CPU) for a fixed time, in slices.  After each
slice the driver reads the server's resident memory (VmRSS), its open file
descriptors and the requests answered so far.  Three workloads, each on a
fresh server:

  keepalive  64 persistent connections: the data path (reads, writes, the
             per-request task and timers)
  close      "Connection: close" on every request: each request is a
             connection accepted, served and closed (accept, transport
             set-up and teardown, the server's bookkeeping)
  tls-close  the same over TLS: a handshake, asyncio's sslproto through the
             loop's TLS layer and a shutdown per request (skipped, and said
             so, without the openssl command to make a certificate)

A leak shows as memory that keeps growing once the server is warm.  The
first slice is the warm-up; the figure reported is the growth from the
middle sample to the last, in KiB and per million requests, so that what
allocators keep after their first minutes of growth (arenas, free lists,
caches filling) does not count as a leak.  A run is called flat when that
growth is under FLAT_KIB; the fd count must come back to where it started.
"""

import os
import sys
import time

import common
import httpbench

SLICE_S = 5
SOAK_S = 60
QUICK_SOAK_S = 15
FLAT_KIB = 1024
WORKLOADS = ("keepalive", "close", "tls-close")


def check(args):
    httpbench.check(args)


def open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def soak(args, name, workload, soak_s, tls):
    """One server, one workload: the samples after each slice."""
    wrk_extra = () if workload == "keepalive" else ("-H", "Connection: close")
    with httpbench.server(args, name, tls=tls) as (proc, port, loop_class):
        samples = []
        requests = 0
        started = time.monotonic()
        for i in range(1 + max(2, round(soak_s / SLICE_S))):  # slice 0: warm-up
            res = httpbench.wrk(args, port, SLICE_S, extra=wrk_extra, tls=tls)
            httpbench.check_clean(res)
            requests += res["requests"]
            time.sleep(0.2)  # let closes and the server's timers settle
            samples.append({"t_s": round(time.monotonic() - started, 1),
                            "requests": requests, "rss_kib": common.rss_kib(proc.pid),
                            "fds": open_fds(proc.pid)})
    measured = samples[1:]
    first, mid, last = measured[0], measured[len(measured) // 2], measured[-1]
    late_requests = last["requests"] - mid["requests"]
    growth = last["rss_kib"] - mid["rss_kib"]
    return {
        "loop_class": loop_class,
        "samples": samples,
        "requests": last["requests"] - samples[0]["requests"],
        "rss_start_kib": first["rss_kib"],
        "rss_mid_kib": mid["rss_kib"],
        "rss_end_kib": last["rss_kib"],
        "rss_max_kib": max(s["rss_kib"] for s in measured),
        "late_growth_kib": growth,
        "late_kib_per_mreq": growth * 1e6 / late_requests if late_requests else None,
        "fds_start": first["fds"],
        "fds_end": last["fds"],
        "flat": growth < FLAT_KIB and last["fds"] <= first["fds"],
    }


def run_suite(args, names, info):
    cpus = common.cpus()
    args.server_cpu, args.client_cpu = cpus[0], cpus[1]
    soak_s = args.soak_s or (QUICK_SOAK_S if args.quick else SOAK_S)
    tls = httpbench.certificate()
    present = [n for n in names if "missing" not in info["loops"][n]]
    rows, notes = [], []
    for workload in WORKLOADS:
        if workload.startswith("tls") and tls is None:
            notes.append("%s skipped: no openssl command to make a certificate." % workload)
            continue
        row = {"bench": workload, "loops": {}}
        for name in names:
            if name not in present:
                row["loops"][name] = {"status": "MISSING"}
                continue
            print("soak %s: %s, %d s" % (workload, name, soak_s), file=sys.stderr)
            common.settle(args.settle_s)
            try:
                got = soak(args, name, workload,
                           soak_s, tls if workload.startswith("tls") else None)
            except Exception as exc:  # report, go on with the other loops
                print("  FAILED: %s" % exc, file=sys.stderr)
                row["loops"][name] = {"status": "FAILED", "error": str(exc)}
                continue
            got["status"] = "ok"
            row["loops"][name] = got
        rows.append(row)

    md = ("### soak: server RSS under wrk, KiB (start → middle → end of the timed "
          "slices), growth over the second half, fds start → end\n\n")
    md += "| workload | loop | requests | RSS start | middle | end | late growth | per 1M req | fds | |\n"
    md += "|---|---|---|---|---|---|---|---|---|---|\n"
    for row in rows:
        for name in names:
            e = row["loops"][name]
            if e["status"] != "ok":
                md += "| %s | %s | %s | | | | | | | |\n" % (row["bench"], name, e["status"])
                continue
            per = e["late_kib_per_mreq"]
            md += "| %s | %s | %d | %d | %d | %d | %+d | %s | %d → %d | %s |\n" % (
                row["bench"], name, e["requests"], e["rss_start_kib"], e["rss_mid_kib"],
                e["rss_end_kib"], e["late_growth_kib"],
                "%+.0f" % per if per is not None else "-", e["fds_start"], e["fds_end"],
                "flat" if e["flat"] else "**GROWS**")
    md += ("\nuvicorn --http httptools serving bench/http_app.py, wrk -t1 -c%d in %d s "
           "slices for %d s after a %d s warm-up slice, server on CPU %d, wrk on CPU %d. "
           "Flat: under %d KiB of growth from the middle sample to the last, and no more "
           "fds at the end than at the start.\n"
           % (httpbench.CONNECTIONS, SLICE_S, soak_s, SLICE_S, args.server_cpu,
              args.client_cpu, FLAT_KIB))
    for note in notes:
        md += "\n%s\n" % note
    params = {"soak_s": soak_s, "slice_s": SLICE_S, "flat_kib": FLAT_KIB,
              "connections": httpbench.CONNECTIONS, "server_cpu": args.server_cpu,
              "client_cpu": args.client_cpu}
    return {"rows": rows, "params": params}, md
