//! Test fixtures for the OS layer and the backends: sockets, a listening
//! TCP socket, a temporary file, a child process. Through libc where the
//! test build links it (portable builds, macOS, FreeBSD), raw syscalls
//! otherwise (a default Linux build's core tests have no libc).
const std = @import("std");
const builtin = @import("builtin");
const c = std.c;
const linux = std.os.linux;

const use_libc = builtin.link_libc;
const fd_t = i32;

fn ok(rc: anytype) !usize {
    if (use_libc) {
        if (c.errno(rc) != .SUCCESS) return error.Unexpected;
        return @intCast(rc);
    }
    if (linux.errno(rc) != .SUCCESS) return error.Unexpected;
    return rc;
}

fn socket(domain: u32, kind: u32) !fd_t {
    if (use_libc) return @intCast(try ok(c.socket(domain, kind, 0)));
    return @intCast(try ok(linux.socket(domain, kind, 0)));
}

fn setNonblocking(fd: fd_t) !void {
    const nonblock: u32 = @bitCast(c.O{ .NONBLOCK = true });
    if (use_libc) {
        const fl = try ok(c.fcntl(fd, c.F.GETFL));
        _ = try ok(c.fcntl(fd, c.F.SETFL, @as(c_int, @intCast(fl | nonblock))));
        return;
    }
    const fl = try ok(linux.fcntl(fd, linux.F.GETFL, 0));
    _ = try ok(linux.fcntl(fd, linux.F.SETFL, fl | nonblock));
}

/// A connected, non-blocking AF_UNIX stream pair.
pub fn socketPair() ![2]fd_t {
    var fds: [2]fd_t = undefined;
    if (use_libc) {
        _ = try ok(c.socketpair(c.AF.UNIX, c.SOCK.STREAM, 0, &fds));
    } else {
        _ = try ok(linux.socketpair(linux.AF.UNIX, linux.SOCK.STREAM, 0, &fds));
    }
    for (fds) |fd| try setNonblocking(fd);
    return fds;
}

/// A connected stream socket whose peer is gone with a reset: at end of
/// file, ECONNRESET pending. On Linux, the peer of an AF_UNIX pair closed
/// with data unread (af_unix.c resets the survivor); elsewhere a TCP
/// peer closed with SO_LINGER 0, which sends a reset (a BSD's AF_UNIX
/// peer leaves no error).
pub fn resetSocket() !fd_t {
    if (builtin.os.tag == .linux) {
        const pair = try socketPair();
        errdefer close(pair[0]);
        const unread = "x";
        const rc = if (use_libc) c.write(pair[0], unread, 1) else linux.write(pair[0], unread, 1);
        _ = try ok(rc);
        close(pair[1]);
        return pair[0];
    }
    const l = try tcpListener();
    defer close(l.fd);
    const client = try tcpConnect(l.port);
    errdefer close(client);
    const server: fd_t = @intCast(try ok(c.accept(l.fd, null, null)));
    const Linger = extern struct { onoff: c_int, seconds: c_int };
    const abort: Linger = .{ .onoff = 1, .seconds = 0 };
    _ = try ok(c.setsockopt(server, c.SOL.SOCKET, c.SO.LINGER, std.mem.asBytes(&abort), @sizeOf(Linger)));
    close(server);
    return client;
}

/// A listening TCP socket on 127.0.0.1 and its port.
pub fn tcpListener() !struct { fd: fd_t, port: u16 } {
    const fd = try socket(c.AF.INET, c.SOCK.STREAM);
    errdefer close(fd);
    var addr = loopback(0);
    var len: c.socklen_t = @sizeOf(c.sockaddr.in);
    if (use_libc) {
        _ = try ok(c.bind(fd, @ptrCast(&addr), len));
        _ = try ok(c.listen(fd, 16));
        _ = try ok(c.getsockname(fd, @ptrCast(&addr), &len));
    } else {
        _ = try ok(linux.bind(fd, @ptrCast(&addr), len));
        _ = try ok(linux.listen(fd, 16));
        _ = try ok(linux.getsockname(fd, @ptrCast(&addr), &len));
    }
    try setNonblocking(fd);
    return .{ .fd = fd, .port = std.mem.bigToNative(u16, addr.port) };
}

