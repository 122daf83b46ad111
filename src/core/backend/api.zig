//! The contract every backend meets. The reactor speaks only these types.
//!
//! A readiness backend (epoll, kqueue) maps interest straight to the kernel.
//! A completion backend (io_uring) carries the same contract by arming a
//! poll request per interest and turning completions into `Event`s; its
//! native receives (`Arm.recv`, `Event.recv`) extend the contract, they do
//! not replace it.
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
    /// Disarm after one event until armed again: EPOLLONESHOT, or an
    /// io_uring poll that is not re-armed when it completes. Honoured only
    /// by a backend whose `has_oneshot` is true; the reactor asks for it
    /// only there.
    oneshot: bool = false,
    /// The kernel may still hold a (disarmed) entry for this fd from an
    /// earlier one-shot registration, so arming it again is a modification
    /// rather than an addition (epoll: CTL_MOD first, no statx on io_uring).
    registered: bool = false,
    /// Serve read interest with native receives where the backend has them
    /// (io_uring, once the caller has provided buffers: `Event.recv`);
    /// ignored by a readiness backend, which reports readability as usual.
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

/// Compile-time proof that `B` offers the whole backend API.
pub fn check(comptime B: type) void {
    const required = [_][]const u8{ "init", "deinit", "setInterest", "poll", "has_oneshot" };
    inline for (required) |decl| {
        if (!@hasDecl(B, decl)) @compileError("backend lacks " ++ decl);
    }
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
