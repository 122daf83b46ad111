//! The io_uring backend's tests (`io_uring.zig`): readiness, interest
//! changes, fd reuse, timeouts, cross-thread use, native receives, the
//! optional ring features and the move off a single-issuer ring.
const std = @import("std");
const builtin = @import("builtin");
const linux = std.os.linux;
const sys = @import("../sys.zig");
const api = @import("api.zig");
const io_uring = @import("io_uring.zig");
const Backend = io_uring.Backend;
const Feature = io_uring.Feature;
const UserData = io_uring.UserData;
const threadPointer = io_uring.threadPointer;

fn testBackend() !Backend {
    return Backend.init() catch |err| switch (err) {
        error.Unsupported => error.SkipZigTest,
        else => err,
    };
}

/// An eventfd with read interest whose poll is in the kernel, not ready.
fn armedEventfd(b: *Backend) !sys.fd_t {
    const fd = try sys.eventfd();
    errdefer sys.close(fd);
    try b.setInterest(fd, .{}, .{ .read = true }, .{});
    var out: [8]api.Event = undefined;
    try std.testing.expectEqual(@as(usize, 0), try b.poll(0, &out));
    return fd;
}

fn signal(fd: sys.fd_t) !void {
    const one: u64 = 1;
    _ = try sys.write(fd, std.mem.asBytes(&one));
}

test "io_uring reports a readable eventfd, level-triggered, and forgets it" {
    var b = try testBackend();
    defer b.deinit();
    const fd = try sys.eventfd();
    defer sys.close(fd);
    try b.setInterest(fd, .{}, .{ .read = true }, .{});
    var out: [8]api.Event = undefined;
    try std.testing.expectEqual(@as(usize, 0), try b.poll(0, &out));
    try signal(fd);
    try std.testing.expectEqual(@as(usize, 1), try api.pollRetrying(&b, 100, &out));
    try std.testing.expectEqual(fd, out[0].fd);
    try std.testing.expect(out[0].readable and !out[0].writable);
    // Not drained: reported again on the next pass, as epoll would.
    try std.testing.expectEqual(@as(usize, 1), try api.pollRetrying(&b, 100, &out));
    try b.setInterest(fd, .{ .read = true }, .{}, .{});
    try std.testing.expectEqual(@as(usize, 0), try b.poll(0, &out));
}

test "io_uring interest changes: narrowing, widening, re-registering" {
    var b = try testBackend();
    defer b.deinit();
    const fd = try sys.eventfd();
    defer sys.close(fd);
    var out: [8]api.Event = undefined;
    // An eventfd is always writable.
    try b.setInterest(fd, .{}, .{ .read = true, .write = true }, .{});
    try std.testing.expectEqual(@as(usize, 1), try api.pollRetrying(&b, 100, &out));
    try std.testing.expect(out[0].writable and !out[0].readable);
    // Narrowed to read while the re-arm is queued: nothing to report.
    try b.setInterest(fd, .{ .read = true, .write = true }, .{ .read = true }, .{});
    try std.testing.expectEqual(@as(usize, 0), try b.poll(0, &out));
    // Widened again on an armed poll (removed and re-armed).
    try b.setInterest(fd, .{ .read = true }, .{ .read = true, .write = true }, .{});
    try std.testing.expectEqual(@as(usize, 1), try api.pollRetrying(&b, 100, &out));
    try std.testing.expect(out[0].writable);
    // Dropped and re-added in one pass: only the new generation reports.
    try b.setInterest(fd, .{ .read = true, .write = true }, .{}, .{});
    try b.setInterest(fd, .{}, .{ .write = true }, .{});
    try std.testing.expectEqual(@as(usize, 1), try api.pollRetrying(&b, 100, &out));
    try std.testing.expect(out[0].writable);
}

