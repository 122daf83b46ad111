/*
 * The socket answers of macOS and FreeBSD, on Linux: test infrastructure,
 * loaded with LD_PRELOAD into the test process (and the children it
 * starts), where it sits in front of glibc's socket calls. zloop's portable
 * build (ZLOOP_PORTABLE=1) makes every socket call through libc, and so does
 * CPython's socket module, so stock asyncio and zloop see the same answers,
 * as they would on a Mac. Built at test time by tests/_bsd_sockets.py; never
 * part of a wheel or an sdist.
 *
 * ZLOOP_KQUEUE_PERSONALITY names the kernel (the variable that picks the
 * emulated kqueue's rules, src/core/os/kqueue_emu.zig): "macos" or
 * "freebsd". Anything else, or unset, passes every call through.
 *
 * The rules, each with the source it follows (XNU: xnu-11417.101.15;
 * FreeBSD: sys/ of freebsd-src, functions named where lines move between
 * releases):
 *
 * 1. getsockopt(SOL_SOCKET, a boolean option) answers the option's bit in
 *    so_options, not 1: XNU bsd/kern/uipc_socket.c:5963-5976 (sogetopt:
 *    "optval = so->so_options & sopt->sopt_name"), the bits in
 *    bsd/sys/socket.h:124-140 (SO_REUSEADDR 0x4, SO_KEEPALIVE 0x8,
 *    SO_BROADCAST 0x20, SO_REUSEPORT 0x200, ...); FreeBSD
 *    sys/kern/uipc_socket.c sogetopt, the same line and bits. TCP_NODELAY
 *    answers TF_NODELAY (0x4): XNU bsd/netinet/tcp_usrreq.c:2828-2829
 *    ("optval = tp->t_flags & TF_NODELAY"), tcp_var.h:394; FreeBSD
 *    sys/netinet/tcp_usrreq.c tcp_default_ctloutput, the same.
 * 2. A send on a TCP socket whose peer reset it fails with EPIPE, and the
 *    reset (ECONNRESET) stays for the next receive or SO_ERROR: XNU
 *    bsd/kern/uipc_socket.c:2032-2051 (sosendcheck tests SS_CANTSENDMORE,
 *    EPIPE, before so_error), the RST having set both (tcp_drop:
 *    so_error, then soisdisconnected); FreeBSD sys/kern/uipc_socket.c
 *    sosend_generic_locked ("if (so->so_snd.sb_state & SBS_CANTSENDMORE)
 *    ... error = EPIPE" before "if (so->so_error)"). Linux hands the reset
 *    to the first send and then answers EPIPE: here the first send's
 *    ECONNRESET becomes EPIPE and is kept for the next receive.
 * 3. A UDP datagram longer than the send buffer (9216 bytes unless
 *    SO_SNDBUF changes it: net.inet.udp.maxdgram) fails with EMSGSIZE:
 *    XNU bsd/netinet/udp_usrreq.c:2243 (udp_sendspace = 9216, "really max
 *    datagram size"), :2308 (soreserve), bsd/kern/uipc_socket.c:2072-2075
 *    ("atomic && resid > so->so_snd.sb_hiwat" -> EMSGSIZE); FreeBSD
 *    sys/netinet/udp_usrreq.c (udp_sendspace = 9216, sysctl maxdgram),
 *    sys/kern/uipc_socket.c sosend_dgram ("if (resid > space) error =
 *    EMSGSIZE", space = sbspace(&so->so_snd)).
 * 4. A UDP socket's receive buffer (SO_RCVBUF) is FreeBSD's
 *    udp_recvspace, 40 * (1024 + sizeof(struct sockaddr_in6)) = 42080
 *    bytes (GENERIC has INET6; 41600 without), or macOS's 786896 (XNU
 *    bsd/netinet/udp_usrreq.c:253-256: the mbuf cluster pool of any Mac
 *    today is over 96 MiB; :2245 otherwise). Under FreeBSD's rules a new
 *    UDP socket's Linux buffer is set so that it holds about as much:
 *    Linux charges a datagram its buffer's true size, about twice the
 *    payload of one of 1 KiB or more (measured on loopback, in twice
 *    42080: 5 datagrams of 9216 bytes, 36 of 1 KiB, 9 of 4000), where
 *    FreeBSD's sbappendaddr charges the payload and the address (4, 40,
 *    10); small ones Linux holds fewer of (101 of 100 bytes, not 328).
 * 5. An AF_UNIX datagram is capped: macOS at the send buffer, 2048 bytes
 *    unless SO_SNDBUF raises it (XNU bsd/kern/uipc_usrreq.c:962,
 *    unpdg_sendspace, "really max datagram size", checked by sosendcheck
 *    as in 3); FreeBSD at net.local.dgram.maxdgram, 8 KiB whatever
 *    SO_SNDBUF says (sys/kern/uipc_usrreq.c, unpdg_maxdgram = 8*1024,
 *    uipc_sosend_dgram: "if (uio->uio_resid > unpdg_maxdgram) error =
 *    EMSGSIZE"; FreeBSD 13 and older had 2 KiB). EMSGSIZE beyond.
 * 6. An AF_UNIX datagram to a receiver whose buffer is full fails at once
 *    with ENOBUFS, whether the sender blocks or not, where Linux answers
 *    EAGAIN (or blocks): XNU bsd/kern/uipc_usrreq.c:573 (uipc_send:
 *    sbappendaddr fails) and bsd/kern/uipc_socket2.c:1434-1444
 *    (sbappendaddr: "*error_out = ENOBUFS"); FreeBSD sys/kern/uipc_usrreq.c
 *    uipc_sosend_dgram ("soroverflow_locked(so2); error = ENOBUFS"). How
 *    much the receiver holds stays Linux's (macOS's is 4096 bytes,
 *    FreeBSD's 16 KiB: unpdg_recvspace); SO_RCVBUF reports the BSD's.
 * 7. An AF_UNIX stream socket whose peer closed with data unread reads
 *    the end of the stream, not ECONNRESET: XNU bsd/kern/uipc_usrreq.c:
 *    1079-1080 (unp_detach: unp_disconnect, no so_error; unp_drop's
 *    ECONNRESET, :1115, goes to datagram sockets connected to it only);
 *    FreeBSD sys/kern/uipc_usrreq.c uipc_detach, the same. Its sends fail
 *    with EPIPE on all three.
 *
 * Not emulated (Linux's answers stay): how many bytes an AF_UNIX receiver
 * holds (6), TCP's buffer sizes, and sendfile(2), which every kernel here
 * takes on a connected stream socket of any family (XNU
 * bsd/kern/uipc_syscalls.c:3770-3777 checks SOCK_STREAM and
 * SS_ISCONNECTED only).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

enum personality { PASS, MACOS, FREEBSD };

static int personality_now(void)
{
    static int known = -1;
    if (known < 0) {
        const char *name = getenv("ZLOOP_KQUEUE_PERSONALITY");
        known = PASS;
        if (name != NULL && strcmp(name, "macos") == 0)
            known = MACOS;
        else if (name != NULL && strcmp(name, "freebsd") == 0)
            known = FREEBSD;
    }
    return known;
}

/* libc's own function behind ours (RTLD_NEXT), looked up on first use. */
#define REAL(name, ...)                                                    \
    static __typeof__(name) *real_##name;                                  \
    if (real_##name == NULL)                                               \
        real_##name = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

/* --------------------------------------------------- what a socket is */

static int real_sockopt(int fd, int level, int name, int *value)
{
    REAL(getsockopt);
    socklen_t len = sizeof(*value);
    return real_getsockopt(fd, level, name, value, &len);
}

/* Its family and type, or 0 when fd is not a socket (errno kept). */
static int kind_of(int fd, int *family, int *type)
{
    int saved = errno, ok;
    ok = real_sockopt(fd, SOL_SOCKET, SO_TYPE, type) == 0
        && real_sockopt(fd, SOL_SOCKET, SO_DOMAIN, family) == 0;
    errno = saved;
    return ok;
}

static int is_inet(int family)
{
    return family == AF_INET || family == AF_INET6;
}

/* ------------------------------------------- per-socket state (rare) */

/* A socket's BSD buffer sizes once SO_SNDBUF/SO_RCVBUF set them, and a
 * reset kept for its next receive (rule 2); told from a later file on the
 * same number by the file's identity. */
struct slot {
    dev_t dev;
    ino_t ino;
    int sndbuf, rcvbuf, pending;
};
#define SLOTS 65536
static struct slot slots[SLOTS];
static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;

static struct slot *slot_of(int fd, int create)
{
    struct stat st;
    int saved = errno;
    if (fd < 0 || fd >= SLOTS || fstat(fd, &st) != 0) {
        errno = saved;
        return NULL;
    }
    errno = saved;
    struct slot *s = &slots[fd];
    if (s->dev != st.st_dev || s->ino != st.st_ino) {
        if (!create)
            return NULL;
        memset(s, 0, sizeof(*s));
        s->dev = st.st_dev;
        s->ino = st.st_ino;
    }
    return s;
}

static int default_sndbuf(int family, int type)
{
    if (type != SOCK_DGRAM)
        return 0;
    if (is_inet(family))
        return 9216; /* rule 3 */
    if (family == AF_UNIX)
        return personality_now() == MACOS ? 2048 : 16384; /* rules 5, 6 */
    return 0;
}

static int default_rcvbuf(int family, int type)
{
    if (type != SOCK_DGRAM)
        return 0;
    if (is_inet(family))
        return personality_now() == MACOS ? 786896 : 42080; /* rule 4 */
    if (family == AF_UNIX)
        return personality_now() == MACOS ? 4096 : 16384; /* rule 6 */
    return 0;
}

/* The datagram cap (rules 3, 5), 0 for none. */
static int datagram_cap(int fd, int family, int type)
{
    if (type != SOCK_DGRAM || !(is_inet(family) || family == AF_UNIX))
        return 0;
    if (family == AF_UNIX && personality_now() == FREEBSD)
        return 8192;
    pthread_mutex_lock(&slots_lock);
    struct slot *s = slot_of(fd, 0);
    int cap = s != NULL && s->sndbuf ? s->sndbuf : default_sndbuf(family, type);
    pthread_mutex_unlock(&slots_lock);
    return cap;
}

static void keep_reset(int fd)
{
    pthread_mutex_lock(&slots_lock);
    struct slot *s = slot_of(fd, 1);
    if (s != NULL)
        s->pending = ECONNRESET;
    pthread_mutex_unlock(&slots_lock);
}

/* The reset kept for fd (rule 2), taken; 0 for none. The unlocked look
 * keeps the common case at one load. */
static int take_reset(int fd)
{
    if (fd < 0 || fd >= SLOTS || __atomic_load_n(&slots[fd].pending, __ATOMIC_RELAXED) == 0)
        return 0;
    pthread_mutex_lock(&slots_lock);
    struct slot *s = slot_of(fd, 0);
    int err = 0;
    if (s != NULL) {
        err = s->pending;
        s->pending = 0;
    }
    pthread_mutex_unlock(&slots_lock);
    return err;
}

/* ------------------------------------------------------------ sending */

/* Before a send of len bytes: -1 with errno set if a rule refuses it, else
 * 0, with *flags given MSG_DONTWAIT for an AF_UNIX datagram (rule 6). */
static int before_send(int fd, size_t len, int *flags, int *family, int *type)
{
    *family = *type = -1;
    if (personality_now() == PASS || !kind_of(fd, family, type))
        return 0;
    int cap = datagram_cap(fd, *family, *type);
    if (cap > 0 && len > (size_t)cap) {
        errno = EMSGSIZE;
        return -1;
    }
    if (*family == AF_UNIX && *type == SOCK_DGRAM)
        *flags |= MSG_DONTWAIT;
    return 0;
}

/* After a send that failed: the BSD's errno for Linux's (rules 2, 6). */
static ssize_t after_send_failed(int fd, int family, int type)
{
    if (personality_now() == PASS)
        return -1;
    if (family < 0 && (errno == ECONNRESET) && !kind_of(fd, &family, &type))
        return -1;
    if (errno == ECONNRESET && type == SOCK_STREAM) {
        if (is_inet(family))
            keep_reset(fd);
        errno = EPIPE;
    } else if (errno == EAGAIN && family == AF_UNIX && type == SOCK_DGRAM) {
        errno = ENOBUFS;
    }
    return -1;
}

static size_t iov_total(const struct iovec *iov, size_t n)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += iov[i].iov_len;
    return total;
}

