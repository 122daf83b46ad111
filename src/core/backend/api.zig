//! The contract every backend meets. The reactor speaks only these types.
//!
//! A readiness backend (epoll, kqueue) maps interest straight to the kernel.
//! A completion backend (io_uring) carries the same contract by arming a
//! poll request per interest and turning completions into `Event`s; its
//! native send/recv completions extend the contract, they do not replace it.
const std = @import("std");

/// Which directions the reactor wants to hear about for one fd.
pub const Interest = packed struct(u2) {
    read: bool = false,
    write: bool = false,

    pub fn none(i: Interest) bool {
        return !i.read and !i.write;
    }
};

/// One readiness report.
pub const Event = struct {
    fd: i32,
    readable: bool,
    writable: bool,
};

/// Compile-time proof that `B` offers the whole backend API.
pub fn check(comptime B: type) void {
    const required = [_][]const u8{ "init", "deinit", "setInterest", "poll" };
    inline for (required) |decl| {
        if (!@hasDecl(B, decl)) @compileError("backend lacks " ++ decl);
    }
}
