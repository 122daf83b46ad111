"""Server CPU per 1 KiB protocol echo on zloop's io_uring with optional ring
features turned off (ZLOOP_URING_OFF), and on epoll; configurations
interleaved, medians over rounds.

    python3 bench/uring_features.py --python .venv-bench/py3.12/bin/python \\
        [--rounds 8] [--requests 20000] [--cpu 0]

Each round runs every configuration in a fresh server process: a zloop
protocol echo server, one client process making sequential round trips
(TCP_NODELAY, 1 KiB). The server's CPU time (user + system, from
time.process_time()) over the client's run, per request. --cpu pins the
server and its client to one CPU (less spread on a shared machine).
Instruction counts of the same cells come from `run.py icount`, which sees
user space only; this sees the kernel's part too.
"""

import argparse
import os
import statistics
import subprocess
import sys

CONFIGS = [
    ("io_uring", ""),
    ("io_uring", "single_issuer"),
    ("io_uring", "coop_taskrun"),
    ("io_uring", "single_issuer,coop_taskrun"),
    ("epoll", ""),
]

SERVER = r'''
import asyncio, socket, sys, time
import zloop
N = int(sys.argv[1])
CLIENT = """
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
msg = b"x" * 1024
for _ in range(int(sys.argv[2])):
    s.sendall(msg)
    got = 0
    while got < 1024:
        got += len(s.recv(65536))
s.close()
"""

class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data):
        self.transport.write(data)

    def connection_lost(self, exc):
        done.set_result(None)

async def main():
    global done
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    server = await loop.create_server(Echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = await asyncio.create_subprocess_exec(sys.executable, "-c", CLIENT, str(port), str(N))
    start = time.process_time()
    await done
    cpu_s = time.process_time() - start
    await client.wait()
    server.close()
    return cpu_s / N * 1e6, loop.backend, loop._backend_features

loop = zloop.new_event_loop()
us, backend, features = loop.run_until_complete(main())
loop.close()
print("%.3f %s %s" % (us, backend, ",".join(features) or "-"))
'''


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=os.path.join(here, "..", ".venv-bench", "py3.12", "bin", "python"))
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--cpu", type=int, default=None)
    args = parser.parse_args()
    samples = {cfg: [] for cfg in CONFIGS}
    used = {}
    for rnd in range(args.rounds):
        for backend, off in CONFIGS:
            env = dict(os.environ, ZLOOP_BACKEND=backend, ZLOOP_URING_OFF=off)
            cmd = [args.python, "-c", SERVER, str(args.requests)]
            if args.cpu is not None:
                cmd = ["taskset", "-c", str(args.cpu)] + cmd
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout.split()
            samples[(backend, off)].append(float(out[0]))
            used[(backend, off)] = out[2]
        print("round %d/%d done" % (rnd + 1, args.rounds), file=sys.stderr)
    print("| backend | ZLOOP_URING_OFF | features in use | server CPU µs/request, median (range) |")
    print("|---|---|---|---|")
    for cfg in CONFIGS:
        s = samples[cfg]
        print("| %s | %s | %s | %.2f (%.2f-%.2f) |" % (
            cfg[0], cfg[1] or "-", used[cfg], statistics.median(s), min(s), max(s)))


if __name__ == "__main__":
    main()
