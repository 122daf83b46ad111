//! FreeBSD's own calls for the portable OS layer (`posix.zig`): its
//! sendfile(2) signature; send(2) takes MSG_NOSIGNAL.
const std = @import("std");
const c = std.c;
const common = @import("common.zig");
const posix = @import("posix.zig");
const darwin = @import("darwin.zig");

const Result = common.Result;
const fd_t = common.fd_t;

pub const fionread: u32 = c.T.FIONREAD;

pub const send_flags: u32 = c.MSG.NOSIGNAL;

pub fn noSigpipe(fd: fd_t) void {
    _ = fd;
}

/// FreeBSD's sendfile(in, out, offset, nbytes, hdtr, &sbytes, flags):
/// `nbytes` 0 would mean "to end of file", so it is never passed; `sbytes`
/// is what went, also when it fails with EAGAIN after a part.
pub fn sendfile(out_fd: fd_t, in_fd: fd_t, offset: *i64, count: usize) Result(usize) {
    if (count == 0) return .{ .ok = 0 };
    var sbytes: c.off_t = 0;
    const rc = c.sendfile(in_fd, out_fd, offset.*, count, null, &sbytes, 0);
    return darwin.sent(rc, offset, sbytes);
}

pub fn statPath(path: [*:0]const u8) Result(posix.PathStat) {
    return posix.fstatatPath(path);
}
