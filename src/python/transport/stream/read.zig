//! Where received bytes go: a stream transport's read side. The reactor's
//! readiness (`dispatch`: native receives first, then a readable event,
//! then a writable one, which write.zig handles), native receives on
//! io_uring (`onRecv`: the kernel receives into the loop's buffers,
//! transport/recvpool.zig, and `deliverRx` hands them on), and the reads of the
//! readiness path: into the loop's lent buffer or its spare for
//! `data_received`, into the protocol's buffer for a `BufferedProtocol`
//! (`readBuffered`), and the peer's EOF (`readEof`).
//!
//! The object, its plumbing and its public surface are transport/stream.zig's.
const std = @import("std");
const core = @import("core");
const py = @import("../../capi/py.zig");
const c = py.c;
const Obj = py.Obj;
const loop_mod = @import("../../loop/loop.zig");
const recvpool = @import("../recvpool.zig");
const sockio = @import("../../sock/io.zig");
const tls = @import("../tls.zig");
const transport_object = @import("../object.zig");
const transport = @import("../stream.zig");
const write = @import("write.zig");
const Transport = transport.Transport;
const Inner = transport.Inner;
const object = transport.object;
const shared = object.methods;
const common = &transport_object.names;
const names = &transport.names;
const pendingToRun = transport.pendingToRun;
const fatalFromPending = transport.fatalFromPending;
const fatalErrno = transport.fatalErrno;
const updateInterest = transport.updateInterest;
const writeReady = write.writeReady;
const uncorkAfter = write.uncorkAfter;
const closeTransport = write.closeTransport;

const gpa = std.heap.c_allocator;

/// The native receives of one transport between their wait and their
/// delivery: nearly always one, kept inline, so that an idle connection
/// holds no allocation for them; a second one moves both into a list, freed
/// once they are delivered.
pub const RxQueue = struct {
    /// The receives: in `single` (`cap` 1) or in an allocation (`cap` more).
    items: []Rx = &.{},
    cap: usize = 0,
    single: [1]Rx = undefined,

    pub fn len(q: *const RxQueue) usize {
        return q.items.len;
    }

    fn append(q: *RxQueue, item: Rx) error{OutOfMemory}!void {
        if (q.cap == 0) {
            q.items = q.single[0..0];
            q.cap = 1;
        }
        if (q.items.len == q.cap) {
            const more = try gpa.alloc(Rx, @max(4, q.cap * 2));
            @memcpy(more[0..q.items.len], q.items);
            q.release();
            q.items = more[0..q.items.len];
            q.cap = more.len;
        }
        q.items.len += 1;
        q.items[q.items.len - 1] = item;
    }

    /// Empties the queue, freeing an allocation (an idle connection keeps
    /// none).
    pub fn clear(q: *RxQueue) void {
        q.release();
        q.items = q.single[0..0];
        q.cap = 1;
    }

    fn release(q: *RxQueue) void {
        if (q.cap > 1) gpa.free(q.items.ptr[0..q.cap]);
    }
};

/// One native receive (io_uring) between the wait that reported it and
/// its delivery: data (`res` bytes in `data`), end of file (0) or an error
/// (a negated errno).
const Rx = struct {
    res: i32,
    /// The loop's buffer the kernel received into, sized to `res`; ours.
    data: ?*Obj = null,
    /// The buffer id `data` still answers to in the loop's pool, or null
    /// once the pool has a new object for it (a paused reader's, see
    /// `deliverRx`).
    id: ?u16 = null,
    /// Bytes of `data` a BufferedProtocol was handed already: it paused
    /// reading, or handed the transport to another protocol, part way
    /// through (`feedBuffered`). The rest goes first when reading resumes.
    fed: u32 = 0,
};

// ------------------------------------------------------------ readiness

/// A Python error under `object.dispatchReady` (the protocol's context).
pub const dispatchFailed = pendingToRun;

pub fn dispatch(t: *Transport, ev: core.reactor.Event) core.RunError!void {
    const in = t.inner.?;
    // What native receives took comes first: a readable event of the same
    // pass is a poll's, armed only after the receive's last completion.
    if (in.rxPending()) try deliverRx(t);
    if (ev.readable and in.w.interest.read and !in.rxPending()) {
        const was_big = in.big_reads;
        try readReady(t);
        // Reads that went the usual way because they were large go back
        // to native receives once one is small again.
        if (was_big and !in.big_reads) updateInterest(t);
    }
    if (ev.writable and in.attached and in.w.interest.write and in.conn_lost == 0) try writeReady(t);
}

