//! Where a write ends up: a stream transport's write side. write() and
//! writelines() try the socket first and queue only what it does not take
//! (`WriteQueue`: by reference or copied), small writes from a callback
//! are held and sent together when it returns (`Cork`, `hold`, `uncork`),
//! the writable event flushes the queue (`writeReady`) or hands over to
//! loop.sendfile(), and write flow control, write_eof(), close() and
//! abort() act on what waits to be sent.
//!
//! The object, its plumbing and its public surface are transport/stream.zig's.
const std = @import("std");
const core = @import("core");
const py = @import("../../capi/py.zig");
const c = py.c;
const Obj = py.Obj;
const trim = @import("../../loop/trim.zig");
const sockio = @import("../../sock/io.zig");
const transport_object = @import("../object.zig");
const transport = @import("../stream.zig");
const read = @import("read.zig");
const Transport = transport.Transport;
const Inner = transport.Inner;
const object = transport.object;
const shared = object.methods;
const common = &transport_object.names;
const names = &transport.names;
const innerOrRaise = object.innerOrRaise;
const pendingToRun = transport.pendingToRun;
const fatal = transport.fatal;
const fatalErrno = transport.fatalErrno;
const callSelf = transport.callSelf;
const succeeded = transport.succeeded;
const scheduleConnectionLost = transport.scheduleConnectionLost;
const updateInterest = transport.updateInterest;
const maybePause = transport.maybePause;
const maybeResume = transport.maybeResume;

const gpa = std.heap.c_allocator;

// ------------------------------------------------------------ the queue

/// After this many write() calls on a lost connection, warn (asyncio's
/// `constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES`).
const log_threshold_conn_lost = 5;

/// A write's unsent rest of at least this many bytes, from an object whose
/// bytes cannot change (see `immutableOwner`), is kept by reference: a
/// 300 MB `bytes` the socket does not take costs no copy and no memory.
/// Shorter rests are copied into `copy_block_bytes` blocks: a copy this
/// small (about a microsecond) costs no more than a segment of its own
/// (a reference, an iovec, its share of the kernel's per-iovec work), and
/// it keeps many small writes to a few iovecs: a buffer at the default
/// 64 KiB high-water mark spans about five blocks.
const ref_min_bytes = 16 * 1024;
/// The least size of a copy block (a longer mutable rest gets a block of
/// its own length). Small enough to waste little per idle transport.
const copy_block_bytes = 16 * 1024;
/// iovecs per sendmsg (Linux's `UIO_MAXIOV`, the BSDs' `IOV_MAX`: 1024);
/// 16 KiB of stack.
const iov_max = sockio.iov_max;

/// Write coalescing. A write() of an exact `bytes`, made from a loop
/// callback while nothing is buffered, is not sent at once: up to
/// `cork_slots` of them, `cork_max_bytes` in all, are held by reference and
/// go out in one send as soon as the callback returns (a reactor flush,
/// before the next callback runs). uvicorn writes a response's head and
/// its body separately: one sendmsg per response instead of two sendto.
///
/// asyncio sends in write() itself; what a program can see of that is
/// kept. Every method that reads or changes the write side sends what is
/// held first (get_write_buffer_size, is_closing, writelines, write_eof,
/// close, abort, the limits, sendfile, the socket from get_extra_info;
/// StreamWriter.drain() asks is_closing()), and the held
/// bytes never exceed the high-water mark, so pause_writing() comes from
/// the same write() it comes from on asyncio: the rest left by a short
/// send of what was held is at most the held bytes, below the mark. What
/// differs is when the bytes reach the kernel within one callback: at its
/// end, not at each write().
const cork_slots = 4;
const cork_max_bytes = 16 * 1024;

pub const Cork = struct {
    n: usize = 0,
    size: usize = 0,
    iov: [cork_slots]sockio.iovec_const = undefined,
    /// The `bytes` each iovec points into (strong references).
    held: [cork_slots]*Obj = undefined,

    pub fn release(k: *Cork) void {
        for (k.held[0..k.n]) |o| py.decref(o);
        k.* = .{};
    }
};

