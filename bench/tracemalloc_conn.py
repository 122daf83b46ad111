"""What tracemalloc and the resident set say a connection costs a server.

    python bench/tracemalloc_conn.py asyncio|zloop copies|keeps [--trace]

A server serves 500 connections from a client in the same process (plain
non-blocking sockets: a few hundred bytes each, on both loops alike), each
making one 100 B round trip; its protocol drops what data_received() gets
(`copies`) or keeps the last chunk (`keeps`, as a parser holding a partial
message does). Printed per connection: the growth of the resident set
(VmRSS) and, with --trace, what tracemalloc counts (started before the
connections) and where its largest entry was allocated. ZLOOP_BACKEND picks
zloop's backend. docs/differences.md explains the figures. A figure of
memory, not time; allocator noise is a few hundred bytes a connection.
"""

import asyncio
import gc
import os
import socket
import sys
import tracemalloc

N = 500


class Copies(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)


class Keeps(Copies):
    def data_received(self, data):
        self.transport.write(data)
        self.kept = data


def _rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def main(protocol, trace):
    loop = asyncio.get_running_loop()
    server = await loop.create_server(protocol, "127.0.0.1", 0)
    address = server.sockets[0].getsockname()
    gc.collect()
    if trace:
        tracemalloc.start(10)
    before = tracemalloc.take_snapshot() if trace else None
    rss_before = _rss()
    clients = []
    for _ in range(N):
        client = socket.socket()
        client.setblocking(False)
        await loop.sock_connect(client, address)
        clients.append(client)
    for client in clients:
        await loop.sock_sendall(client, b"x" * 100)
    for client in clients:
        await loop.sock_recv(client, 200)
    gc.collect()
    line = f"resident {(_rss() - rss_before) / N / 1024:.1f} KiB a connection"
    if trace:
        stats = tracemalloc.take_snapshot().compare_to(before, "traceback")
        top = max(stats, key=lambda s: s.size_diff)
        where = " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno}" for f in top.traceback[:3])
        line += (f"; tracemalloc {sum(s.size_diff for s in stats) / N / 1024:.1f} KiB, the "
                 f"largest entry {top.size_diff / N / 1024:.1f} KiB at {where}")
    print(f"{sys.argv[1]} {os.environ.get('ZLOOP_BACKEND', '')} {sys.argv[2]}: {line}")
    for client in clients:
        client.close()
    server.close()
    await server.wait_closed()


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("asyncio", "zloop") or sys.argv[2] not in (
            "copies", "keeps"):
        sys.exit(__doc__)
    coro = main(Keeps if sys.argv[2] == "keeps" else Copies, "--trace" in sys.argv)
    if sys.argv[1] == "zloop":
        import zloop

        zloop.run(coro)
    else:
        asyncio.run(coro)