/// Takes a copy of the current context for the read side (see `Inner.context`).
pub fn captureContext(in: *Inner) bool {
    if (in.context_fixed) return true;
    const ctx = c.PyContext_CopyCurrent() orelse return false;
    py.xdecref(in.context);
    in.context = ctx;
    return true;
}

// ------------------------------------------------------ native receives

/// The reactor's `recv` event (io_uring; see `Inner.w.recv`): the kernel
/// received into one of the loop's buffers (transport/recvpool.zig). Queued in order
/// with the transport, as `shared.onReady` queues readiness, and delivered
/// by `deliverRx`.
pub fn onRecv(in: *Inner, rv: core.Recv) core.RunError!void {
    const l = object.loopOf(in.owner);
    if (rv.res == -@as(i32, @backingInt(sockio.E.NOBUFS))) {
        // Nothing received; the backend receives again on its next wait.
        l.recv_pool.grow(&l.reactor);
        return;
    }
    var item: Rx = .{ .res = rv.res };
    if (rv.res > 0) {
        const data = l.recv_pool.take(rv.buffer);
        sizeBytes(data, @intCast(rv.res));
        item.data = data;
        item.id = rv.buffer;
    }
    in.rx.append(item) catch {
        if (item.data) |d| returnRx(l, item.id, d);
        return error.Aborted;
    };
    shared.queueIo(in) catch return error.Aborted;
}

/// Delivers the receives in order while the protocol is reading. Those
/// left (the protocol paused) keep their data for resume_reading, their
/// buffer ids back in the ring with new objects; a closing transport's
/// are dropped, as asyncio's close() leaves unread data in the socket.
fn deliverRx(t: *Transport) core.RunError!void {
    const in = t.inner.?;
    const delivered = deliverRxItems(t);
    const l = object.loopOf(t);
    if (!in.rxPending()) {
        in.rx.clear();
        in.rx_head = 0;
    } else if (in.closing or in.read_eof) {
        releaseRx(in, l);
    } else if (in.reading()) {
        // A callback raised KeyboardInterrupt or SystemExit out of the
        // loop: the rest goes on the next run, as asyncio's reader, still
        // registered, reads it then.
        shared.queueIo(in) catch {};
    } else if (l.has_reactor) {
        for (in.rx.items[in.rx_head..]) |*item| if (item.id) |id| {
            l.recv_pool.refill(&l.reactor, id);
            item.id = null;
        };
    }
    return delivered;
}

fn deliverRxItems(t: *Transport) core.RunError!void {
    const in = t.inner.?;
    while (in.rxPending() and in.reading()) {
        // Taken off the queue first: a close() in the protocol's callback
        // releases what is queued (`releaseRx`), not this one.
        const index = in.rx_head;
        const items = in.rx.items;
        const item = items[index];
        if (items.len - index > 1) {
            const joined = joinable(in, index);
            if (joined > 1) {
                try deliverJoined(t, index, joined);
                continue;
            }
        }
        in.rx_head += 1;
        if (item.res > 0) {
            try deliverReceived(t, index, item);
        } else if (item.res == 0) {
            try readEof(t);
        } else {
            try fatalErrno(t, @intCast(-item.res), names.msg_read);
        }
    }
}

/// How many receives from `index` on go to a plain protocol as one
/// `data_received` (`deliverJoined`): consecutive data, none handed over
/// in part, up to what one read on the readiness path takes.
fn joinable(in: *Inner, index: usize) usize {
    if (in.buffered) return 0;
    var size: usize = 0;
    var n: usize = 0;
    for (in.rx.items[index..]) |item| {
        if (item.res <= 0 or item.fed != 0) break;
        const len: usize = @intCast(item.res);
        if (size + len > read_spare_bytes) break;
        size += len;
        n += 1;
    }
    return n;
}