/// One stretch of unsent bytes: `base[start..end]`.
const Seg = struct {
    base: [*]u8,
    start: usize,
    end: usize,
    /// A copy block's allocation size, `end` growing up to it while the
    /// block is the queue's tail; 0 for a reference.
    cap: usize,
    /// The `bytes` holding the data (a strong reference), or null when the
    /// segment owns a copy block.
    owner: ?*Obj,

    fn release(s: *Seg) void {
        trim.released(if (s.owner != null) s.end else s.cap);
        if (s.owner) |o| py.decref(o) else gpa.free(s.base[0..s.cap]);
        s.* = undefined;
    }
};

/// The write buffer: a FIFO of segments, flushed with sendmsg over several
/// iovecs. Exact `bytes` are the only objects referenced, so releasing a
/// segment never runs Python code (no finalizer, no `__release_buffer__`)
/// and may happen anywhere, dealloc and tp_clear included.
pub const WriteQueue = struct {
    segs: std.ArrayList(Seg) = .empty,
    /// Segments before this index are sent and released.
    head: usize = 0,
    /// Unsent bytes in all segments: get_write_buffer_size(), exactly.
    size: usize = 0,

    pub fn live(q: *WriteQueue) []Seg {
        return q.segs.items[q.head..];
    }

    /// Copies `data` behind what is queued: first into the tail block's
    /// room, then into one new block. On OutOfMemory nothing is queued.
    fn appendCopy(q: *WriteQueue, data: []const u8) error{OutOfMemory}!void {
        const room = q.tailRoom();
        if (data.len > room) {
            // Before touching the tail: this may move the segment array.
            try q.segs.ensureUnusedCapacity(gpa, 1);
            const rest = data.len - room;
            const block = try gpa.alloc(u8, @max(rest, copy_block_bytes));
            @memcpy(block[0..rest], data[room..]);
            q.segs.appendAssumeCapacity(.{
                .base = block.ptr,
                .start = 0,
                .end = rest,
                .cap = block.len,
                .owner = null,
            });
        }
        const head_part = @min(room, data.len);
        if (head_part > 0) {
            // The old tail: just before the block appended above, if any.
            const s = &q.segs.items[q.segs.items.len - 1 - @intFromBool(data.len > room)];
            std.debug.assert(s.owner == null and s.cap - s.end >= head_part);
            @memcpy(s.base[s.end..][0..head_part], data[0..head_part]);
            s.end += head_part;
        }
        q.size += data.len;
    }

    /// Bytes the tail segment can still take: room left in a copy block.
    fn tailRoom(q: *WriteQueue) usize {
        const segs = q.live();
        if (segs.len == 0) return 0;
        const tail = segs[segs.len - 1];
        return if (tail.owner == null) tail.cap - tail.end else 0;
    }

    /// Queues `data`, which lies inside the immutable `owner`, by reference.
    fn appendRef(q: *WriteQueue, owner: *Obj, data: []const u8) error{OutOfMemory}!void {
        std.debug.assert(c.PyBytes_CheckExact(owner) != 0);
        try q.segs.append(gpa, .{
            .base = @constCast(data.ptr),
            .start = 0,
            .end = data.len,
            .cap = 0,
            .owner = owner,
        });
        py.incref(owner);
        q.size += data.len;
    }

    /// Points `iov` at the first segments; returns how many it filled.
    fn gather(q: *WriteQueue, iov: []sockio.iovec_const) usize {
        const segs = q.live();
        const n = @min(segs.len, iov.len);
        for (segs[0..n], iov[0..n]) |s, *v| {
            v.* = .{ .base = s.base + s.start, .len = s.end - s.start };
        }
        return n;
    }

    /// Drops `sent` bytes from the front, releasing what is fully sent.
    fn consume(q: *WriteQueue, sent: usize) void {
        std.debug.assert(sent <= q.size);
        q.size -= sent;
        var left = sent;
        while (left > 0) {
            const s = &q.segs.items[q.head];
            const n = s.end - s.start;
            if (n > left) {
                s.start += left;
                break;
            }
            left -= n;
            s.release();
            q.head += 1;
        }
        q.compact();
    }

    /// Keeps the segment array from creeping: reset when empty (freed when
    /// a burst grew it big), shifted down when mostly sent.
    fn compact(q: *WriteQueue) void {
        if (q.head == q.segs.items.len) {
            q.segs.clearRetainingCapacity();
            q.head = 0;
            if (q.segs.capacity > 1024) q.segs.clearAndFree(gpa);
        } else if (q.head >= 64 and q.head > q.segs.items.len / 2) {
            const rest = q.segs.items[q.head..];
            std.mem.copyForwards(Seg, q.segs.items[0..rest.len], rest);
            q.segs.shrinkRetainingCapacity(rest.len);
            q.head = 0;
        }
    }

    /// Drops everything unsent (abort, a send error, dealloc).
    pub fn releaseAll(q: *WriteQueue) void {
        for (q.live()) |*s| s.release();
        q.segs.deinit(gpa);
        q.* = .{};
    }
};