test "io_uring drops completions of a removed fd whose number was reused" {
    var b = try testBackend();
    defer b.deinit();
    const fd = try sys.eventfd();
    try signal(fd);
    try b.setInterest(fd, .{}, .{ .read = true }, .{});
    var out: [8]api.Event = undefined;
    try std.testing.expectEqual(@as(usize, 1), try api.pollRetrying(&b, 100, &out));
    // The re-arm is queued; remove, close and reuse the number.
    try b.setInterest(fd, .{ .read = true }, .{}, .{});
    sys.close(fd);
    const again = try sys.eventfd();
    defer sys.close(again);
    try std.testing.expectEqual(fd, again);
    try b.setInterest(again, .{}, .{ .read = true }, .{});
    try std.testing.expectEqual(@as(usize, 0), try b.poll(0, &out));
}

test "io_uring refuses what epoll refuses" {
    var b = try testBackend();
    defer b.deinit();
    const fd = try sys.eventfd();
    sys.close(fd);
    try std.testing.expectError(error.BadFd, b.setInterest(fd, .{}, .{ .read = true }, .{}));
    try std.testing.expectEqual(@as(u16, @backingInt(linux.E.BADF)), sys.last_errno);
    const dir: sys.fd_t = @intCast(linux.open(".", .{ .DIRECTORY = true, .CLOEXEC = true }, 0));
    defer sys.close(dir);
    try std.testing.expectError(error.Unexpected, b.setInterest(dir, .{}, .{ .read = true }, .{}));
    try std.testing.expectEqual(@as(u16, @backingInt(linux.E.PERM)), sys.last_errno);
}

test "io_uring wait honours its timeout" {
    var b = try testBackend();
    defer b.deinit();
    var out: [8]api.Event = undefined;
    const start_s = sys.monotonic_s();
    try std.testing.expectEqual(@as(usize, 0), try api.pollRetrying(&b, 20, &out));
    try std.testing.expect(sys.monotonic_s() - start_s >= 0.015);
}

test "a multishot poll is edge-triggered (why this backend re-arms one-shot polls)" {
    var b = try testBackend();
    defer b.deinit();
    const fd = try sys.eventfd();
    defer sys.close(fd);
    try signal(fd);
    const sqe = try b.ring.poll_add(UserData.of(.{ .fd = 0, .gen = 0, .kind = .control }), fd, linux.POLL.IN);
    sqe.len = linux.IORING_POLL_ADD_MULTI;
    var cqes: [4]linux.io_uring_cqe = undefined;
    _ = try b.ring.submit_and_wait(1);
    try std.testing.expectEqual(@as(u32, 1), try b.ring.copy_cqes(&cqes, 0));
    // Still readable (never drained), yet no second completion arrives.
    _ = try b.ring.enter(0, 0, linux.IORING_ENTER_GETEVENTS);
    try std.testing.expectEqual(@as(u32, 0), try b.ring.copy_cqes(&cqes, 0));
}

fn socketPair() ![2]sys.fd_t {
    var fds: [2]sys.fd_t = undefined;
    const flags = linux.SOCK.STREAM | linux.SOCK.CLOEXEC | linux.SOCK.NONBLOCK;
    const rc = linux.socketpair(linux.AF.UNIX, flags, 0, &fds);
    if (linux.errno(rc) != .SUCCESS) return error.Unexpected;
    return fds;
}

test "io_uring: a partly read socket is reported again; a hang-up wakes both ways" {
    var b = try testBackend();
    defer b.deinit();
    const pair = try socketPair();
    defer sys.close(pair[0]);
    var out: [8]api.Event = undefined;
    try b.setInterest(pair[0], .{}, .{ .read = true }, .{});
    _ = try sys.write(pair[1], "abcd");
    var buf: [2]u8 = undefined;
    for (0..2) |_| {
        try std.testing.expectEqual(@as(usize, 1), try api.pollRetrying(&b, 100, &out));
        try std.testing.expect(out[0].readable);
        try std.testing.expectEqual(@as(usize, 2), try sys.read(pair[0], &buf));
    }
    try std.testing.expectEqual(@as(usize, 0), try b.poll(0, &out));
    sys.close(pair[1]);
    try std.testing.expectEqual(@as(usize, 1), try api.pollRetrying(&b, 100, &out));
    try std.testing.expect(out[0].readable and out[0].writable);
}