/// `count` receives from `index` on (see `joinable`) to the protocol in
/// one `data_received`, as one read of the readiness path would bring
/// them: copied into the loop's spare, lent as `readReady` lends it (a
/// protocol that keeps data gets an exact-size copy), their buffers back
/// to the pool at once. A bulk transfer (a database's COPY) then reaches
/// the protocol in as few calls as on epoll, where the receives a pass
/// brings, one per 16 KiB buffer, would each make a call.
fn deliverJoined(t: *Transport, index: usize, count: usize) core.RunError!void {
    const in = t.inner.?;
    const l = object.loopOf(t);
    const items = in.rx.items[index..][0..count];
    var size: usize = 0;
    var full = false;
    for (items) |item| {
        size += @intCast(item.res);
        full = full or item.res == recvpool.buffer_bytes;
    }
    const lend = !in.keeps_data;
    const data = (if (lend)
        takeBuffer(&l.read_spare, read_spare_bytes)
    else
        c.PyBytes_FromStringAndSize(null, @intCast(size))) orelse {
        // Dropped with the connection, which fails.
        in.rx_head = index + count;
        for (items) |item| returnRx(l, item.id, item.data.?);
        return fatalFromPending(t, names.msg_read);
    };
    const dst: [*]u8 = @ptrCast(c.PyBytes_AsString(data));
    var at: usize = 0;
    for (items) |item| {
        const part = bytesOf(item.data.?);
        @memcpy(dst[at..][0..part.len], part);
        at += part.len;
        returnRx(l, item.id, item.data.?);
    }
    in.rx_head = index + count;
    // As `deliverReceived`: full buffers mean more may be queued; large
    // reads go the usual way.
    if (full and !in.big_reads) {
        in.big_reads = true;
        updateInterest(t);
    }
    if (!lend) return deliver(t, data);
    sizeBytes(data, size);
    py.incref(data); // keeps it alive through the call, to see if it came back
    const delivered = deliver(t, data);
    const flushed = uncorkAfter(t, delivered);
    if (c.Py_REFCNT(data) > 1) in.keeps_data = true;
    returnSpare(l, data);
    try delivered;
    if (!flushed) try pendingToRun(t);
}

/// One native receive (taken from `in.rx.items[index]`) to the protocol,
/// as `readLent` delivers a small read: the loop's buffer itself, taken
/// back if the protocol kept no reference; a protocol that keeps data gets
/// copies of the exact size. A BufferedProtocol that takes only part of it
/// (see `Rx.fed`) leaves the rest first in the queue.
fn deliverReceived(t: *Transport, index: usize, item: Rx) core.RunError!void {
    const in = t.inner.?;
    const l = object.loopOf(t);
    const data = item.data.?;
    const n: usize = @intCast(item.res);
    // A full buffer means more may be queued: large reads go the usual
    // way (one data_received per read of up to 256 KiB).
    if (n == recvpool.buffer_bytes and !in.big_reads and item.fed == 0) {
        in.big_reads = true;
        updateInterest(t);
    }
    if (in.buffered) {
        var fed: usize = item.fed;
        const result = feedBuffered(t, bytesOf(data), &fed);
        // Back to the head of the queue, unless a close() released the
        // queue meanwhile (only the reactor appends, between passes).
        if (fed < n and in.rx_head == index + 1) {
            in.rx_head = index;
            in.rx.items[index].fed = @intCast(fed);
        } else {
            returnRx(l, item.id, data);
        }
        return result;
    }
    if (item.fed == 0) return deliverPlain(t, item);
    // The rest of what a BufferedProtocol left, to the plain protocol that
    // replaced it.
    const rest = bytesOf(data)[item.fed..];
    const copy = c.PyBytes_FromStringAndSize(rest.ptr, @intCast(rest.len));
    returnRx(l, item.id, data);
    return deliver(t, copy orelse return fatalFromPending(t, names.msg_read));
}