// ------------------------------------------------------------- writable

pub fn writeReady(t: *Transport) core.RunError!void {
    const in = t.inner.?;
    if (in.pending() == 0) {
        if (in.sendfile_writer) |cb| return sendfileReady(t, cb);
        return updateInterest(t);
    }
    // One sendmsg per writable event, as asyncio's `_write_sendmsg`.
    var iov: [iov_max]sockio.iovec_const = undefined;
    const rc = switch (sockio.sendv(in.sysFd(), iov[0..in.wq.gather(&iov)])) {
        .done => |n| n,
        .would_block => return,
        .failed => |errno| {
            in.wq.releaseAll();
            updateInterest(t);
            return fatalErrno(t, sendErrno(t, errno), names.msg_write);
        },
    };
    in.wq.consume(rc);
    if (!maybeResume(t)) try pendingToRun(t);
    if (in.pending() > 0) return;
    updateInterest(t);
    if (in.closing) {
        if (in.conn_lost == 0) {
            in.conn_lost += 1;
            if (!scheduleConnectionLost(t, py.none())) try pendingToRun(t);
        }
    } else if (in.eof) {
        sockio.shutdownWrite(in.sysFd());
    }
}

/// The socket is writable and the buffer empty during loop.sendfile():
/// hand the event to its callback (it may end the sendfile, so hold it).
fn sendfileReady(t: *Transport, cb: *Obj) core.RunError!void {
    py.incref(cb);
    defer py.decref(cb);
    const r = c.PyObject_CallNoArgs(cb) orelse return pendingToRun(t);
    py.decref(r);
}

// ---------------------------------------------------- write, writelines

fn isBytesLike(o: *Obj) bool {
    return c.PyBytes_Check(o) != 0 or c.PyByteArray_Check(o) != 0 or c.PyMemoryView_Check(o) != 0;
}

/// write() once the connection is lost: dropped, and logged after a few
/// (asyncio's `LOG_THRESHOLD_FOR_CONNLOST_WRITES`), never raised.
fn writeAfterLost(t: *Transport) ?*Obj {
    const in = t.inner.?;
    if (in.conn_lost >= log_threshold_conn_lost and !callSelf(t, common.warn_lost)) return null;
    in.conn_lost += 1;
    return py.newref(py.none());
}

/// write() of a bytes-like object whose buffer cannot be taken whole (a
/// non-contiguous memoryview). asyncio's write() checks emptiness and a
/// lost connection first, then its `sock.send()` raises: a fatal write
/// error (exception handler, connection_lost(exc)), not an exception out
/// of write().
fn writeUnsendable(t: *Transport, d: *Obj) ?*Obj {
    if (c.PyErr_ExceptionMatches(c.PyExc_BufferError) == 0) return null;
    const exc = py.fetchException() orelse return null;
    const n = c.PyObject_Length(d);
    if (n <= 0 or t.inner.?.conn_lost > 0) {
        py.decref(exc);
        if (n < 0) return null;
        if (n == 0) return py.newref(py.none());
        return writeAfterLost(t);
    }
    fatal(t, exc, names.msg_write) catch return null;
    if (c.PyErr_Occurred() != null) return null;
    return py.newref(py.none());
}

/// `write(data)` and `writelines(list_of_data)` take their argument by
/// position (the hot path, as cheap as METH_O) or by keyword, as asyncio's
/// Python methods do.
pub fn writeMethod(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, kwnames: ?*Obj) callconv(.c) ?*Obj {
    if (kwnames == null and nargs == 1) return @call(.always_inline, write, .{ self, args[0] });
    var a: [1]?*Obj = undefined;
    if (!py.bindArgs("write", &.{common.data}, 1, args, nargs, kwnames, &a)) return null;
    return write(self, a[0]);
}

pub fn writelinesMethod(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, kwnames: ?*Obj) callconv(.c) ?*Obj {
    if (kwnames == null and nargs == 1) return writelines(self, args[0]);
    var a: [1]?*Obj = undefined;
    if (!py.bindArgs("writelines", &.{common.list_of_data}, 1, args, nargs, kwnames, &a)) return null;
    return writelines(self, a[0]);
}