test "io_uring: a re-arm waits for the next poll; a drained socket is not reported again" {
    var b = try testBackend();
    defer b.deinit();
    const pair = try socketPair();
    defer sys.close(pair[0]);
    defer sys.close(pair[1]);
    const other = try armedEventfd(&b);
    defer sys.close(other);
    var out: [8]api.Event = undefined;
    try b.setInterest(pair[0], .{}, .{ .read = true }, .{});
    _ = try sys.write(pair[1], "x");
    try std.testing.expectEqual(@as(usize, 1), try api.pollRetrying(&b, 100, &out));
    try std.testing.expect(out[0].fd == pair[0] and out[0].readable);
    // As a callback would, before the reader runs: dropping another fd's
    // interest enters the kernel at once (its poll must let go of the file).
    try b.setInterest(other, .{ .read = true }, .{}, .{});
    var buf: [4]u8 = undefined;
    try std.testing.expectEqual(@as(usize, 1), try sys.read(pair[0], &buf));
    // Drained: nothing to report, as epoll would report nothing.
    try std.testing.expectEqual(@as(usize, 0), try b.poll(0, &out));
    // Still armed: new data is reported.
    _ = try sys.write(pair[1], "y");
    try std.testing.expectEqual(@as(usize, 1), try api.pollRetrying(&b, 100, &out));
    try std.testing.expect(out[0].fd == pair[0] and out[0].readable);
}

test "io_uring: removing interest lets a closed socket really close" {
    var b = try testBackend();
    defer b.deinit();
    const pair = try socketPair();
    defer sys.close(pair[1]);
    var out: [8]api.Event = undefined;
    try b.setInterest(pair[0], .{}, .{ .read = true }, .{});
    try std.testing.expectEqual(@as(usize, 0), try b.poll(0, &out));
    try b.setInterest(pair[0], .{ .read = true }, .{}, .{});
    sys.close(pair[0]);
    // The peer sees end-of-file at once: the armed poll held no file.
    var buf: [1]u8 = undefined;
    try std.testing.expectEqual(@as(usize, 0), try sys.read(pair[1], &buf));
}

test "io_uring: a borrowed fd closed while watched really closes; its number's next file is not reported for it" {
    var b = try testBackend();
    defer b.deinit();
    const pair = try socketPair();
    defer sys.close(pair[1]);
    var out: [8]api.Event = undefined;
    const how: api.Arm = .{ .oneshot = true, .borrowed = true };
    try b.setInterest(pair[0], .{}, .{ .read = true }, how);
    try std.testing.expectEqual(@as(usize, 0), try b.poll(0, &out));
    sys.close(pair[0]); // closed behind the watcher's back
    // The peer sees the close at once: nothing in the ring holds the file.
    var buf: [1]u8 = undefined;
    try std.testing.expectEqual(@as(usize, 0), try sys.read(pair[1], &buf));
    // A new file under the same number, readable: not reported, as epoll
    // forgot the old registration with its file.
    const other = try socketPair();
    defer sys.close(other[0]);
    defer sys.close(other[1]);
    _ = try sys.write(other[1], "x");
    try std.testing.expectEqual(@as(usize, 0), try b.poll(0, &out));
    // Registered again, it is.
    try b.setInterest(other[0], .{}, .{ .read = true }, how);
    try std.testing.expectEqual(@as(usize, 1), try api.pollRetrying(&b, 1000, &out));
    try std.testing.expect(out[0].fd == other[0] and out[0].readable);
}