/// A whole native receive to a plain protocol (see `deliverReceived`).
fn deliverPlain(t: *Transport, item: Rx) core.RunError!void {
    const in = t.inner.?;
    const l = object.loopOf(t);
    const data = item.data.?;
    const n: usize = @intCast(item.res);
    const id = item.id orelse return deliver(t, data);
    if (in.keeps_data) {
        const copy = c.PyBytes_FromStringAndSize(c.PyBytes_AsString(data), @intCast(n));
        returnRx(l, id, data);
        return deliver(t, copy orelse return fatalFromPending(t, names.msg_read));
    }
    py.incref(data); // keeps it alive through the call, to see if it came back
    const delivered = deliver(t, data);
    const flushed = uncorkAfter(t, delivered);
    if (c.Py_REFCNT(data) > 1) in.keeps_data = true;
    returnRx(l, id, data);
    try delivered;
    if (!flushed) try pendingToRun(t);
}

/// The error a receive brought that waits, undelivered, for the protocol
/// to read again (a paused reader's: see `deliverRx`), if any. The kernel
/// reported the socket's error to that receive; a readiness loop would
/// still find it pending on the socket, for its next send.
pub fn waitingError(in: *const Inner) ?u16 {
    for (in.rx.items[in.rx_head..]) |item| {
        if (item.res < 0) return @intCast(-item.res);
    }
    return null;
}

/// Lets go of a receive's `data` (consumed): back to the pool under its
/// buffer id while it has one and the loop still has its reactor.
fn returnRx(l: *loop_mod.Loop, id: ?u16, data: *Obj) void {
    if (id != null and l.has_reactor) l.recv_pool.give(&l.reactor, id.?, data) else py.decref(data);
}

fn bytesOf(b: *Obj) []const u8 {
    const p: [*]const u8 = @ptrCast(c.PyBytes_AsString(b));
    return p[0..@intCast(c.PyBytes_Size(b))];
}

/// Received bytes to a BufferedProtocol (one that replaced the protocol
/// while receives were in flight: start_tls's): copied into its buffers,
/// get_buffer() and buffer_updated() as many times as it takes, while it
/// is reading and still the protocol: a buffer_updated() that pauses
/// reading, closes the transport or hands it to a plain protocol gets no
/// more. `fed.*`: the bytes handed over so far, advanced as they go (also
/// when a callback aborts the loop).
fn feedBuffered(t: *Transport, bytes: []const u8, fed: *usize) core.RunError!void {
    while (fed.* < bytes.len) {
        const in = t.inner.?;
        if (!in.reading() or !in.buffered) return;
        var view: c.Py_buffer = undefined;
        if (!try getBuffer(t, &view)) return;
        const n = @min(bytes.len - fed.*, @as(usize, @intCast(view.len)));
        const dst: [*]u8 = @ptrCast(view.buf);
        @memcpy(dst[0..n], bytes[fed.*..][0..n]);
        c.PyBuffer_Release(&view);
        fed.* += n;
        try bufferUpdated(t, n);
    }
}

/// Drops the receives not delivered, their buffers back to the pool.
pub fn releaseRx(in: *Inner, l: *loop_mod.Loop) void {
    for (in.rx.items[in.rx_head..]) |item| {
        returnRx(l, item.id, item.data orelse continue);
    }
    in.rx.clear();
    in.rx_head = 0;
}

// ---------------------------------------------------------------- reads

/// A connection whose reads are small, and whose protocol has kept nothing
/// it was handed, reads into the loop's lent buffer (`readLent`). Any other
/// read takes up to `read_spare_bytes` (one data_received per message
/// of up to that size, where a 64 KiB chunk took two calls, two reads and
/// two writes for a 100 KiB echo), into a `bytes` the loop keeps for all
/// its stream transports (`Loop.read_spare`). What arrived reaches
/// data_received as a `bytes`:
/// - up to `read_exact_bytes`: copied into a new object of its exact size,
///   and the spare stays for the next read (the connection goes back to
///   the lent buffer, unless its protocol keeps data);
/// - more: the spare itself, its size set to what arrived: no copy and no
///   allocation. It returns to the loop when the protocol kept no
///   reference (a StreamReader copies into its own buffer; so do HTTP
///   parsers). A protocol that did keep it holds a 256 KiB allocation for
///   its data, once: from then on its transport reads as in `readExact`
///   (an object of the exact size) up to `read_copy_bytes`, and hands
///   over the spare only beyond that (at most twice the data in memory).
/// Not a fresh big object per read: glibc serves 256 KiB with mmap
/// (an mmap and a munmap per read), and a ~100 KiB object allocated and
/// freed per read makes glibc trim and regrow its heap around it (brk and
/// page faults: 0.7 brk and 26 faults per 100 KiB streams echo, measured
/// with strace and /proc; 0.3 brk and 9 faults with the spare).
const read_spare_bytes = 256 * 1024;
const read_copy_bytes = read_spare_bytes / 2;