/// write()'s TypeError for data that is not bytes-like, in the words of
/// the asyncio it is built for (3.14 names the three types it takes).
const write_type_error = if (c.PY_MINOR_VERSION >= 14)
    "data argument must be a bytes, bytearray, or memoryview object, not '%.100s'"
else
    "data argument must be a bytes-like object, not '%.100s'";

fn write(self: ?*Obj, data: ?*Obj) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    const d = data.?;
    if (!isBytesLike(d)) {
        return c.PyErr_Format(c.PyExc_TypeError, write_type_error, c.Py_TYPE(d).*.tp_name);
    }
    const in = innerOrRaise(self) orelse return null;
    if (in.eof) return py.raise(c.PyExc_RuntimeError, "Cannot call write() after write_eof()");
    // As asyncio's selector transport while its sendfile waiter is set.
    if (in.sendfile_writer != null) {
        return py.raise(c.PyExc_RuntimeError, "unable to write; sendfile is in progress");
    }
    // An exact `bytes` (nearly every write) is read in place, as `bytesView`
    // does; anything else through the buffer protocol.
    const exact = c.PyBytes_CheckExact(d) != 0;
    var view: c.Py_buffer = undefined;
    if (exact) {
        view.buf = c.PyBytes_AS_STRING(d);
        view.len = c.PyBytes_GET_SIZE(d);
        view.obj = d;
    } else if (c.PyObject_GetBuffer(d, &view, c.PyBUF_SIMPLE) < 0) return writeUnsendable(t, d);
    defer if (!exact) c.PyBuffer_Release(&view);
    const all = viewBytes(&view);
    if (all.len == 0) return py.newref(py.none());
    if (in.conn_lost > 0) return writeAfterLost(t);
    if (hold(t, view.obj, all)) return py.newref(py.none());
    if (!uncork(t)) return null;
    if (in.conn_lost > 0) return writeAfterLost(t);
    var sent: usize = 0;
    if (in.pending() == 0) {
        switch (sockio.send(in.sysFd(), all)) {
            .done => |n| sent = n,
            .would_block => {},
            .failed => |errno| return writeFailed(t, errno),
        }
        if (sent == all.len) return py.newref(py.none());
    }
    queueData(in, view.obj, all[sent..]) catch return c.PyErr_NoMemory();
    return writeQueued(t);
}

/// Holds `data` (inside `exporter`) for the flush at the end of the running
/// callback, if it may be (see `Cork`): true when held.
fn hold(t: *Transport, exporter: ?*Obj, data: []const u8) bool {
    const in = t.inner.?;
    const k = &in.cork;
    // Closing: a write() that comes while close() waits for the buffer (a
    // resume_writing() callback's, from writeReady) must join that buffer,
    // which the connection's end waits for; held, it would be dropped.
    if (in.pending() != 0 or in.closing or k.n == cork_slots) return false;
    if (k.size + data.len > @min(cork_max_bytes, in.high)) return false;
    const o = exporter orelse return false;
    if (c.PyBytes_CheckExact(o) == 0) return false;
    const l = object.loopOf(t);
    if (!l.has_reactor or !l.reactor.in_callbacks) return false;
    if (!in.flush.queued) {
        l.reactor.deferFlush(&in.flush);
        py.incref(py.obj(t)); // the flush's reference
    }
    k.iov[k.n] = .{ .base = data.ptr, .len = data.len };
    k.held[k.n] = py.newref(o);
    k.n += 1;
    k.size += data.len;
    return true;
}

/// Sends what `hold` held, as the write() calls would have sent it; a rest
/// the socket does not take is buffered. false: a Python error is set.
pub fn uncork(t: *Transport) bool {
    const in = t.inner orelse return true;
    if (in.cork.n == 0) return true;
    var k = in.cork;
    in.cork = .{};
    defer k.release();
    // Lost meanwhile (a fatal error, _force_close): dropped as a buffer is.
    if (in.conn_lost > 0) return true;
    std.debug.assert(in.pending() == 0);
    const fd = in.sysFd();
    const got = if (k.n == 1)
        sockio.send(fd, k.iov[0].base[0..k.iov[0].len])
    else
        sockio.sendv(fd, k.iov[0..k.n]);
    var sent: usize = 0;
    switch (got) {
        .done => |n| sent = n,
        .would_block => {},
        .failed => |errno| return succeeded(writeFailed(t, errno)),
    }
    if (sent == k.size) return true;
    var skip = sent;
    for (k.iov[0..k.n], k.held[0..k.n]) |v, o| {
        const seg = v.base[0..v.len];
        if (skip >= seg.len) {
            skip -= seg.len;
            continue;
        }
        queueData(in, o, seg[skip..]) catch {
            _ = c.PyErr_NoMemory();
            return false;
        };
        skip = 0;
    }
    return succeeded(writeQueued(t));
}

