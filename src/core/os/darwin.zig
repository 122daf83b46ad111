//! macOS's own calls for the portable OS layer (`posix.zig`): its
//! sendfile(2) signature and SO_NOSIGPIPE, for macOS's send(2) knows no
//! MSG_NOSIGNAL that every release honours.
const std = @import("std");
const c = std.c;
const common = @import("common.zig");
const posix = @import("posix.zig");

const Result = common.Result;
const fd_t = common.fd_t;

/// No MSG_NOSIGNAL: each socket gets SO_NOSIGPIPE instead (`noSigpipe`).
/// FIONREAD, _IOR('f', 127, int): Zig's std names it for FreeBSD only.
pub const fionread: u32 = 0x4004667f;

pub const send_flags: u32 = 0;

pub fn noSigpipe(fd: fd_t) void {
    const one: c_int = 1;
    _ = c.setsockopt(fd, c.SOL.SOCKET, c.SO.NOSIGPIPE, &one, @sizeOf(c_int));
}

/// macOS's sendfile(in, out, offset, &len, hdtr, flags): `len` in is the
/// count (0 would mean "to end of file", so it is never passed), out what
/// went, also when it fails with EAGAIN after a part.
pub fn sendfile(out_fd: fd_t, in_fd: fd_t, offset: *i64, count: usize) Result(usize) {
    if (count == 0) return .{ .ok = 0 };
    var len: c.off_t = @intCast(@min(count, std.math.maxInt(i32)));
    const rc = c.sendfile(in_fd, out_fd, offset.*, &len, null, 0);
    return sent(rc, offset, len);
}

/// The outcome of a BSD sendfile: what went counts even when the call
/// failed after a part (EAGAIN, EINTR).
pub fn sent(rc: c_int, offset: *i64, len: c.off_t) Result(usize) {
    if (len > 0) {
        offset.* += len;
        return .{ .ok = @intCast(len) };
    }
    if (rc < 0) return .{ .err = posix.errno() };
    return .{ .ok = 0 };
}

pub fn statPath(path: [*:0]const u8) Result(posix.PathStat) {
    return posix.fstatatPath(path);
}