fn readReady(t: *Transport) core.RunError!void {
    const in = t.inner.?;
    if (in.buffered) return readBuffered(t);
    if (!in.big_reads and !in.keeps_data) return readLent(t);
    // The rest of a message the lent buffer split keeps the connection on
    // the spare, however short: messages of 16-32 KiB take one read each.
    const rest = in.split;
    in.split = false;
    if (in.big_reads and in.keeps_data) {
        if (try readExact(t)) return;
    }
    const l = py.cast(loop_mod.Loop, t.loop.?);
    const spare = takeBuffer(&l.read_spare, read_spare_bytes) orelse
        return fatalFromPending(t, names.msg_read);
    const buf: [*]u8 = @ptrCast(c.PyBytes_AsString(spare));
    const got = sockio.recv(in.sysFd(), buf[0..read_spare_bytes]);
    const rc: usize = switch (got) {
        .done => |n| n,
        else => 0,
    };
    if (!rest) in.big_reads = rc > read_exact_bytes;
    const copy_max: usize = if (in.keeps_data) read_copy_bytes else read_exact_bytes;
    if (rc <= copy_max) {
        const data = if (rc > 0) c.PyBytes_FromStringAndSize(buf, @intCast(rc)) else null;
        returnSpare(l, spare);
        switch (got) {
            .done => {},
            .would_block => return,
            .failed => |errno| return fatalErrno(t, errno, names.msg_read),
        }
        if (rc == 0) return readEof(t);
        return deliver(t, data orelse return fatalFromPending(t, names.msg_read));
    }
    sizeBytes(spare, rc);
    py.incref(spare); // keeps it alive through the call, to see if it came back
    const delivered = deliver(t, spare);
    // `in` outlives the call: dispatchReady holds the transport.
    if (c.Py_REFCNT(spare) > 1) in.keeps_data = true;
    returnSpare(l, spare);
    return delivered;
}

/// Reads of more than this are not worth copying out of the spare when the
/// kernel can tell their size first.
const read_exact_bytes = 16 * 1024;

/// The lent buffer's size: what one small read may bring.
const read_lent_bytes = read_exact_bytes;

/// A read on a connection whose reads are small and whose protocol has
/// kept nothing it was handed: into a `bytes` of `read_lent_bytes` the loop
/// keeps for this (`Loop.read_lent`), handed to data_received with its size
/// set to what arrived: no allocation and no copy (glibc's malloc and free
/// of a 1 KiB object, too big for its per-thread cache, and the copy: a
/// 1 KiB echo went from 3.20k to 2.43k instructions per request). It
/// returns to the loop when the protocol kept no reference, once the
/// writes data_received held for the end of this callback (`hold`) have
/// gone. A protocol that keeps it keeps one 16 KiB allocation, once: from
/// then on its connection gets exact-size copies (`keeps_data`). A read
/// that fills the buffer means more may be queued: the next read takes it
/// into the spare (`big_reads`, `split`).
fn readLent(t: *Transport) core.RunError!void {
    const in = t.inner.?;
    const l = py.cast(loop_mod.Loop, t.loop.?);
    const lent = takeBuffer(&l.read_lent, read_lent_bytes) orelse
        return fatalFromPending(t, names.msg_read);
    const buf: [*]u8 = @ptrCast(c.PyBytes_AsString(lent));
    const rc = switch (sockio.recv(in.sysFd(), buf[0..read_lent_bytes])) {
        .done => |n| n,
        .would_block => return giveBack(l, &l.read_lent, lent, read_lent_bytes),
        .failed => |errno| {
            giveBack(l, &l.read_lent, lent, read_lent_bytes);
            return fatalErrno(t, errno, names.msg_read);
        },
    };
    if (rc == 0) {
        giveBack(l, &l.read_lent, lent, read_lent_bytes);
        return readEof(t);
    }
    in.big_reads = rc == read_lent_bytes;
    in.split = in.big_reads;
    sizeBytes(lent, rc);
    py.incref(lent); // keeps it alive through the call, to see if it came back
    const delivered = deliver(t, lent);
    // Held writes of it (an echo's) go now, as they would when this
    // callback returns: what still holds it after that is the protocol.
    const flushed = uncorkAfter(t, delivered);
    // `in` outlives the call: dispatchReady holds the transport.
    if (c.Py_REFCNT(lent) > 1) in.keeps_data = true;
    giveBack(l, &l.read_lent, lent, read_lent_bytes);
    try delivered;
    if (!flushed) try pendingToRun(t);
}