test "io_uring: borrowed fds' events that do not fit a pass come in the next ones, each once" {
    var b = try testBackend();
    defer b.deinit();
    var fds: [10]sys.fd_t = undefined;
    for (&fds) |*fd| fd.* = try sys.eventfd();
    defer for (fds) |fd| sys.close(fd);
    for (fds) |fd| try b.setInterest(fd, .{}, .{ .read = true }, .{ .oneshot = true, .borrowed = true });
    var out: [4]api.Event = undefined;
    try std.testing.expectEqual(@as(usize, 0), try b.poll(0, &out));
    var one: u64 = 1;
    for (fds) |fd| _ = try sys.write(fd, std.mem.asBytes(&one));
    var seen: [10]bool = @splat(false);
    var total: usize = 0;
    var passes: usize = 0;
    while (total < fds.len and passes < 100) : (passes += 1) {
        const n = try api.pollRetrying(&b, 1000, &out);
        for (out[0..n]) |ev| {
            const i = std.mem.indexOfScalar(sys.fd_t, &fds, ev.fd).?;
            try std.testing.expect(ev.readable and !seen[i]);
            seen[i] = true;
        }
        total += n;
    }
    try std.testing.expectEqual(fds.len, total);
    // One-shot: nothing more until re-armed.
    try std.testing.expectEqual(@as(usize, 0), try b.poll(0, &out));
}

test "io_uring: a poll armed by one thread completes while that thread sleeps" {
    var b = try testBackend();
    defer b.deinit();
    const fd = try armedEventfd(&b); // armed by this thread
    defer sys.close(fd);
    var out: [8]api.Event = undefined;
    const Other = struct {
        fn run(backend: *Backend, events: []api.Event, got: *usize, efd: sys.fd_t) void {
            const writer = std.Thread.spawn(.{}, signal, .{efd}) catch return;
            got.* = api.pollRetrying(backend, 2000, events) catch 0;
            writer.join();
        }
    };
    var got: usize = 0;
    const t = try std.Thread.spawn(.{}, Other.run, .{ &b, out[0..], &got, fd });
    t.join(); // sleeps in the kernel while the other thread waits on the ring
    try std.testing.expectEqual(@as(usize, 1), got);
}

test "io_uring: a completion whose task work waits is seen by a non-blocking pass" {
    var b = try testBackend();
    defer b.deinit();
    const fd = try armedEventfd(&b);
    defer sys.close(fd);
    var out: [8]api.Event = undefined;
    // Another thread makes the fd ready while this one stays in user space:
    // the poll's task work is queued here without a kick, so the ring shows
    // nothing until this thread enters the kernel.
    var done = std.atomic.Value(bool).init(false);
    const Writer = struct {
        fn run(efd: sys.fd_t, flag: *std.atomic.Value(bool)) void {
            signal(efd) catch {};
            flag.store(true, .release);
        }
    };
    const t = try std.Thread.spawn(.{}, Writer.run, .{ fd, &done });
    while (!done.load(.acquire)) std.atomic.spinLoopHint();
    const got = try b.poll(0, &out);
    t.join();
    try std.testing.expectEqual(@as(usize, 1), got);
}