fn loopback(port: u16) c.sockaddr.in {
    var addr = std.mem.zeroes(c.sockaddr.in);
    addr.family = c.AF.INET;
    addr.port = std.mem.nativeToBig(u16, port);
    addr.addr = std.mem.nativeToBig(u32, 0x7f000001);
    return addr;
}

/// A TCP connection to 127.0.0.1:`port` (connected before it returns:
/// the listener's backlog holds it).
pub fn tcpConnect(port: u16) !fd_t {
    const fd = try socket(c.AF.INET, c.SOCK.STREAM);
    errdefer close(fd);
    const addr = loopback(port);
    if (use_libc) {
        _ = try ok(c.connect(fd, @ptrCast(&addr), @sizeOf(c.sockaddr.in)));
    } else {
        _ = try ok(linux.connect(fd, &addr, @sizeOf(c.sockaddr.in)));
    }
    try setNonblocking(fd);
    return fd;
}

/// Whether TCP_NODELAY is on for TCP socket `fd`.
pub fn tcpNodelay(fd: fd_t) !bool {
    var on: c_int = 0;
    var len: c.socklen_t = @sizeOf(c_int);
    if (use_libc) {
        _ = try ok(c.getsockopt(fd, c.IPPROTO.TCP, c.TCP.NODELAY, @ptrCast(&on), &len));
    } else {
        _ = try ok(linux.getsockopt(fd, linux.IPPROTO.TCP, linux.TCP.NODELAY, @ptrCast(&on), &len));
    }
    return on != 0;
}

var temp_serial: u32 = 0;

/// A temporary file (already unlinked) holding `contents`.
pub fn tempFile(contents: []const u8) !fd_t {
    var path_buf: [64]u8 = undefined;
    temp_serial += 1;
    const pid = if (use_libc) c.getpid() else linux.getpid();
    const path = try std.fmt.bufPrintSentinel(&path_buf, "/tmp/zloop-sys-test-{d}-{d}", .{ pid, temp_serial }, 0);
    const flags: c.O = .{ .ACCMODE = .RDWR, .CREAT = true, .EXCL = true, .CLOEXEC = true };
    const fd: fd_t = if (use_libc)
        @intCast(try ok(c.open(path, flags, @as(c.mode_t, 0o600))))
    else
        @intCast(try ok(linux.open(path, @bitCast(@as(u32, @bitCast(flags))), 0o600)));
    if (use_libc) _ = c.unlink(path) else _ = linux.unlink(path);
    var done: usize = 0;
    while (done < contents.len) {
        const rest = contents[done..];
        done += if (use_libc)
            try ok(c.write(fd, rest.ptr, rest.len))
        else
            try ok(linux.write(fd, rest.ptr, rest.len));
    }
    return fd;
}

pub fn close(fd: fd_t) void {
    if (use_libc) _ = c.close(fd) else _ = linux.close(fd);
}

/// Makes `new` another descriptor of `old`'s file (closing what `new`
/// was): a test's stand-in for a file that reuses a closed fd's number.
pub fn dup2(old: fd_t, new: fd_t) !void {
    const rc = if (use_libc) c.dup2(old, new) else linux.dup2(old, new);
    _ = try ok(rc);
}

/// A child process that exits with `code`: at once, or, given a
/// `blockingPipe`, once the parent closes the pipe's write end.
pub fn spawnChild(code: u8, hold: ?[2]fd_t) !i32 {
    const rc = if (use_libc) c.fork() else linux.fork();
    const pid: i32 = @intCast(try ok(rc));
    if (pid != 0) return pid;
    if (hold) |p| {
        close(p[1]); // else its own copy keeps the pipe open
        var buf: [1]u8 = undefined;
        _ = if (use_libc) c.read(p[0], &buf, 1) else linux.read(p[0], &buf, 1);
    }
    if (use_libc) c._exit(code) else linux.exit_group(code);
}