ssize_t send(int fd, const void *buf, size_t len, int flags)
{
    REAL(send);
    int family, type;
    if (before_send(fd, len, &flags, &family, &type) < 0)
        return -1;
    ssize_t n = real_send(fd, buf, len, flags);
    return n < 0 ? after_send_failed(fd, family, type) : n;
}

ssize_t sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *to,
               socklen_t tolen)
{
    REAL(sendto);
    int family, type;
    if (before_send(fd, len, &flags, &family, &type) < 0)
        return -1;
    ssize_t n = real_sendto(fd, buf, len, flags, to, tolen);
    return n < 0 ? after_send_failed(fd, family, type) : n;
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
    REAL(sendmsg);
    int family, type;
    if (before_send(fd, iov_total(msg->msg_iov, msg->msg_iovlen), &flags, &family, &type) < 0)
        return -1;
    ssize_t n = real_sendmsg(fd, msg, flags);
    return n < 0 ? after_send_failed(fd, family, type) : n;
}

/* write(2) and writev(2) reach sockets too (asyncio's pipe transports on a
 * socketpair): only a failure is looked at, so other files pay nothing. */
ssize_t write(int fd, const void *buf, size_t len)
{
    REAL(write);
    ssize_t n = real_write(fd, buf, len);
    return n < 0 ? after_send_failed(fd, -1, -1) : n;
}

