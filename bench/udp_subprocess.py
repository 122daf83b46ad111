"""UDP echo round trips/s and create_subprocess_exec('true') spawns/s.

Each loop runs in its own child process (this same script with --child),
rounds interleaved across loops; the best round per loop is reported with
its ratio to uvloop and to asyncio.

    .venv-bench/py3.12/bin/python bench/udp_subprocess.py [--loops asyncio,uvloop,zloop]
        [--rounds 3] [--udp-seconds 1.0] [--spawns 200]
"""

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import loops  # noqa: E402  (bench/loops.py: names -> factories)


class _Echo(asyncio.DatagramProtocol):
    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        self.transport.sendto(data, addr)


class _Client(asyncio.DatagramProtocol):
    """Sends the next datagram as soon as the previous one comes back."""

    def __init__(self, deadline, done):
        self.deadline = deadline
        self.done = done
        self.count = 0

    def connection_made(self, transport):
        self.transport = transport
        transport.sendto(b"x" * 64)

    def datagram_received(self, data, addr):
        self.count += 1
        if self.count & 255 == 0 and time.perf_counter() >= self.deadline:
            self.done.set_result(self.count)
            return
        self.transport.sendto(data)


async def udp_round_trips(seconds, clients=4):
    loop = asyncio.get_running_loop()
    server, _ = await loop.create_datagram_endpoint(_Echo, local_addr=("127.0.0.1", 0))
    addr = server.get_extra_info("sockname")
    t0 = time.perf_counter()
    deadline = t0 + seconds
    futs, transports = [], []
    for _ in range(clients):
        done = loop.create_future()
        t, _ = await loop.create_datagram_endpoint(
            lambda d=done: _Client(deadline, d), remote_addr=addr
        )
        futs.append(done)
        transports.append(t)
    total = sum(await asyncio.gather(*futs))
    elapsed = time.perf_counter() - t0
    for t in transports + [server]:
        t.close()
    return total / elapsed


async def spawns(n, concurrency=10):
    sem = asyncio.Semaphore(concurrency)

    async def one():
        async with sem:
            proc = await asyncio.create_subprocess_exec("true")
            await proc.wait()

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return n / (time.perf_counter() - t0)


def child(name, udp_seconds, n_spawns):
    try:
        factory = loops.factory(name)
    except loops.LoopMissing as exc:
        print(exc, file=sys.stderr)
        sys.exit(loops.EXIT_MISSING)
    loop = factory()
    try:
        loop.run_until_complete(udp_round_trips(0.2))  # warm-up
        udp = loop.run_until_complete(udp_round_trips(udp_seconds))
        loop.run_until_complete(spawns(20))  # warm-up
        spawn = loop.run_until_complete(spawns(n_spawns))
    finally:
        loop.close()
    print(json.dumps({"udp_rt_per_s": udp, "spawns_per_s": spawn}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loops", default="asyncio,uvloop,zloop")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--udp-seconds", type=float, default=1.0)
    ap.add_argument("--spawns", type=int, default=200)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.udp_seconds, args.spawns)
        return
    names = loops.parse_names(args.loops)
    best = {n: {} for n in names}
    missing = set()
    for _ in range(args.rounds):
        for name in names:
            if name in missing:
                continue
            cmd = [sys.executable, __file__, "--child", name,
                   "--udp-seconds", str(args.udp_seconds), "--spawns", str(args.spawns)]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            if r.returncode == loops.EXIT_MISSING:
                missing.add(name)
                print(f"{name}: missing ({r.stderr.strip()})")
                continue
            if r.returncode != 0:
                raise SystemExit(f"{name} failed:\n{r.stderr}")
            res = json.loads(r.stdout.strip().splitlines()[-1])
            for k, v in res.items():
                best[name][k] = max(best[name].get(k, 0.0), v)
    print(f"best of {args.rounds} rounds, Python {sys.version.split()[0]}")
    print(f"{'loop':8} {'UDP echo rt/s':>14} {'x uvloop':>9} {'x asyncio':>10} "
          f"{'spawns/s':>9} {'x uvloop':>9} {'x asyncio':>10}")
    for name in names:
        if name in missing:
            continue
        row = [f"{name:8}"]
        for key, width in (("udp_rt_per_s", 14), ("spawns_per_s", 9)):
            v = best[name][key]
            row.append(f"{v:{width}.0f}")
            for ref in ("uvloop", "asyncio"):
                rv = best.get(ref, {}).get(key)
                row.append(f"{v / rv:9.2f}" if rv else f"{'-':>9}")
        print(" ".join(row))


if __name__ == "__main__":
    main()
