/* echo_floor_uring: the smallest io_uring echo server we can write, as a floor.
 *
 * The io_uring twin of echo_floor.c: same command line, same echo (accept,
 * set TCP_NODELAY, send back what arrives, keep what the kernel did not take
 * until the socket is writable), so a loop's distance above it is the loop's
 * own cost on the io_uring backend.  Where echo_floor.c makes one syscall per
 * step (epoll_wait, recv, send), this one makes a single io_uring_enter per
 * pass of its loop, which submits the sends queued in the ring and waits:
 *
 *   - one multishot accept and, per connection, one multishot receive that
 *     takes its buffers from a registered buffer ring (no recv syscalls);
 *   - a send per received buffer, straight from that buffer (no copy); the
 *     buffer goes back to the ring when its send completes;
 *   - sends carry MSG_DONTWAIT, so each completes inside the io_uring_enter
 *     that submits it (whole, short, or EAGAIN: the rest waits for POLLOUT,
 *     as echo_floor.c waits for EPOLLOUT).  Hence the enter waits for one
 *     completion more than the sends still to be reaped (for the first one
 *     when a send has more queued behind it, or its connection is closing):
 *     with a client making one request at a time it returns with the last
 *     send's completion and the next request together, one io_uring_enter
 *     per request (echo_floor.c: three syscalls).
 *
 * Raw syscalls and <linux/io_uring.h>, no liburing.  The ring asks for
 * SINGLE_ISSUER|DEFER_TASKRUN, falling back to COOP_TASKRUN|TASKRUN_FLAG,
 * then to no flags.  Reading goes on while a send waits: the 64 buffers of
 * the ring are the back-pressure (a connection that finds none stops and is
 * re-armed when one comes back).
 *
 *   gcc -O2 -o echo_floor_uring echo_floor_uring.c && ./echo_floor_uring 127.0.0.1 25000
 *
 * Compiled by bench/echo.py at run time into bench/.cache/.  One thread.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/io_uring.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { SQ_ENTRIES = 256, BUF_COUNT = 64, BUF_BYTES = 64 * 1024, BGID = 0 };
/* The low bits of a request's user_data say what it was; the rest is its conn. */
enum { OP_ACCEPT = 0, OP_RECV = 1, OP_SEND = 2, OP_POLL = 3, OP_MASK = 3 };

/* One connection: buffer ids received but not yet sent back wait in a queue,
 * oldest first, linked through bufq[id].next. */
struct conn {
    int fd;
    int head, tail;         /* the queue; -1 when empty */
    int ops;                /* requests in the ring for this connection */
    char recv_armed, busy;  /* busy: a send or a POLLOUT wait for the head */
    char polling;           /* that POLLOUT wait */
    char closing, starved;  /* starved: its receive ended for want of buffers */
    struct conn *next_starved;
};

static struct {
    int fd;
    unsigned *sq_head, *sq_tail, sq_local;
    unsigned *cq_head, *cq_tail, cq_mask;
    struct io_uring_sqe *sqes;
    struct io_uring_cqe *cqes;
    struct io_uring_buf_ring *br;
    unsigned short br_tail;
} ring;

static char bufs[BUF_COUNT][BUF_BYTES] __attribute__((aligned(4096)));
static struct { unsigned len, off; int next; } bufq[BUF_COUNT];
static int bufs_out;            /* buffers taken from the ring, not yet given back */
static unsigned sends_pending;  /* sends whose completion is not yet reaped */
static struct conn *starved;    /* connections waiting for a buffer */
/* A completion due in the next enter needs handling before the clients act
 * again (a send with more queued behind it, or of a connection to close):
 * the enter waits for the first completion only. */
static int prompt;

static void die(const char *what) {
    perror(what);
    exit(1);
}

static int enter(unsigned submit, unsigned wait_nr, unsigned flags) {
    return (int)syscall(__NR_io_uring_enter, ring.fd, submit, wait_nr, flags, NULL, 0);
}

static struct io_uring_sqe *get_sqe(unsigned op, int fd) {
    if (ring.sq_local - __atomic_load_n(ring.sq_head, __ATOMIC_ACQUIRE) == SQ_ENTRIES)
        if (enter(SQ_ENTRIES, 0, 0) < 0 && errno != EINTR && errno != EBUSY) die("enter");
    struct io_uring_sqe *sqe = &ring.sqes[ring.sq_local & (SQ_ENTRIES - 1)];
    memset(sqe, 0, sizeof *sqe);
    sqe->opcode = op;
    sqe->fd = fd;
    ring.sq_local++;
    __atomic_store_n(ring.sq_tail, ring.sq_local, __ATOMIC_RELEASE);
    return sqe;
}

static void buf_give(int bid) {
    struct io_uring_buf *b = &ring.br->bufs[ring.br_tail & (BUF_COUNT - 1)];
    b->addr = (uintptr_t)bufs[bid];
    b->len = BUF_BYTES;
    b->bid = bid;
    __atomic_store_n(&ring.br->tail, ++ring.br_tail, __ATOMIC_RELEASE);
    bufs_out--;
}