ssize_t writev(int fd, const struct iovec *iov, int n_iov)
{
    REAL(writev);
    ssize_t n = real_writev(fd, iov, n_iov);
    return n < 0 ? after_send_failed(fd, -1, -1) : n;
}

ssize_t sendfile(int out_fd, int in_fd, off_t *offset, size_t count)
{
    REAL(sendfile);
    ssize_t n = real_sendfile(out_fd, in_fd, offset, count);
    return n < 0 ? after_send_failed(out_fd, -1, -1) : n;
}

ssize_t sendfile64(int out_fd, int in_fd, off64_t *offset, size_t count)
{
    REAL(sendfile64);
    ssize_t n = real_sendfile64(out_fd, in_fd, offset, count);
    return n < 0 ? after_send_failed(out_fd, -1, -1) : n;
}

/* ---------------------------------------------------------- receiving */

/* After a receive that read nothing (n 0, or -1 with errno): the BSD's
 * answer (rules 2, 7). */
static ssize_t after_receive(int fd, ssize_t n)
{
    if (personality_now() == PASS || n > 0)
        return n;
    int saved = errno;
    int reset = take_reset(fd);
    if (reset != 0 && (n == 0 || saved == EAGAIN)) {
        errno = reset;
        return -1;
    }
    int family, type;
    if (n < 0 && saved == ECONNRESET && kind_of(fd, &family, &type) && family == AF_UNIX
        && type == SOCK_STREAM)
        return 0;
    errno = saved;
    return n;
}