/// The reactor's flush: the callback that held writes has returned.
pub fn flushCork(cb: *core.Callback) core.RunError!void {
    const f: *core.Flush = @fieldParentPtr("cb", cb);
    const in: *Inner = @fieldParentPtr("flush", f);
    const t = in.owner;
    defer py.decref(py.obj(t));
    // Also after a callback that raised KeyboardInterrupt or SystemExit
    // (the reactor flushes then too): its exception waits meanwhile.
    const aside = py.Aside.take();
    defer aside.restore();
    if (!uncork(t)) try pendingToRun(t);
}

/// `uncork` once the callback that held the writes returned `called`,
/// which may have raised KeyboardInterrupt or SystemExit out of the loop:
/// what it wrote goes out all the same (asyncio's writes had gone out
/// already), its exception set aside meanwhile (an error of the flush
/// itself is then printed: see `py.Aside`).
pub fn uncorkAfter(t: *Transport, called: core.RunError!void) bool {
    called catch {
        const aside = py.Aside.take();
        defer aside.restore();
        _ = uncork(t);
        return true;
    };
    return uncork(t);
}

/// The loop closes with the flush unrun (a pass aborted inside a flush).
pub fn dropCork(cb: *core.Callback) void {
    const f: *core.Flush = @fieldParentPtr("cb", cb);
    const in: *Inner = @fieldParentPtr("flush", f);
    in.cork.release();
    py.decref(py.obj(in.owner));
}

fn viewBytes(view: *const c.Py_buffer) []const u8 {
    const p: [*]const u8 = @ptrCast(view.buf);
    return p[0..@intCast(view.len)];
}

/// A send from write()/writelines() failed: a fatal write error (reported
/// through `_fatal_error`), not an exception out of the call, as asyncio.
fn writeFailed(t: *Transport, errno: u16) ?*Obj {
    fatalErrno(t, sendErrno(t, errno), names.msg_write) catch return null;
    if (c.PyErr_Occurred() != null) return null;
    return py.newref(py.none());
}

/// The error a failed send reports: EPIPE after a paused reader's native
/// receive took the socket's error (a reset) is that error, as the send of
/// a loop that polls finds it still pending on the socket.
fn sendErrno(t: *Transport, errno: u16) u16 {
    if (errno != sockio.epipe) return errno;
    return read.waitingError(t.inner.?) orelse errno;
}

/// Something was queued: watch for writability, maybe pause the protocol.
fn writeQueued(t: *Transport) ?*Obj {
    updateInterest(t);
    if (!maybePause(t)) return null;
    return py.newref(py.none());
}

/// The `bytes` whose storage holds `data`, taken from the buffer exporter
/// `exporter`, if those bytes can never change: an exact `bytes`, or a
/// memoryview over one (`memoryview(b)[i:j]`). Anything else may be
/// mutated after write() returns (bytearray, a writable memoryview, a
/// subclass's `__buffer__`, mmap), so it is copied: what write() was given
/// is what is sent, as asyncio 3.11's copying buffer guarantees (3.12 and
/// 3.13 keep a bytearray by reference once buffered, so a later mutation
/// leaks into the stream; zloop keeps 3.11's safer behaviour).
fn immutableOwner(exporter: ?*Obj, data: []const u8) ?*Obj {
    const e = exporter orelse return null;
    const b = if (c.PyBytes_CheckExact(e) != 0)
        e
    else if (c.PyMemoryView_Check(e) != 0)
        c.PyMemoryView_GET_BASE(e) orelse return null
    else
        return null;
    if (c.PyBytes_CheckExact(b) == 0) return null;
    // The view must lie inside the bytes' own storage.
    const start: [*]const u8 = @ptrCast(c.PyBytes_AsString(b));
    const len: usize = @intCast(c.PyBytes_Size(b));
    const lo = @intFromPtr(start);
    const p = @intFromPtr(data.ptr);
    if (p < lo or p + data.len > lo + len) return null;
    return b;
}

