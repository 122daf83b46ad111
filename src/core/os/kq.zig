//! The kqueue interface the kqueue backend is written against: `Kevent`,
//! `kqueue()`, `kevent()`, `close()` and the `EV`, `EVFILT`, `NOTE`
//! constants. On macOS and the BSDs it is libc's, with each target's own
//! `struct kevent` (FreeBSD 12+ carries `ext[4]`, macOS does not: Zig's
//! `std.c.Kevent` per target is the truth). On Linux it is the test-only
//! emulation over epoll (`kqueue_emu.zig`), which only a `-Dportable=true`
//! build compiles.
const std = @import("std");
const builtin = @import("builtin");
const common = @import("common.zig");

/// Whether this is the test-only emulation (Linux) rather than a kernel's.
pub const emulated = builtin.os.tag == .linux;
const impl = if (emulated) @import("kqueue_emu.zig") else Libc;
/// The emulation itself, for tests that pick its personality (only
/// where `emulated`).
pub const emulation = impl;

const Libc = struct {
    const c = std.c;
    pub const Kevent = c.Kevent;
    pub const EV = c.EV;
    pub const EVFILT = c.EVFILT;
    pub const NOTE = c.NOTE;
    pub const kqueue = c.kqueue;
    pub const kevent = c.kevent;

    pub fn close(kq: common.fd_t) void {
        _ = c.close(kq);
    }
};

pub const Kevent = impl.Kevent;
pub const EV = impl.EV;
pub const EVFILT = impl.EVFILT;
pub const NOTE = impl.NOTE;
pub const timespec = std.c.timespec;

/// kqueue(2): a new queue's fd, or -1 and errno.
pub const kqueue = impl.kqueue;
/// kevent(2): applies `changelist` in order, then waits up to `timeout`
/// (null: forever) for events; -1 and errno on failure.
pub const kevent = impl.kevent;
/// Closes a queue from `kqueue` (the emulation frees its state too).
pub const close = impl.close;

/// The errno a failed `kqueue`/`kevent` left (the emulation sets libc's).
pub fn errno() common.E {
    return @fromBackingInt(@intCast(std.c._errno().*));
}

/// NOTE_EXIT, and on macOS NOTE_EXITSTATUS, without which its NOTE_EXIT
/// leaves `data` empty (FreeBSD always puts the wait status there).
pub const note_exit: u32 = NOTE.EXIT | if (@hasDecl(NOTE, "EXITSTATUS")) NOTE.EXITSTATUS else 0;

/// A change or event with every field zero but those given (a struct
/// kevent has target-specific fields, such as FreeBSD's `ext`).
pub fn make(ident: usize, filter: anytype, flags: anytype, fflags: u32, udata: usize) Kevent {
    var ev = std.mem.zeroes(Kevent);
    ev.ident = ident;
    ev.filter = @intCast(filter);
    ev.flags = @intCast(flags);
    ev.fflags = fflags;
    ev.udata = udata;
    return ev;
}
