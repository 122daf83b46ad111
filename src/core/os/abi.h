/* The target's own headers, translated for the build-time check of every
 * OS constant and layout zloop uses (abi.zig). Only what the OS layer, the
 * backends and the adapter use needs to be here. */
#if defined(__linux__)
#define _GNU_SOURCE /* AT_EMPTY_PATH */
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <sys/types.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#if defined(__APPLE__) || defined(__FreeBSD__)
#include <sys/event.h>
#endif
#if defined(__linux__)
#include <sys/epoll.h>
#include <sys/eventfd.h>
#endif

/* Function-like macros that translate-c keeps as calls: their values as
 * enumerators, which the C compiler evaluates. */
enum {
    zloop_FIONREAD = FIONREAD,
#if defined(__linux__)
    zloop_TIOCOUTQ = TIOCOUTQ,
#endif
};