/// Queues an unsent rest: by reference when long and immutable, else copied.
fn queueData(in: *Inner, exporter: ?*Obj, data: []const u8) error{OutOfMemory}!void {
    if (data.len >= ref_min_bytes) {
        if (immutableOwner(exporter, data)) |b| return in.wq.appendRef(b, data);
    }
    return in.wq.appendCopy(data);
}

/// Py_buffers of up to this many writelines() items live on the stack.
const views_on_stack = 64;

/// writelines(list_of_data): with nothing queued, the items go out in
/// gathering sendmsg calls, not joined first; the rest is queued as
/// write() queues it. Items are any bytes-like objects (asyncio 3.12+
/// takes `memoryview(item)` of each, 3.11 joins them), and every item's
/// buffer is taken before anything is sent, so a TypeError writes nothing.
/// The guards are asyncio 3.12's (a false argument writes nothing, from
/// 3.12 on); a lost connection counts the call as
/// write() does (3.12 queues such data and never sends it).
fn writelines(self: ?*Obj, arg: ?*Obj) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    const in = innerOrRaise(self) orelse return null;
    if (in.eof) return py.raise(c.PyExc_RuntimeError, "Cannot call writelines() after write_eof()");
    if (in.sendfile_writer != null) {
        return py.raise(c.PyExc_RuntimeError, "unable to writelines; sendfile is in progress");
    }
    if (c.PY_MINOR_VERSION >= 12) {
        // asyncio 3.12+ returns at once for a false argument (None, []);
        // 3.11 joins it, a TypeError for None.
        switch (c.PyObject_IsTrue(arg)) {
            0 => return py.newref(py.none()),
            1 => {},
            else => return null,
        }
    }
    // asyncio 3.14+ drops (and counts) the call on a lost connection before
    // it looks at the items, so even all-empty or unsendable ones count.
    if (c.PY_MINOR_VERSION >= 14 and in.conn_lost > 0) return writeAfterLost(t);
    const seq = c.PySequence_Fast(arg, "writelines() argument must be iterable") orelse return null;
    defer py.decref(seq);
    const n: usize = @intCast(c.PySequence_Size(seq));
    if (n == 0) return py.newref(py.none());
    var stack: [views_on_stack]c.Py_buffer = undefined;
    const views = if (n <= views_on_stack)
        stack[0..n]
    else
        gpa.alloc(c.Py_buffer, n) catch return c.PyErr_NoMemory();
    defer if (n > views_on_stack) gpa.free(views);
    const got = takeViews(seq, views) orelse return null;
    defer releaseViews(views[0..got]);
    return writeViews(t, views[0..got]);
}

/// Item `i` of a list or tuple (borrowed), null past a list's end: a
/// Python `__buffer__` called for an earlier item may have shortened it.
/// Read in place (not through PyList_GetItem's call): with 64 small items,
/// the per-item calls cost more than joining them.
fn seqItem(seq: *Obj, i: usize) ?*Obj {
    if (c.PyList_Check(seq) != 0) {
        const list: *c.PyListObject = @ptrCast(@alignCast(seq));
        if (i >= @as(usize, @intCast(list.ob_base.ob_size))) return null;
        return list.ob_item[i];
    }
    const tuple: *c.PyTupleObject = @ptrCast(@alignCast(seq));
    const items: [*]?*Obj = @ptrCast(&tuple.ob_item);
    return items[i];
}

/// Takes each item's buffer; returns how many, or null (error set, none
/// held) when an item is not bytes-like.
fn takeViews(seq: *Obj, views: []c.Py_buffer) ?usize {
    for (views, 0..) |*v, i| {
        const item = seqItem(seq, i) orelse return i;
        if (c.PyBytes_CheckExact(item) != 0) {
            bytesView(item, v);
            continue;
        }
        py.incref(item); // the list may drop it while its __buffer__ runs
        defer py.decref(item);
        if (c.PyObject_GetBuffer(item, v, c.PyBUF_SIMPLE) < 0) {
            releaseViews(views[0..i]);
            return null;
        }
    }
    return views.len;
}