test "io_uring: removing a poll armed by a sleeping thread lets the socket close" {
    var b = try testBackend();
    defer b.deinit();
    const pair = try socketPair();
    defer sys.close(pair[1]);
    // The armer sleeps in a blocking read of this eventfd until released.
    const rc = linux.eventfd(0, linux.EFD.CLOEXEC);
    if (linux.errno(rc) != .SUCCESS) return error.Unexpected;
    const release: sys.fd_t = @intCast(rc);
    defer sys.close(release);
    var armer_tid = std.atomic.Value(i32).init(0);
    const Armer = struct {
        fn run(backend: *Backend, fd: sys.fd_t, until: sys.fd_t, tid: *std.atomic.Value(i32)) void {
            var out: [8]api.Event = undefined;
            backend.setInterest(fd, .{}, .{ .read = true }, .{}) catch return tid.store(-1, .release);
            _ = backend.poll(0, &out) catch return tid.store(-1, .release);
            tid.store(linux.gettid(), .release);
            var buf: u64 = undefined;
            _ = linux.read(until, std.mem.asBytes(&buf), @sizeOf(u64));
        }
    };
    const t = try std.Thread.spawn(.{}, Armer.run, .{ &b, pair[0], release, &armer_tid });
    defer t.join();
    defer signal(release) catch {};
    var tid: i32 = 0;
    while (tid == 0) : (tid = armer_tid.load(.acquire)) std.atomic.spinLoopHint();
    if (tid < 0) return error.Unexpected;
    while (!try threadSleeps(tid)) _ = linux.sched_yield();
    try b.setInterest(pair[0], .{ .read = true }, .{}, .{});
    sys.close(pair[0]);
    // The cancelled poll drops its file in the armer's task work, which the
    // kernel runs by waking the armer briefly (its read then goes on): the
    // peer sees end-of-file while the armer is still held. A poll left
    // holding the file would leave the peer unreadable.
    var pfd = [_]linux.pollfd{.{ .fd = pair[1], .events = linux.POLL.IN, .revents = 0 }};
    try std.testing.expectEqual(@as(usize, 1), linux.poll(&pfd, 1, 1000));
    var buf: [1]u8 = undefined;
    try std.testing.expectEqual(@as(usize, 0), try sys.read(pair[1], &buf));
}

/// Whether thread `tid` of this process is in an interruptible sleep
/// (state S in /proc).
fn threadSleeps(tid: i32) !bool {
    var path_buf: [64]u8 = undefined;
    const path = try std.mem.printSentinel(&path_buf, "/proc/self/task/{d}/stat", .{tid}, 0);
    const rc = linux.open(path, .{ .ACCMODE = .RDONLY, .CLOEXEC = true }, 0);
    if (linux.errno(rc) != .SUCCESS) return error.Unexpected;
    const fd: sys.fd_t = @intCast(rc);
    defer sys.close(fd);
    var stat: [256]u8 = undefined;
    const n = try sys.read(fd, &stat);
    // "tid (comm) S ...": the state follows the last ')'.
    const close_paren = std.mem.lastIndexOfScalar(u8, stat[0..n], ')') orelse return error.Unexpected;
    return close_paren + 2 < n and stat[close_paren + 2] == 'S';
}

// ------------------------------------------------------ native receives

/// A backend with `n` receive buffers of `size` bytes taken from `store`.
fn recvBackend(store: []u8, n: u16, size: usize) !Backend {
    var b = try testBackend();
    errdefer b.deinit();
    if (!b.nativeRecv()) return error.SkipZigTest;
    for (0..n) |i| b.provideRecvBuffer(@intCast(i), store[i * size ..][0..size]);
    return b;
}

const recv_read: api.Arm = .{ .recv = true };

/// Waits for the next event, over as many passes as it takes (a pass may
/// reap only completions that report nothing, a cancellation's).
fn nextEvent(b: *Backend) !api.Event {
    var out: [1]api.Event = undefined;
    for (0..10) |_| {
        if (try api.pollRetrying(b, 1000, &out) == 1) return out[0];
    }
    return error.TestUnexpectedResult;
}

/// Waits for the next event, which must be a native receive.
fn nextRecv(b: *Backend) !api.Recv {
    const ev = try nextEvent(b);
    try std.testing.expect(ev.readable);
    return ev.recv orelse error.TestUnexpectedResult;
}

