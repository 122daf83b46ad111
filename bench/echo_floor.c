/* echo_floor: the smallest epoll echo server we can write, as a floor.
 *
 * It does what every echo server in bench/echo.py must do, nothing else: accept,
 * set TCP_NODELAY, read what arrives, write it back, and keep what the kernel
 * did not take until the socket is writable again.  Its CPU time per request
 * is the kernel's share (syscalls, loopback TCP), so a loop's distance above
 * it is the loop's own cost.
 *
 *   gcc -O2 -o echo_floor echo_floor.c && ./echo_floor 127.0.0.1 25000
 *
 * Compiled by bench/echo.py at run time into bench/.cache/.  Level-triggered
 * epoll, one thread, like the Python loops it is compared with.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

enum { BUF_BYTES = 256 * 1024, MAX_EVENTS = 64 };

/* One connection: bytes read but not yet written back wait in pending. */
struct conn {
    int fd;
    size_t pending_len;
    size_t pending_off;
    char *pending;
};

static char buf[BUF_BYTES];

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void conn_close(int ep, struct conn *c) {
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->pending);
    free(c);
}

/* Write data (or queue it); returns -1 when the peer is gone. */
static int conn_send(int ep, struct conn *c, const char *data, size_t len) {
    size_t off = 0;
    while (off < len) {
        ssize_t n = send(c->fd, data + off, len - off, MSG_NOSIGNAL);
        if (n >= 0) {
            off += (size_t)n;
            continue;
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN) return -1;
        /* The kernel is full: keep the rest, read nothing more until it drains
         * (back-pressure, as asyncio's transports pause reading). */
        size_t rest = len - off;
        char *copy = malloc(rest);
        if (!copy) die("malloc");
        memcpy(copy, data + off, rest);
        c->pending = copy;
        c->pending_len = rest;
        c->pending_off = 0;
        struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
        if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) < 0) die("epoll_ctl mod");
        return 0;
    }
    return 0;
}

static int conn_flush(int ep, struct conn *c) {
    char *data = c->pending;
    size_t off = c->pending_off, len = c->pending_len;
    c->pending = NULL;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) < 0) die("epoll_ctl mod");
    int rc = conn_send(ep, c, data + off, len - off);
    free(data);
    return rc;
}

static void on_readable(int ep, struct conn *c) {
    ssize_t n = recv(c->fd, buf, sizeof buf, 0);
    if (n > 0) {
        if (conn_send(ep, c, buf, (size_t)n) < 0) conn_close(ep, c);
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    conn_close(ep, c); /* EOF or error */
}

static void on_accept(int ep, int lfd) {
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return; /* EAGAIN: drained; other errors: try next time */
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct conn *c = calloc(1, sizeof *c);
        if (!c) die("calloc");
        c->fd = fd;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) die("epoll_ctl add");
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s HOST PORT\n", argv[0]);
        return 2;
    }
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lfd < 0) die("socket");
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
    if (inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1) die("inet_pton");
    if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) < 0) die("bind");
    if (listen(lfd, 128) < 0) die("listen");

    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) die("epoll_create1");
    /* data.ptr == NULL marks the listening socket. */
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev) < 0) die("epoll_ctl listen");

    struct epoll_event events[MAX_EVENTS];
    for (;;) {
        int n = epoll_wait(ep, events, MAX_EVENTS, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait");
        }
        for (int i = 0; i < n; i++) {
            struct conn *c = events[i].data.ptr;
            if (c == NULL) {
                on_accept(ep, lfd);
            } else if (c->pending) {
                if (conn_flush(ep, c) < 0) conn_close(ep, c);
            } else {
                on_readable(ep, c);
            }
        }
    }
}