/// On a connection whose reads are large and whose protocol keeps what it
/// is handed, one ioctl(FIONREAD) (a fraction
/// of a microsecond) gives the size of what is queued, and a `bytes` of
/// exactly that size takes it with no copy (a copy of 100 KiB costs a few
/// microseconds). True when it read (or failed the transport); false to
/// read the usual way: little or nothing queued (EOF and errors are then
/// found by the read), or more than `read_copy_bytes` (the spare).
fn readExact(t: *Transport) core.RunError!bool {
    const in = t.inner.?;
    const n = sockio.bytesReadable(in.sysFd()) orelse return false;
    if (n <= read_exact_bytes or n > read_copy_bytes) return false;
    var data: ?*Obj = c.PyBytes_FromStringAndSize(null, @intCast(n)) orelse {
        try fatalFromPending(t, names.msg_read);
        return true;
    };
    const buf: [*]u8 = @ptrCast(c.PyBytes_AsString(data));
    const rc = switch (sockio.recv(in.sysFd(), buf[0..n])) {
        .done => |got| got,
        .would_block => {
            py.decref(data.?);
            return true;
        },
        .failed => |errno| {
            py.decref(data.?);
            try fatalErrno(t, errno, names.msg_read);
            return true;
        },
    };
    if (rc == 0) {
        // Data was queued a moment ago: only a shutdown in between gets here.
        py.decref(data.?);
        try readEof(t);
        return true;
    }
    if (rc < n and c._PyBytes_Resize(&data, @intCast(rc)) < 0) {
        try fatalFromPending(t, names.msg_read);
        return true;
    }
    try deliver(t, data.?);
    return true;
}

/// Takes the loop's read buffer out of `slot`, or makes one of `size` if
/// it is out: ours (one reference) until `giveBack`. Null with MemoryError.
fn takeBuffer(slot: *?*Obj, size: usize) ?*Obj {
    const buf = slot.* orelse return c.PyBytes_FromStringAndSize(null, @intCast(size));
    slot.* = null;
    return buf;
}

/// Gives the spare back to the loop (see `giveBack`).
fn returnSpare(l: *loop_mod.Loop, spare: *Obj) void {
    giveBack(l, &l.read_spare, spare, read_spare_bytes);
}

/// Puts a read buffer of `size` back in its `slot` if nobody else holds it
/// (and the slot is empty by now), else lets go of it; consumes one
/// reference.
fn giveBack(l: *loop_mod.Loop, slot: *?*Obj, buf: *Obj, size: usize) void {
    if (slot.* == null and c.Py_REFCNT(buf) == 1 and l.has_reactor) {
        sizeBytes(buf, size);
        slot.* = buf;
        return;
    }
    py.decref(buf);
}

/// Sets a `bytes` object's length within its allocation (at most
/// `read_spare_bytes`), as `_PyBytes_Resize` does in place: the NUL
/// terminator follows the data, and the cached hash is forgotten.
fn sizeBytes(b: *Obj, len: usize) void {
    std.debug.assert(len <= read_spare_bytes);
    py.setBytesSize(b, len);
}

/// `protocol.data_received(data)`, consuming `data`.
fn deliver(t: *Transport, data: *Obj) core.RunError!void {
    defer py.decref(data);
    const r = py.callMethod(t.protocol.?, common.data_received, .{data});
    if (r) |o| py.decref(o) else try fatalFromPending(t, names.msg_data);
}