static void arm_accept(int lfd) {
    struct io_uring_sqe *sqe = get_sqe(IORING_OP_ACCEPT, lfd);
    sqe->ioprio = IORING_ACCEPT_MULTISHOT;
    sqe->accept_flags = SOCK_CLOEXEC;
    sqe->user_data = OP_ACCEPT;
}

static void arm_recv(struct conn *c) {
    struct io_uring_sqe *sqe = get_sqe(IORING_OP_RECV, c->fd);
    sqe->ioprio = IORING_RECV_MULTISHOT;
    sqe->flags = IOSQE_BUFFER_SELECT;
    sqe->buf_group = BGID;
    sqe->user_data = (uintptr_t)c | OP_RECV;
    c->recv_armed = 1;
    c->ops++;
}

/* Send what is left of the head buffer; it completes within the next enter. */
static void send_head(struct conn *c) {
    int bid = c->head;
    struct io_uring_sqe *sqe = get_sqe(IORING_OP_SEND, c->fd);
    sqe->addr = (uintptr_t)(bufs[bid] + bufq[bid].off);
    sqe->len = bufq[bid].len - bufq[bid].off;
    sqe->msg_flags = MSG_NOSIGNAL | MSG_DONTWAIT;
    sqe->user_data = (uintptr_t)c | OP_SEND;
    c->busy = 1;
    c->ops++;
    sends_pending++;
    if (bufq[bid].next >= 0) prompt = 1;
}

/* The kernel is full: wait until the socket is writable (echo_floor.c's EPOLLOUT). */
static void wait_writable(struct conn *c) {
    struct io_uring_sqe *sqe = get_sqe(IORING_OP_POLL_ADD, c->fd);
    sqe->poll32_events = POLLOUT;
    sqe->user_data = (uintptr_t)c | OP_POLL;
    c->polling = 1;
    c->ops++;
}

/* Free a closing connection once the ring holds nothing of it. */
static void conn_reap(struct conn *c) {
    if (!c->closing || c->ops > 0 || c->starved) return;
    for (int bid = c->head; bid >= 0; bid = bufq[bid].next) buf_give(bid);
    close(c->fd);
    free(c);
}

/* EOF or error: drop what was not sent, as echo_floor.c does.  shutdown()
 * ends a receive or POLLOUT wait still armed (a closed fd would not: they
 * hold it); a send ends by itself, and the close waits for its completion. */
static void conn_close(struct conn *c) {
    if (!c->closing) {
        c->closing = 1;
        if (c->recv_armed || c->polling) shutdown(c->fd, SHUT_RDWR);
        if (c->ops > 0) prompt = 1;
    }
    conn_reap(c);
}