ssize_t recv(int fd, void *buf, size_t len, int flags)
{
    REAL(recv);
    return after_receive(fd, real_recv(fd, buf, len, flags));
}

ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *from,
                 socklen_t *fromlen)
{
    REAL(recvfrom);
    return after_receive(fd, real_recvfrom(fd, buf, len, flags, from, fromlen));
}

ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
    REAL(recvmsg);
    return after_receive(fd, real_recvmsg(fd, msg, flags));
}

ssize_t read(int fd, void *buf, size_t len)
{
    REAL(read);
    ssize_t n = real_read(fd, buf, len);
    /* Only sockets with a kept reset, or a failed read, are looked at. */
    if (n == 0 || (n < 0 && (errno == ECONNRESET || errno == EAGAIN)))
        return after_receive(fd, n);
    return n;
}

ssize_t readv(int fd, const struct iovec *iov, int n_iov)
{
    REAL(readv);
    ssize_t n = real_readv(fd, iov, n_iov);
    if (n == 0 || (n < 0 && (errno == ECONNRESET || errno == EAGAIN)))
        return after_receive(fd, n);
    return n;
}

/* -------------------------------------------------------------- options */

/* Linux's SOL_SOCKET option -> the BSD's bit in so_options (rule 1). */
static int option_bit(int name)
{
    switch (name) {
    case SO_DEBUG: return 0x0001;
    case SO_REUSEADDR: return 0x0004;
    case SO_KEEPALIVE: return 0x0008;
    case SO_DONTROUTE: return 0x0010;
    case SO_BROADCAST: return 0x0020;
    case SO_OOBINLINE: return 0x0100;
    case SO_REUSEPORT: return 0x0200;
    case SO_TIMESTAMP: return 0x0400;
    default: return 0;
    }
}

