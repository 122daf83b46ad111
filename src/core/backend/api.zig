//! The contract every backend meets. The reactor speaks only these types.
//!
//! A readiness backend (epoll, kqueue) maps interest straight to the kernel.
//! A completion backend (io_uring) carries the same contract by arming a
//! poll request per interest and turning completions into `Event`s; its
//! native receives (`Arm.recv`, `Event.recv`) extend the contract, they do
//! not replace it.
//!
//! Two duties a backend may take over from the reactor, declared by two
//! constants every backend has:
//!   `wakes_itself`      true: it wakes a blocked `poll` from another thread
//!                       with `wake()` (kqueue: EVFILT_USER) and reports that
//!                       as an `Event` on `wake_fd`. False: the reactor
//!                       watches an eventfd (a pipe when portable) through
//!                       the backend like any fd.
//!   `watches_children`  true: it watches child exits itself
//!                       (`watchChild`/`unwatchChild`, kqueue's
//!                       EVFILT_PROC) and reports each as an `Event` on
//!                       `childEventFd`. False: the reactor watches a
//!                       pidfd through the backend like any fd (Linux).
const std = @import("std");

/// Which directions the reactor wants to hear about for one fd.
pub const Interest = packed struct(u2) {
    read: bool = false,
    write: bool = false,

    pub fn none(i: Interest) bool {
        return !i.read and !i.write;
    }
};

/// How `setInterest` arms a registration.
pub const Arm = struct {
    /// Disarm after one event until armed again: EPOLLONESHOT, an
    /// io_uring poll that is not re-armed when it completes, or kqueue's
    /// EV_DISPATCH (both directions at once, as one epoll entry). Honoured
    /// only by a backend whose `has_oneshot` is true; the reactor asks for
    /// it only there.
    oneshot: bool = false,
    /// The kernel may still hold a (disarmed) entry for this fd from an
    /// earlier one-shot registration, so arming it again is a modification
    /// rather than an addition (epoll: CTL_MOD first, no statx on io_uring).
    registered: bool = false,
    /// Serve read interest with native receives where the backend has them
    /// (io_uring, once the caller has provided buffers: `Event.recv`);
    /// ignored by a readiness backend, which reports readability as usual.
    /// Asked only for a stream socket the caller holds, which io_uring
    /// therefore does not check when it is registered.
    recv: bool = false,
    /// Dropping all interest because the fd is leaving (about to be
    /// closed, its number reused): whatever is in flight for it is dropped
    /// unreported. Without it, dropping interest only pauses a native
    /// receive, which still reports what it took before the pause.
    forget: bool = false,
    /// The fd belongs to code outside the loop, which may close it at any
    /// moment without a word (add_reader, sock_*): the kernel must then
    /// forget it as epoll does, holding no reference that keeps the closed
    /// file open and reporting nothing of a file that later reuses the
    /// number. A readiness backend does that by itself; io_uring, whose
    /// polls hold their file, watches such fds through an epoll instance.
    borrowed: bool = false,
};

/// One native receive: what a readiness backend leaves to the caller's
/// own `recv`, done by the kernel into a buffer the caller provided.
pub const Recv = struct {
    /// Bytes received into buffer `buffer` (> 0), end of file (0), or a
    /// negated errno. `-ENOBUFS`: no buffer was free; nothing was received
    /// and the backend receives again on its next wait (provide more).
    res: i32,
    /// The id the buffer was provided under; meaningful when `res` > 0,
    /// and the caller's again from here on: it provides that id anew once
    /// done with it.
    buffer: u16 = 0,
};

/// One readiness report.
pub const Event = struct {
    fd: i32,
    readable: bool,
    writable: bool,
    /// A native receive's result (`Arm.recv`): `readable` is set too.
    recv: ?Recv = null,
};

/// The fd of the `Event` a backend that `wakes_itself` reports when woken;
/// no real fd has it.
pub const wake_fd: i32 = -1;

/// The fd of the `Event` a backend that `watches_children` reports when
/// the child of watch `serial` has exited: -2 and below, never a real fd
/// nor `wake_fd`.
pub fn childEventFd(serial: u32) i32 {
    std.debug.assert(serial <= max_child_serial);
    return -2 - @as(i32, @intCast(serial));
}

/// The watch serial an `Event`'s fd names, or null for any other fd.
pub fn childSerial(fd: i32) ?u32 {
    if (fd > -2) return null;
    return @intCast(-2 - @as(i64, fd));
}

/// The largest serial `childEventFd` encodes.
pub const max_child_serial: u32 = std.math.maxInt(i32) - 1;

/// One child-exit watch as a backend that `watches_children` sees it. The
/// reactor owns it and keeps it alive until its exit is reported or it is
/// unwatched.
pub const ChildExit = struct {
    pid: i32,
    /// Reported back as `childEventFd(serial)`.
    serial: u32,
    /// The wait status (as waitpid(2) gives it), written by the backend
    /// before it reports the exit; null when the kernel did not say.
    status: ?u32 = null,
};

/// Compile-time proof that `B` offers the whole backend API.
pub fn check(comptime B: type) void {
    const required = [_][]const u8{
        "init",        "deinit",       "abandon",          "setInterest", "poll",
        "has_oneshot", "wakes_itself", "watches_children",
    };
    inline for (required) |decl| {
        if (!@hasDecl(B, decl)) @compileError("backend lacks " ++ decl);
    }
    if (B.wakes_itself and !@hasDecl(B, "wake")) @compileError("a backend that wakes itself has wake()");
    if (B.watches_children) {
        inline for (.{ "watchChild", "unwatchChild" }) |decl| {
            if (!@hasDecl(B, decl)) @compileError("a backend that watches children has " ++ decl);
        }
    }
}

test "child event fds never collide with real fds or the wake-up" {
    try std.testing.expect(childEventFd(0) < wake_fd);
    try std.testing.expectEqual(@as(?u32, 0), childSerial(childEventFd(0)));
    try std.testing.expectEqual(@as(?u32, max_child_serial), childSerial(childEventFd(max_child_serial)));
    try std.testing.expectEqual(@as(?u32, null), childSerial(wake_fd));
    try std.testing.expectEqual(@as(?u32, null), childSerial(0));
    try std.testing.expectEqual(@as(i32, std.math.minInt(i32)), childEventFd(max_child_serial));
}

/// `b.poll` for tests that block: a wait ends early with `error.Interrupted`
/// whenever the process is stopped and continued (a test host may do that),
/// even with no signal handler installed. Waits again, as the reactor's next
/// pass would.
pub fn pollRetrying(b: anytype, timeout_ms: i32, out: []Event) !usize {
    while (true) return b.poll(timeout_ms, out) catch |err| switch (err) {
        error.Interrupted => continue,
        else => err,
    };
}