/// An exact `bytes` item's storage, without PyObject_GetBuffer's calls (as
/// `bytes.join` does): the reference in `obj` keeps it. Only `buf`, `obj`
/// and `len` are set; `releaseViews` drops it, never PyBuffer_Release.
fn bytesView(b: *Obj, v: *c.Py_buffer) void {
    v.buf = c.PyBytes_AS_STRING(b);
    v.obj = py.newref(b);
    v.len = c.PyBytes_GET_SIZE(b);
}

/// Releases what `takeViews` took. bytes has no releasebuffer hook, so an
/// exact bytes' view is released by dropping its reference.
fn releaseViews(views: []c.Py_buffer) void {
    for (views) |*v| {
        const o: *Obj = v.obj orelse continue;
        if (c.PyBytes_CheckExact(o) != 0) {
            v.obj = null;
            py.decref(o);
        } else {
            c.PyBuffer_Release(v);
        }
    }
}

/// A position in writelines()' items: the next unsent byte.
const Cursor = struct {
    item: usize = 0,
    offset: usize = 0,

    /// Moves past `sent` bytes (and the empty items after them).
    fn advance(at: *Cursor, views: []const c.Py_buffer, sent: usize) void {
        var left = sent;
        while (at.item < views.len) {
            const rest = viewBytes(&views[at.item]).len - at.offset;
            if (rest > left) {
                at.offset += left;
                return;
            }
            left -= rest;
            at.item += 1;
            at.offset = 0;
        }
        std.debug.assert(left == 0);
    }
};

fn writeViews(t: *Transport, views: []const c.Py_buffer) ?*Obj {
    const in = t.inner.?;
    var total: usize = 0;
    for (views) |*v| total += viewBytes(v).len;
    if (total == 0) return py.newref(py.none());
    if (in.conn_lost > 0) return writeAfterLost(t);
    if (!uncork(t)) return null;
    if (in.conn_lost > 0) return writeAfterLost(t);
    var at: Cursor = .{};
    if (in.pending() == 0) {
        const errno = sendViews(in.sysFd(), views, &at);
        if (errno != 0) return writeFailed(t, errno);
        if (at.item == views.len) return py.newref(py.none());
    }
    var offset = at.offset;
    for (views[at.item..]) |*v| {
        queueData(in, v.obj, viewBytes(v)[offset..]) catch {
            updateInterest(t);
            return c.PyErr_NoMemory();
        };
        offset = 0;
    }
    return writeQueued(t);
}

/// Runs of writelines() items shorter than this are copied together into
/// one iovec, longer ones get their own: a short copy costs less than an
/// iovec (measured on loopback: 64 items of 512 B went out faster joined,
/// 64 of 2 KiB faster gathered), and a long item is never copied.
const gather_min_bytes = 1024;
/// Where one sendmsg's short items are copied; 16 KiB of stack.
const scratch_bytes = 16 * 1024;

/// Sends `views` from `at` in sendmsg calls until all is sent or the
/// socket is full, advancing `at`. Returns the errno of a failed send,
/// else 0. What the socket did not take is still read from the items,
/// not from the scratch copy, so the copy may be thrown away.
fn sendViews(fd: i32, views: []const c.Py_buffer, at: *Cursor) u16 {
    var iov: [iov_max]sockio.iovec_const = undefined;
    var scratch: [scratch_bytes]u8 = undefined;
    while (at.item < views.len) {
        const batch = gatherViews(views, at.*, &iov, &scratch);
        if (batch.iovecs == 0) break; // only empty items were left
        const rc = switch (sockio.sendv(fd, iov[0..batch.iovecs])) {
            .done => |n| n,
            .would_block => return 0,
            .failed => |errno| return errno,
        };
        if (rc < batch.bytes) {
            at.advance(views, rc);
            return 0;
        }
        at.* = batch.end;
    }
    at.* = .{ .item = views.len };
    return 0;
}

const Batch = struct {
    iovecs: usize,
    bytes: usize,
    /// Where the next batch starts.
    end: Cursor,
};