/// `protocol.get_buffer(-1)` as a writable, non-empty view (released by
/// the caller); false once the failure went to `_fatal_error`.
fn getBuffer(t: *Transport, view: *c.Py_buffer) core.RunError!bool {
    const bo = if (t.inner.?.fixed_buffer) |fixed| py.newref(fixed) else bo: {
        const hint = c.PyLong_FromLong(-1) orelse {
            try pendingToRun(t);
            return false;
        };
        const buf_obj = py.callMethod(t.protocol.?, common.get_buffer, .{hint});
        py.decref(hint);
        break :bo buf_obj orelse {
            try fatalFromPending(t, names.msg_get_buffer);
            return false;
        };
    };
    defer py.decref(bo);
    // As asyncio's `_read_ready__get_buffer`: `len(buf)` belongs to the
    // get_buffer() step; a buffer recv_into() cannot write to (bytes, say)
    // is a read error with recv_into's TypeError.
    const len = c.PyObject_Length(bo);
    if (len <= 0) {
        if (len == 0) c.PyErr_SetString(c.PyExc_RuntimeError, "get_buffer() returned an empty buffer");
        try fatalFromPending(t, names.msg_get_buffer);
        return false;
    }
    if (c.PyObject_GetBuffer(bo, view, c.PyBUF_WRITABLE) < 0) {
        c.PyErr_Clear();
        _ = c.PyErr_Format(c.PyExc_TypeError, "recv_into() argument 1 must be read-write bytes-like object, not %.50s", c.Py_TYPE(bo).*.tp_name);
        try fatalFromPending(t, names.msg_read);
        return false;
    }
    if (view.len == 0) {
        c.PyBuffer_Release(view);
        c.PyErr_SetString(c.PyExc_RuntimeError, "get_buffer() returned an empty buffer");
        try fatalFromPending(t, names.msg_get_buffer);
        return false;
    }
    return true;
}

/// `protocol.buffer_updated(n)`; for zloop's TLS protocol, the record
/// path (transport/tls.zig) where it runs.
fn bufferUpdated(t: *Transport, n: usize) core.RunError!void {
    if (t.inner.?.fixed_buffer) |fixed| {
        var view: c.Py_buffer = undefined;
        if (c.PyObject_GetBuffer(fixed, &view, c.PyBUF_SIMPLE) < 0) return pendingToRun(t);
        const data: [*]const u8 = @ptrCast(view.buf);
        const proto = py.newref(t.protocol.?);
        const outcome = tls.received(proto, data[0..@min(n, @as(usize, @intCast(view.len)))]);
        py.decref(proto);
        c.PyBuffer_Release(&view);
        switch (outcome) {
            .python => {},
            .done => return,
            .raised => return fatalFromPending(t, names.msg_buffer_updated),
        }
    }
    const arg = c.PyLong_FromSize_t(n) orelse return pendingToRun(t);
    defer py.decref(arg);
    const r = py.callMethod(t.protocol.?, common.buffer_updated, .{arg});
    if (r) |o| py.decref(o) else try fatalFromPending(t, names.msg_buffer_updated);
}

fn readBuffered(t: *Transport) core.RunError!void {
    var view: c.Py_buffer = undefined;
    if (!try getBuffer(t, &view)) return;
    const buf: [*]u8 = @ptrCast(view.buf);
    const got = sockio.recv(t.inner.?.sysFd(), buf[0..@intCast(view.len)]);
    c.PyBuffer_Release(&view);
    const rc = switch (got) {
        .done => |n| n,
        .would_block => return,
        .failed => |errno| return fatalErrno(t, errno, names.msg_read),
    };
    if (rc == 0) return readEof(t);
    return bufferUpdated(t, rc);
}

/// The peer closed its side: stop reading; `eof_received()` returning a
/// true value keeps the transport half-open, anything else closes it.
fn readEof(t: *Transport) core.RunError!void {
    object.debugLog(t, common.received_eof);
    const in = t.inner.?;
    in.read_eof = true;
    updateInterest(t);
    const r = py.callMethod(t.protocol.?, common.eof_received, .{}) orelse
        return fatalFromPending(t, names.msg_eof);
    const keep_open = c.PyObject_IsTrue(r);
    py.decref(r);
    if (keep_open < 0) return fatalFromPending(t, names.msg_eof);
    if (keep_open == 0 and !closeTransport(t)) try pendingToRun(t);
}