test "native receives: data lands in provided buffers, in order, then end of file" {
    var store: [4 * 8]u8 = undefined;
    var b = try recvBackend(&store, 4, 8);
    defer b.deinit();
    const pair = try socketPair();
    defer sys.close(pair[0]);
    try b.setInterest(pair[0], .{}, .{ .read = true }, recv_read);
    var got: std.ArrayList(u8) = .empty;
    defer got.deinit(std.testing.allocator);
    // 20 bytes in 8-byte buffers: one completion per buffer, re-provided
    // as each is consumed; no recv syscall and no re-arm in between.
    _ = try sys.write(pair[1], "abcdefghijklmnopqrst");
    while (got.items.len < 20) {
        const rv = try nextRecv(&b);
        try std.testing.expect(rv.res > 0);
        const part = store[@as(usize, rv.buffer) * 8 ..][0..@intCast(rv.res)];
        try got.appendSlice(std.testing.allocator, part);
        b.provideRecvBuffer(rv.buffer, store[@as(usize, rv.buffer) * 8 ..][0..8]);
    }
    try std.testing.expectEqualStrings("abcdefghijklmnopqrst", got.items);
    sys.close(pair[1]);
    try std.testing.expectEqual(@as(i32, 0), (try nextRecv(&b)).res);
    // Ended: nothing more until read interest is asked for anew.
    var out: [1]api.Event = undefined;
    try std.testing.expectEqual(@as(usize, 0), try b.poll(0, &out));
}

test "native receives: a pause still reports what was taken; reads pass to a poll after" {
    var store: [2 * 16]u8 = undefined;
    var b = try recvBackend(&store, 2, 16);
    defer b.deinit();
    const pair = try socketPair();
    defer sys.close(pair[0]);
    defer sys.close(pair[1]);
    try b.setInterest(pair[0], .{}, .{ .read = true }, recv_read);
    var out: [4]api.Event = undefined;
    try std.testing.expectEqual(@as(usize, 0), try b.poll(0, &out));
    // The receive takes the data into a completion the ring holds, unread,
    // when the reader pauses (a send's syscall runs the same task work).
    _ = try sys.write(pair[1], "first");
    _ = try b.ring.enter(0, 0, linux.IORING_ENTER_GETEVENTS);
    try std.testing.expect(b.ring.cq_ready() > 0);
    try b.setInterest(pair[0], .{ .read = true }, .{}, recv_read);
    const rv = try nextRecv(&b);
    try std.testing.expectEqualStrings("first", store[@as(usize, rv.buffer) * 16 ..][0..@intCast(rv.res)]);
    // Resumed as a polled reader: reported readable, no receive.
    _ = try sys.write(pair[1], "second");
    try b.setInterest(pair[0], .{}, .{ .read = true }, .{ .registered = true });
    const ev = try nextEvent(&b);
    try std.testing.expect(ev.readable and ev.recv == null);
    var buf: [16]u8 = undefined;
    try std.testing.expectEqualStrings("second", buf[0..try sys.read(pair[0], &buf)]);
}

test "native receives: forgetting an fd drops its data, recycles the buffer, frees the socket" {
    var store: [1 * 16]u8 = undefined;
    var b = try recvBackend(&store, 1, 16);
    defer b.deinit();
    const old = try socketPair();
    defer sys.close(old[1]);
    try b.setInterest(old[0], .{}, .{ .read = true }, recv_read);
    var out: [4]api.Event = undefined;
    try std.testing.expectEqual(@as(usize, 0), try b.poll(0, &out));
    _ = try sys.write(old[1], "stale");
    _ = try b.ring.enter(0, 0, linux.IORING_ENTER_GETEVENTS);
    try b.setInterest(old[0], .{ .read = true }, .{}, .{ .forget = true });
    sys.close(old[0]);
    // The socket really closed: its peer sees the hang-up now.
    var pfd = [_]linux.pollfd{.{ .fd = old[1], .events = linux.POLL.IN, .revents = 0 }};
    try std.testing.expectEqual(@as(usize, 1), linux.poll(&pfd, 1, 1000));
    try std.testing.expect(pfd[0].revents & linux.POLL.HUP != 0);
    // The stale completion is dropped, its (only) buffer back in the ring:
    // a new socket, likely under the same number, receives into it.
    const new = try socketPair();
    defer sys.close(new[0]);
    defer sys.close(new[1]);
    try std.testing.expectEqual(@as(usize, 0), try b.poll(0, &out));
    try b.setInterest(new[0], .{}, .{ .read = true }, recv_read);
    _ = try sys.write(new[1], "fresh");
    const rv = try nextRecv(&b);
    try std.testing.expectEqualStrings("fresh", store[0..@intCast(rv.res)]);
}

