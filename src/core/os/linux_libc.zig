//! Linux's own calls for the portable OS layer (`posix.zig`), used only by
//! a `-Dportable=true` build: what a BSD does through its own sendfile
//! takes the copy fallback here (Linux's sendfile is the fast path the
//! portable build leaves out), and send(2) takes MSG_NOSIGNAL, the only
//! way Linux has.
const std = @import("std");
const c = std.c;
const common = @import("common.zig");
const posix = @import("posix.zig");

const Result = common.Result;
const fd_t = common.fd_t;

pub const fionread: u32 = std.os.linux.T.FIONREAD;

pub const send_flags: u32 = c.MSG.NOSIGNAL;

pub fn noSigpipe(fd: fd_t) void {
    _ = fd;
}

pub fn sendfile(out_fd: fd_t, in_fd: fd_t, offset: *i64, count: usize) Result(usize) {
    return posix.sendfileCopy(out_fd, in_fd, offset, count);
}

/// statx through libc: Zig's std declares no fstatat for glibc.
pub fn statPath(path: [*:0]const u8) Result(posix.PathStat) {
    const linux = std.os.linux;
    var st: linux.Statx = undefined;
    const mask: linux.STATX = .{ .TYPE = true, .MODE = true, .INO = true };
    const rc = c.statx(linux.AT.FDCWD, path, 0, mask, &st);
    if (rc < 0) return .{ .err = posix.errno() };
    return .{ .ok = .{ .mode = st.mode, .ino = st.ino } };
}