/// fork(2): the child's pid in the parent, 0 in the child, which must
/// end with `exitNow` (it must not return into the test runner).
pub fn fork() !i32 {
    const rc = if (use_libc) c.fork() else linux.fork();
    return @intCast(try ok(rc));
}

/// Ends this process at once with `code` (a fork child's end).
pub fn exitNow(code: u8) noreturn {
    if (use_libc) c._exit(code) else linux.exit_group(code);
}

/// Reaps child `pid`; its wait status.
pub fn reap(pid: i32) !u32 {
    var status: c_int = 0;
    if (use_libc) {
        _ = try ok(c.waitpid(pid, &status, 0));
    } else {
        var s: i32 = 0;
        _ = try ok(linux.wait4(pid, &s, 0, null));
        status = s;
    }
    return @bitCast(status);
}

/// A blocking pipe `[read end, write end]` (a child blocks on its read
/// end until the write end closes).
pub fn blockingPipe() ![2]fd_t {
    var fds: [2]fd_t = undefined;
    if (use_libc) {
        _ = try ok(c.pipe(&fds));
    } else {
        _ = try ok(linux.pipe2(&fds, .{ .CLOEXEC = true }));
    }
    return fds;
}

/// A non-blocking UDP socket bound to 127.0.0.1 and its port.
pub fn udpSocket() !struct { fd: fd_t, port: u16 } {
    const fd = try socket(c.AF.INET, c.SOCK.DGRAM);
    errdefer close(fd);
    var addr = loopback(0);
    var len: c.socklen_t = @sizeOf(c.sockaddr.in);
    if (use_libc) {
        _ = try ok(c.bind(fd, @ptrCast(&addr), len));
        _ = try ok(c.getsockname(fd, @ptrCast(&addr), &len));
    } else {
        _ = try ok(linux.bind(fd, @ptrCast(&addr), len));
        _ = try ok(linux.getsockname(fd, @ptrCast(&addr), &len));
    }
    try setNonblocking(fd);
    return .{ .fd = fd, .port = std.mem.bigToNative(u16, addr.port) };
}

/// The address of 127.0.0.1:`port`.
pub fn loopbackAddress(port: u16) c.sockaddr.in {
    return loopback(port);
}

/// Whether `fd` is close-on-exec and non-blocking.
pub fn flagsOf(fd: fd_t) !struct { cloexec: bool, nonblocking: bool } {
    const nonblock: usize = @as(u32, @bitCast(c.O{ .NONBLOCK = true }));
    const fd_flags = if (use_libc) try ok(c.fcntl(fd, c.F.GETFD)) else try ok(linux.fcntl(fd, linux.F.GETFD, 0));
    const fl = if (use_libc) try ok(c.fcntl(fd, c.F.GETFL)) else try ok(linux.fcntl(fd, linux.F.GETFL, 0));
    return .{ .cloexec = fd_flags & 1 != 0, .nonblocking = fl & nonblock != 0 };
}

/// A path for a file of its own in /tmp (not created), NUL-terminated
/// in `buf`.
pub fn tempPath(buf: []u8) ![:0]u8 {
    temp_serial += 1;
    const pid = if (use_libc) c.getpid() else linux.getpid();
    return std.fmt.bufPrintSentinel(buf, "/tmp/zloop-sys-path-{d}-{d}", .{ pid, temp_serial }, 0);
}

/// A listening AF_UNIX stream socket bound to `path`.
pub fn unixListener(path: [:0]const u8) !fd_t {
    const fd = try socket(c.AF.UNIX, c.SOCK.STREAM);
    errdefer close(fd);
    var addr = std.mem.zeroes(c.sockaddr.un);
    addr.family = c.AF.UNIX;
    @memcpy(addr.path[0..path.len], path);
    const len: c.socklen_t = @sizeOf(c.sockaddr.un);
    if (use_libc) {
        _ = try ok(c.bind(fd, @ptrCast(&addr), len));
        _ = try ok(c.listen(fd, 4));
    } else {
        _ = try ok(linux.bind(fd, @ptrCast(&addr), len));
        _ = try ok(linux.listen(fd, 4));
    }
    return fd;
}