test "native receives: with no buffer free, ENOBUFS; the receive resumes once one is provided" {
    var store: [16]u8 = undefined;
    var b = try recvBackend(&store, 0, 16);
    defer b.deinit();
    const pair = try socketPair();
    defer sys.close(pair[0]);
    defer sys.close(pair[1]);
    try b.setInterest(pair[0], .{}, .{ .read = true }, recv_read);
    _ = try sys.write(pair[1], "waiting");
    try std.testing.expectEqual(-@as(i32, @backingInt(linux.E.NOBUFS)), (try nextRecv(&b)).res);
    b.provideRecvBuffer(0, &store);
    const rv = try nextRecv(&b);
    try std.testing.expectEqualStrings("waiting", store[0..@intCast(rv.res)]);
}

test "native receives: write interest stays a poll beside the receive" {
    var store: [16]u8 = undefined;
    var b = try recvBackend(&store, 1, 16);
    defer b.deinit();
    const pair = try socketPair();
    defer sys.close(pair[0]);
    defer sys.close(pair[1]);
    try b.setInterest(pair[0], .{}, .{ .read = true, .write = true }, recv_read);
    var out: [4]api.Event = undefined;
    try std.testing.expectEqual(@as(usize, 1), try api.pollRetrying(&b, 1000, &out));
    try std.testing.expect(out[0].writable and !out[0].readable and out[0].recv == null);
    try b.setInterest(pair[0], .{ .read = true, .write = true }, .{ .read = true }, recv_read);
    _ = try sys.write(pair[1], "x");
    const rv = try nextRecv(&b);
    try std.testing.expectEqual(@as(i32, 1), rv.res);
}

// ------------------------------------------------- features and fallbacks

test "io_uring: each optional feature left off, the backend still reports readiness and receives" {
    for (std.enums.values(Feature)) |f| {
        var b = Backend.initWithout(.initOne(f)) catch |err| switch (err) {
            error.Unsupported => return error.SkipZigTest,
            else => return err,
        };
        defer b.deinit();
        try std.testing.expect(!b.features().contains(f));
        var store: [2 * 16]u8 = undefined;
        for (0..2) |i| b.provideRecvBuffer(@intCast(i), store[i * 16 ..][0..16]);
        const pair = try socketPair();
        defer sys.close(pair[0]);
        defer sys.close(pair[1]);
        try b.setInterest(pair[0], .{}, .{ .read = true }, recv_read);
        _ = try sys.write(pair[1], "hello");
        const ev = try nextEvent(&b);
        try std.testing.expect(ev.fd == pair[0] and ev.readable);
        if (ev.recv) |rv| {
            try std.testing.expect(f != .recv);
            try std.testing.expectEqualStrings("hello", store[@as(usize, rv.buffer) * 16 ..][0..@intCast(rv.res)]);
        } else {
            var buf: [16]u8 = undefined;
            try std.testing.expectEqualStrings("hello", buf[0..try sys.read(pair[0], &buf)]);
        }
        // An eventfd, level-triggered, and forgotten.
        const efd = try armedEventfd(&b);
        defer sys.close(efd);
        try signal(efd);
        var out: [4]api.Event = undefined;
        try std.testing.expectEqual(@as(usize, 1), try api.pollRetrying(&b, 1000, &out));
        try std.testing.expect(out[0].fd == efd and out[0].readable);
        try b.setInterest(efd, .{ .read = true }, .{}, .{});
    }
}