/// Points `iov` at the items from `at` on, in order, until `iov` or
/// `scratch` is full: long items in place, runs of short ones copied into
/// `scratch` and sharing an iovec.
fn gatherViews(views: []const c.Py_buffer, at: Cursor, iov: []sockio.iovec_const, scratch: []u8) Batch {
    var n: usize = 0;
    var bytes: usize = 0;
    var used: usize = 0;
    var in_run = false; // iov[n - 1] is a run of copies ending at `used`
    var i = at.item;
    var offset = at.offset;
    while (i < views.len) : ({
        i += 1;
        offset = 0;
    }) {
        const b = viewBytes(&views[i])[offset..];
        if (b.len == 0) continue;
        const copy = b.len < gather_min_bytes;
        if (copy and used + b.len > scratch.len) break;
        if (!(copy and in_run)) {
            if (n == iov.len) break;
            iov[n] = .{ .base = if (copy) scratch.ptr + used else b.ptr, .len = 0 };
            n += 1;
        }
        if (copy) {
            @memcpy(scratch[used..][0..b.len], b);
            used += b.len;
        }
        iov[n - 1].len += b.len;
        in_run = copy;
        bytes += b.len;
    }
    return .{ .iovecs = n, .bytes = bytes, .end = .{ .item = i, .offset = offset } };
}

pub fn getWriteBufferSize(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    if (!uncork(t)) return null;
    const n: usize = if (t.inner) |in| in.pending() else 0;
    return c.PyLong_FromSize_t(n);
}

pub fn canWriteEof(_: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    return py.boolean(true);
}

pub fn writeEof(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const in = innerOrRaise(self) orelse return null;
    if (in.closing or in.eof) return py.newref(py.none());
    if (!uncork(py.cast(Transport, self.?))) return null;
    // As in close(): a failed send of the held writes ended it.
    if (in.closing) return py.newref(py.none());
    in.eof = true;
    if (in.pending() > 0) return py.newref(py.none());
    // A user's socket closed under the transport: asyncio's
    // `sock.shutdown()` raises EBADF out of write_eof().
    const fd = in.sysFd();
    if (fd < 0) return py.raiseErrno(sockio.ebadf);
    sockio.shutdownWrite(fd);
    return py.newref(py.none());
}

/// close(): stop reading; connection_lost(None) once the buffer drained.
pub fn closeTransport(t: *Transport) bool {
    const in = t.inner orelse return true;
    if (in.closing) return true;
    if (!uncork(t)) return false;
    // The held writes' send failed: that ended the connection already
    // (asyncio's write() failed before close() was called).
    if (in.closing) return true;
    in.closing = true;
    updateInterest(t);
    if (in.pending() > 0) return true;
    in.conn_lost += 1;
    return scheduleConnectionLost(t, py.none());
}

pub fn close(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    if (!closeTransport(py.cast(Transport, self.?))) return null;
    return py.newref(py.none());
}

/// `_force_close(exc)`: drop buffered data, connection_lost(exc) next pass.
const forceClose = object.forceClose;

/// abort(): what earlier write() calls handed over reaches the socket, as
/// on asyncio (see `Cork`); anything buffered is dropped.
pub fn abort(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    if (!uncork(py.cast(Transport, self.?))) return null;
    return forceClose(self, py.none());
}

/// `_sendfile_begin(callback)`: loop.sendfile() takes the socket over (see
/// `Inner.sendfile_writer`); the buffer is flushed first.
pub fn sendfileBegin(self: ?*Obj, cb: ?*Obj) callconv(.c) ?*Obj {
    const in = innerOrRaise(self) orelse return null;
    if (in.sendfile_writer != null) {
        return py.raise(c.PyExc_RuntimeError, "sendfile is already in progress");
    }
    if (c.PyCallable_Check(cb) == 0) return py.raise(c.PyExc_TypeError, "a callable is required");
    if (!uncork(py.cast(Transport, self.?))) return null;
    in.sendfile_writer = py.newref(cb.?);
    updateInterest(py.cast(Transport, self.?));
    return py.newref(py.none());
}

/// `_sendfile_end()`: write() works again; idempotent.
pub fn sendfileEnd(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    const in = t.inner orelse return py.newref(py.none());
    py.clear(&in.sendfile_writer);
    updateInterest(t);
    return py.newref(py.none());
}

/// is_closing(): StreamWriter.drain() asks it before anything else, so a
/// `write(); await drain()` that does not yield still sends at drain().
pub fn isClosing(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    if (!uncork(py.cast(Transport, self.?))) return null;
    return shared.isClosing(self, null);
}

/// `_uncork()`: send held writes now (before the socket is handed out).
pub fn uncorkMethod(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    if (!uncork(py.cast(Transport, self.?))) return null;
    return py.newref(py.none());
}