static void on_accept(int lfd, struct io_uring_cqe *cqe) {
    if (!(cqe->flags & IORING_CQE_F_MORE)) arm_accept(lfd);
    if (cqe->res < 0) return; /* try with the next connection */
    int one = 1;
    setsockopt(cqe->res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct conn *c = calloc(1, sizeof *c);
    if (!c) die("calloc");
    c->fd = cqe->res;
    c->head = c->tail = -1;
    arm_recv(c);
}

static void on_recv(struct conn *c, struct io_uring_cqe *cqe) {
    if (!(cqe->flags & IORING_CQE_F_MORE)) {
        c->recv_armed = 0;
        c->ops--;
    }
    int bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
    if (cqe->flags & IORING_CQE_F_BUFFER) bufs_out++;
    if (cqe->res > 0 && !c->closing) {
        bufq[bid].len = (unsigned)cqe->res;
        bufq[bid].off = 0;
        bufq[bid].next = -1;
        if (c->tail >= 0) {
            bufq[c->tail].next = bid;
            prompt = 1; /* behind a send: send it once that one completes */
        } else {
            c->head = bid;
        }
        c->tail = bid;
        if (!c->busy) send_head(c);
        if (!c->recv_armed) arm_recv(c); /* the multishot receive stopped: again */
        return;
    }
    if (cqe->flags & IORING_CQE_F_BUFFER) buf_give(bid);
    if (cqe->res == -ENOBUFS && !c->closing) {
        c->starved = 1;
        c->next_starved = starved;
        starved = c;
        return;
    }
    if (!c->recv_armed) conn_close(c); /* EOF or error; else closing already */
}

static void on_send(struct conn *c, struct io_uring_cqe *cqe) {
    c->ops--;
    sends_pending--;
    if (c->closing) {
        c->busy = 0;
        conn_reap(c);
        return;
    }
    int bid = c->head;
    if (cqe->res == -EAGAIN) return wait_writable(c);
    if (cqe->res < 0) return conn_close(c);
    bufq[bid].off += (unsigned)cqe->res;
    if (bufq[bid].off < bufq[bid].len) return wait_writable(c); /* short: the rest later */
    c->head = bufq[bid].next;
    if (c->head < 0) c->tail = -1;
    buf_give(bid);
    if (c->head >= 0) send_head(c);
    else c->busy = 0;
}

static void on_poll(struct conn *c) {
    c->ops--;
    c->polling = 0;
    if (c->closing) {
        c->busy = 0;
        conn_reap(c);
        return;
    }
    send_head(c); /* writable, or an error the send will report */
}

/* Buffers came back: receive again on the connections that ran out. */
static void feed_starved(void) {
    while (starved && bufs_out < BUF_COUNT) {
        struct conn *c = starved;
        starved = c->next_starved;
        c->starved = 0;
        if (c->closing) conn_reap(c);
        else arm_recv(c);
    }
}

static void ring_init(void) {
    static const unsigned tries[] = {
        IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
        IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG, 0};
    struct io_uring_params p;
    for (unsigned i = 0; i < sizeof tries / sizeof tries[0]; i++) {
        memset(&p, 0, sizeof p);
        p.flags = tries[i];
        ring.fd = (int)syscall(__NR_io_uring_setup, SQ_ENTRIES, &p);
        if (ring.fd >= 0 || errno != EINVAL) break;
        fprintf(stderr, "echo_floor_uring: setup flags %#x refused\n", tries[i]);
    }
    if (ring.fd < 0) die("io_uring_setup");
    if (!(p.features & IORING_FEAT_SINGLE_MMAP)) {
        fprintf(stderr, "echo_floor_uring: kernel too old (no IORING_FEAT_SINGLE_MMAP)\n");
        exit(1);
    }
    size_t sq_bytes = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    size_t cq_bytes = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    char *rings = mmap(NULL, sq_bytes > cq_bytes ? sq_bytes : cq_bytes,
                       PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring.fd,
                       IORING_OFF_SQ_RING);
    ring.sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe),
                     PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring.fd, IORING_OFF_SQES);
    if (rings == MAP_FAILED || ring.sqes == MAP_FAILED) die("mmap ring");
    ring.sq_head = (unsigned *)(rings + p.sq_off.head);
    ring.sq_tail = (unsigned *)(rings + p.sq_off.tail);
    ring.sq_local = *ring.sq_tail;
    unsigned *array = (unsigned *)(rings + p.sq_off.array);
    for (unsigned i = 0; i < p.sq_entries; i++) array[i] = i; /* slot i is sqes[i], always */
    ring.cq_head = (unsigned *)(rings + p.cq_off.head);
    ring.cq_tail = (unsigned *)(rings + p.cq_off.tail);
    ring.cq_mask = *(unsigned *)(rings + p.cq_off.ring_mask);
    ring.cqes = (struct io_uring_cqe *)(rings + p.cq_off.cqes);

    ring.br = mmap(NULL, BUF_COUNT * sizeof(struct io_uring_buf), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ring.br == MAP_FAILED) die("mmap buffer ring");
    struct io_uring_buf_reg reg = {
        .ring_addr = (uintptr_t)ring.br, .ring_entries = BUF_COUNT, .bgid = BGID};
    if (syscall(__NR_io_uring_register, ring.fd, IORING_REGISTER_PBUF_RING, &reg, 1) < 0)
        die("IORING_REGISTER_PBUF_RING");
    bufs_out = BUF_COUNT;
    for (int bid = 0; bid < BUF_COUNT; bid++) buf_give(bid);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s HOST PORT\n", argv[0]);
        return 2;
    }
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0) die("socket");
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
    if (inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1) die("inet_pton");
    if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) < 0) die("bind");
    if (listen(lfd, 128) < 0) die("listen");

    ring_init();
    arm_accept(lfd);
    for (;;) {
        /* Submit, and wait for one completion beyond the sends' own (see the top),
         * or for the first one when it cannot wait for the clients. */
        unsigned submit = ring.sq_local - __atomic_load_n(ring.sq_head, __ATOMIC_ACQUIRE);
        unsigned wait_nr = prompt || starved ? 1 : 1 + sends_pending;
        int done = enter(submit, wait_nr, IORING_ENTER_GETEVENTS);
        if (done < 0 && errno != EINTR && errno != EBUSY && errno != EAGAIN)
            die("io_uring_enter");
        if (done == (int)submit) prompt = 0; /* all submitted: the due ones are in */
        unsigned head = *ring.cq_head;
        unsigned tail = __atomic_load_n(ring.cq_tail, __ATOMIC_ACQUIRE);
        for (; head != tail; head++) {
            struct io_uring_cqe *cqe = &ring.cqes[head & ring.cq_mask];
            struct conn *c = (struct conn *)(uintptr_t)(cqe->user_data & ~(uint64_t)OP_MASK);
            switch (cqe->user_data & OP_MASK) {
            case OP_ACCEPT: on_accept(lfd, cqe); break;
            case OP_RECV: on_recv(c, cqe); break;
            case OP_SEND: on_send(c, cqe); break;
            case OP_POLL: on_poll(c); break;
            }
        }
        __atomic_store_n(ring.cq_head, head, __ATOMIC_RELEASE);
        if (starved) feed_starved();
    }
}
