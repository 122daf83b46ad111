"""Clients of the per-connection benchmarks: short connections, TLS
handshakes and idle connections (standard library only).

    python bench/conn_client.py PORT short N [--concurrency K] [--tls] [--size B]
    python bench/conn_client.py PORT idle

`short` makes N rounds of K connections (K = 1: one after another) to an
echo server (uvloop's echoserver.py --proto, or --proto --ssl with --tls)
and prints "N*K connections in S s". A connection is: a blocking connect
(and, with --tls, a handshake, no verification, as echoclient.py --ssl),
B bytes sent and read back, and a close (with --tls: close_notify sent and
the server's read first). The server sees the end of a connection while
the next one starts. A round of K > 1 connects all K first, then sends on
each, reads each and closes each: the server finds several connections
per wake-up, as under a storm of clients.

`idle` opens connections when told on stdin ("open K": K more, each
making one B-byte round trip, then idle; answered "open TOTAL") and holds
them until stdin ends: the server's memory per idle connection is read
between two such steps (bench/idle.py).

icount.py imports this module for the same clients under callgrind.
"""

import argparse
import socket
import ssl
import sys
import time

SIZE = 100


def tls_context():
    """A client context without verification, as echoclient.py --ssl."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def read_exact(sock, n):
    got = 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            raise RuntimeError("the server closed the connection early")
        got += len(chunk)


# Seconds a client waits on the server before giving up (under callgrind
# a server runs some 50 times slower than natively).
TIMEOUT_S = 120


class ShortConnections:
    """Rounds of `concurrency` short connections to 127.0.0.1:port (see the
    module's docstring): a context manager, as icount.count_server wants."""

    def __init__(self, port, concurrency=1, tls=False, size=SIZE):
        self.addr = ("127.0.0.1", port)
        self.concurrency = concurrency
        self.ctx = tls_context() if tls else None
        self.msg = b"x" * size

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def connect(self):
        sock = socket.create_connection(self.addr, timeout=TIMEOUT_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.ctx is not None:
            sock = self.ctx.wrap_socket(sock)
        return sock

    def close(self, sock):
        """Close; over TLS, close_notify both ways first (unwrap())."""
        if self.ctx is not None:
            sock = sock.unwrap()
        sock.close()

    def rounds(self, k):
        if self.concurrency == 1:
            for _ in range(k):
                sock = self.connect()
                sock.sendall(self.msg)
                read_exact(sock, len(self.msg))
                self.close(sock)
            return
        for _ in range(k):
            socks = [self.connect() for _ in range(self.concurrency)]
            try:
                for sock in socks:
                    sock.sendall(self.msg)
                for sock in socks:
                    read_exact(sock, len(self.msg))
                for sock in socks:
                    self.close(sock)
            finally:
                for sock in socks:
                    sock.close()


class IdleConnections:
    """Connections opened in steps and held: each makes one round trip,
    then stays open and quiet."""

    def __init__(self, port, size=SIZE):
        self.addr = ("127.0.0.1", port)
        self.msg = b"x" * size
        self.socks = []

    def open(self, k):
        for _ in range(k):
            sock = socket.create_connection(self.addr, timeout=TIMEOUT_S)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.socks.append(sock)
            sock.sendall(self.msg)
            read_exact(sock, len(self.msg))

    def close(self):
        for sock in self.socks:
            sock.close()
        self.socks = []


def raise_fd_limit():
    """As many fds as the hard limit allows (idle connections need one each)."""
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("port", type=int)
    parser.add_argument("mode", choices=["short", "idle"])
    parser.add_argument("n", type=int, nargs="?", default=1000, help="short: rounds")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--tls", action="store_true")
    parser.add_argument("--size", type=int, default=SIZE)
    args = parser.parse_args()
    if args.mode == "short":
        started = time.perf_counter()
        with ShortConnections(args.port, args.concurrency, args.tls, args.size) as client:
            client.rounds(args.n)
        elapsed = time.perf_counter() - started
        print("%d connections in %.6f s" % (args.n * args.concurrency, elapsed))
        return 0
    raise_fd_limit()
    idle = IdleConnections(args.port, args.size)
    for line in sys.stdin:
        word, _, count = line.partition(" ")
        if word != "open":
            break
        idle.open(int(count))
        print("open %d" % len(idle.socks), flush=True)
    idle.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