int getsockopt(int fd, int level, int name, void *value, socklen_t *len)
{
    REAL(getsockopt);
    int rc = real_getsockopt(fd, level, name, value, len);
    if (rc != 0 || personality_now() == PASS || value == NULL || *len != sizeof(int))
        return rc;
    int *v = value;
    if (level == SOL_SOCKET && option_bit(name) != 0) {
        *v = *v ? option_bit(name) : 0;
    } else if (level == IPPROTO_TCP && name == TCP_NODELAY) {
        *v = *v ? 0x4 : 0;
    } else if (level == SOL_SOCKET && name == SO_ERROR && *v == 0) {
        *v = take_reset(fd);
    } else if (level == SOL_SOCKET && (name == SO_SNDBUF || name == SO_RCVBUF)) {
        int family, type;
        if (!kind_of(fd, &family, &type) || type != SOCK_DGRAM)
            return rc;
        pthread_mutex_lock(&slots_lock);
        struct slot *s = slot_of(fd, 0);
        int set = s == NULL ? 0 : name == SO_SNDBUF ? s->sndbuf : s->rcvbuf;
        pthread_mutex_unlock(&slots_lock);
        int bsd = set ? set
                      : name == SO_SNDBUF ? default_sndbuf(family, type)
                                          : default_rcvbuf(family, type);
        if (bsd)
            *v = bsd;
    }
    return rc;
}

int setsockopt(int fd, int level, int name, const void *value, socklen_t len)
{
    REAL(setsockopt);
    int rc = real_setsockopt(fd, level, name, value, len);
    int family, type;
    if (rc != 0 || personality_now() == PASS || level != SOL_SOCKET
        || (name != SO_SNDBUF && name != SO_RCVBUF) || len < (socklen_t)sizeof(int)
        || !kind_of(fd, &family, &type) || type != SOCK_DGRAM)
        return rc;
    int size = *(const int *)value;
    pthread_mutex_lock(&slots_lock);
    struct slot *s = slot_of(fd, 1);
    if (s != NULL && size > 0) {
        if (name == SO_SNDBUF)
            s->sndbuf = size;
        else
            s->rcvbuf = size;
    }
    pthread_mutex_unlock(&slots_lock);
    return rc;
}

/* A new UDP socket under FreeBSD's rules holds about what FreeBSD's does
 * (rule 4): Linux doubles the size it is given, and charges about twice
 * the payload. */
int socket(int family, int type, int protocol)
{
    REAL(socket);
    REAL(setsockopt);
    int fd = real_socket(family, type, protocol);
    if (fd >= 0 && personality_now() == FREEBSD && is_inet(family)
        && (type & 0xf) == SOCK_DGRAM) {
        int saved = errno, size = 42080;
        real_setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
        errno = saved;
    }
    return fd;
}