test "io_uring: another thread moves a single-issuer ring; received data and readiness carry over" {
    var store: [4 * 16]u8 = undefined;
    var b = try recvBackend(&store, 4, 16);
    defer b.deinit();
    if (!b.features().contains(.single_issuer)) return error.SkipZigTest;
    const pair = try socketPair();
    defer sys.close(pair[0]);
    defer sys.close(pair[1]);
    const efd = try armedEventfd(&b);
    defer sys.close(efd);
    try b.setInterest(pair[0], .{}, .{ .read = true }, recv_read);
    var out: [4]api.Event = undefined;
    try std.testing.expectEqual(@as(usize, 0), try b.poll(0, &out));
    // Received into a completion the ring holds, unread, when the loop
    // passes to another thread; the eventfd turns ready meanwhile.
    _ = try sys.write(pair[1], "before");
    _ = try b.ring.enter(0, 0, linux.IORING_ENTER_GETEVENTS);
    try std.testing.expect(b.ring.cq_ready() > 0);
    try signal(efd);
    const Other = struct {
        fn run(backend: *Backend, got: *[2]api.Event, n: *usize) void {
            var events: [4]api.Event = undefined;
            for (0..10) |_| {
                const k = api.pollRetrying(backend, 1000, &events) catch return;
                for (events[0..k]) |ev| {
                    if (n.* < 2) got[n.*] = ev;
                    n.* += 1;
                }
                if (n.* >= 2) return;
            }
        }
    };
    var got: [2]api.Event = undefined;
    var n: usize = 0;
    const t = try std.Thread.spawn(.{}, Other.run, .{ &b, &got, &n });
    t.join();
    try std.testing.expect(!b.features().contains(.single_issuer));
    try std.testing.expectEqual(@as(usize, 2), n);
    var saw_recv = false;
    var saw_efd = false;
    for (got) |ev| {
        if (ev.recv) |rv| {
            try std.testing.expect(ev.fd == pair[0]);
            try std.testing.expectEqualStrings("before", store[@as(usize, rv.buffer) * 16 ..][0..@intCast(rv.res)]);
            b.provideRecvBuffer(rv.buffer, store[@as(usize, rv.buffer) * 16 ..][0..16]);
            saw_recv = true;
        } else {
            try std.testing.expect(ev.fd == efd and ev.readable);
            saw_efd = true;
        }
    }
    try std.testing.expect(saw_recv and saw_efd);
    try b.setInterest(efd, .{ .read = true }, .{}, .{});
    // The receive goes on in the new ring, from this thread too.
    _ = try sys.write(pair[1], "after");
    var rv = try nextRecv(&b);
    while (rv.res < 0) rv = try nextRecv(&b); // ENOBUFS cannot happen: 3 left
    try std.testing.expectEqualStrings("after", store[@as(usize, rv.buffer) * 16 ..][0..@intCast(rv.res)]);
}

test "io_uring: a thread the single-issuer ring refuses (EEXIST) though it looks like the issuer moves it too" {
    // Set up by a thread that then exits; this thread passes for it (as a
    // new thread on the exited one's thread pointer, or a forked child,
    // would): the kernel's EEXIST moves the ring.
    const Maker = struct {
        fn run(out: *Backend, err: *?anyerror) void {
            out.* = Backend.init() catch |e| {
                err.* = e;
                return;
            };
        }
    };
    var b: Backend = undefined;
    var failed: ?anyerror = null;
    const t = try std.Thread.spawn(.{}, Maker.run, .{ &b, &failed });
    t.join();
    if (failed) |err| return if (err == error.Unsupported) error.SkipZigTest else err;
    defer b.deinit();
    if (b.issuer == null) return error.SkipZigTest;
    b.issuer = threadPointer();
    const pair = try socketPair();
    defer sys.close(pair[0]);
    defer sys.close(pair[1]);
    try b.setInterest(pair[0], .{}, .{ .read = true }, .{});
    _ = try sys.write(pair[1], "x");
    const ev = try nextEvent(&b);
    try std.testing.expect(ev.fd == pair[0] and ev.readable);
    try std.testing.expect(!b.features().contains(.single_issuer));
    // Dropping interest enters the new ring: the socket really closes.
    try b.setInterest(pair[0], .{ .read = true }, .{}, .{});
}
