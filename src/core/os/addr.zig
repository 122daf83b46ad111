//! Socket addresses as each target's kernel writes them, where the targets
//! differ in more than the numbers: how an AF_UNIX address's name is read
//! (Linux's abstract namespace exists nowhere else), and the getnameinfo
//! flag that keeps a host numeric. The adapter turns addresses into Python
//! objects with these, as CPython's `makesockaddr` does on the same target.
const std = @import("std");
const builtin = @import("builtin");

/// getnameinfo(3)'s NI_NUMERICHOST: the host as digits, never looked up.
/// 1 on Linux, 2 on macOS and FreeBSD (where 1 is NI_NOFQDN, which asks
/// for a reverse lookup); `abi.zig` checks it against each target's
/// `<netdb.h>`.
pub const ni_numerichost: c_int = @bitCast(std.c.NI{ .NUMERICHOST = true });

/// The name an AF_UNIX address carries, as CPython reads it.
pub const UnixName = union(enum) {
    /// A filesystem path up to its NUL; empty for an unnamed socket.
    /// Python gives it as a `str`.
    path: []const u8,
    /// Linux's abstract namespace: every byte, the leading NUL included.
    /// Python gives it as `bytes`.
    abstract: []const u8,
};

/// The rules a kernel follows for an AF_UNIX name.
pub const UnixRule = enum {
    /// Linux: a name whose first byte is NUL is abstract, and its length
    /// is the address's (unix(7), "abstract").
    linux,
    /// macOS and the BSDs: a path up to its NUL, whatever the length. An
    /// unnamed peer comes back as 16 zero bytes (XNU's and FreeBSD's
    /// `sun_noname` in bsd/kern/uipc_usrreq.c and sys/kern/uipc_usrreq.c:
    /// `{ sizeof(sun_noname), AF_LOCAL }`), which CPython, reading a path
    /// there, turns into ''.
    bsd,
};

/// This target's rule.
pub const unix_rule: UnixRule = if (builtin.os.tag == .linux) .linux else .bsd;

/// The name in `sun_path`, the bytes of `sun_path` that the address's
/// length covers (its length less `sun_path`'s offset, at most the array),
/// read by this target's rule.
pub fn unixName(sun_path: []const u8) UnixName {
    return unixNameBy(unix_rule, sun_path);
}

/// The name in `sun_path` read by `rule` (any rule, on any machine: the
/// tests read each target's).
pub fn unixNameBy(rule: UnixRule, sun_path: []const u8) UnixName {
    if (rule == .linux and sun_path.len > 0 and sun_path[0] == 0) {
        return .{ .abstract = sun_path };
    }
    const end = std.mem.indexOfScalar(u8, sun_path, 0) orelse sun_path.len;
    return .{ .path = sun_path[0..end] };
}

// ---------------------------------------------------------------- tests

const testing = std.testing;

test "a path is read up to its NUL by every rule" {
    for ([_]UnixRule{ .linux, .bsd }) |rule| {
        try testing.expectEqualStrings("/tmp/s", unixNameBy(rule, "/tmp/s\x00junk").path);
        try testing.expectEqualStrings("/tmp/s", unixNameBy(rule, "/tmp/s").path);
        try testing.expectEqualStrings("", unixNameBy(rule, "").path);
    }
}

test "Linux: a leading NUL is an abstract name of every byte" {
    const name = unixNameBy(.linux, "\x00zloop\x00x");
    try testing.expectEqualStrings("\x00zloop\x00x", name.abstract);
}

test "macOS and FreeBSD: an unnamed peer's 16 zero bytes are an empty path" {
    // sun_noname: sa_len 16, AF_LOCAL, then 14 zero bytes of sun_path.
    const noname: [14]u8 = @splat(0);
    try testing.expectEqualStrings("", unixNameBy(.bsd, &noname).path);
    // Read by Linux's rule, the same bytes would be an abstract name: the
    // bug this rule exists to avoid.
    try testing.expectEqual(@as(usize, 14), unixNameBy(.linux, &noname).abstract.len);
}

test "this target's rule" {
    const noname: [14]u8 = @splat(0);
    switch (builtin.os.tag) {
        .linux => try testing.expect(unixName(&noname) == .abstract),
        else => try testing.expectEqualStrings("", unixName(&noname).path),
    }
}
