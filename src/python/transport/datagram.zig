//! `zloop._zloop.DatagramTransportCore`: the native half of zloop's
//! datagram (UDP and Unix datagram) transports. One `core.IoWatcher` per
//! transport; `sendto` tries the socket first and queues the datagram only
//! when the socket is full, with write flow control; readiness receives one
//! datagram into a shared buffer and hands `protocol.datagram_received` a
//! `bytes` and the sender's address. The Python subclass
//! `zloop._udp._DatagramTransport` adds the cold paths: construction, extra
//! info, repr, `_fatal_error`, `_call_connection_lost`, and `sendto` to
//! addresses this file does not parse itself (host names).
//!
//! Semantics follow `selector_events._SelectorDatagramTransport`: socket
//! errors (ICMP port unreachable on a connected socket...) go to
//! `protocol.error_received(exc)` and the transport stays open; any other
//! exception is fatal. Layout and lifecycle are those of `stream.zig`
//! (`object.zig`): the type derives from
//! `asyncio.DatagramTransport`; an attached transport holds a reference to
//! itself on the reactor's behalf, dropped by `_detach`.
const std = @import("std");
const core = @import("core");
const py = @import("../capi/py.zig");
const c = py.c;
const Obj = py.Obj;
const gpa = std.heap.c_allocator;
const sockio = @import("../sock/io.zig");
const borrowed = @import("borrowed.zig");
const loop_mod = @import("../loop/loop.zig");
const sockaddr = @import("../sock/addr.zig");
/// The target's socket-address types and families (a BSD's carry a
/// length byte before an 8-bit family; Linux's have a 16-bit family).
const sa_types = std.c.sockaddr;
const AF = std.c.AF;
const transport_object = @import("object.zig");
pub const object = transport_object.Object(@This());
const shared = object.methods;
const common = &transport_object.names;

/// Bytes asked of one recvfrom(), as `_SelectorTransport.max_size`.
const max_read = 256 * 1024;
/// The texts of its fatal errors, as asyncio words them (`fatalPending`).
const msg_read = "Fatal read error on datagram transport";
const msg_write = "Fatal write error on datagram transport";
const msg_gone = "Fatal error on datagram transport: its socket was closed";
/// After this many sendto() calls on a lost connection, warn (asyncio's
/// `constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES`).
const log_threshold_conn_lost = 5;

/// The receive buffer, shared: it is only touched with the GIL held and
/// its contents are copied into a `bytes` before any Python code runs.
var recv_buf: [max_read]u8 = undefined;

extern fn inet_pton(af: c_int, src: [*:0]const u8, dst: *anyopaque) c_int;
extern fn getnameinfo(
    sa: *const anyopaque,
    salen: u32,
    host: [*]u8,
    hostlen: u32,
    serv: ?[*]u8,
    servlen: u32,
    flags: c_int,
) c_int;
/// The target's NI_NUMERICHOST (Linux's is 1, macOS's and FreeBSD's 2).
const ni_numerichost = core.sys.addrs.ni_numerichost;

pub const Transport = transport_object.Layout(Inner);

/// A queued datagram: an immutable `bytes` and its address (or null).
const Entry = struct {
    data: *Obj,
    addr: ?*Obj,
};

pub const Inner = struct {
    owner: *Transport,
    /// Queued behind the ready callbacks when the fd is ready (`shared.onReady`).
    io: transport_object.IoQueued = shared.ioQueued(),
    w: core.IoWatcher,
    /// In the reactor's watcher table, holding the self-reference.
    attached: bool = false,
    /// The socket is connected (`peername` is set): send(), not sendto().
    connected: bool = false,
    family: u16 = 0,
    /// `remote_addr` as given (owned), or null.
    address: ?*Obj = null,
    /// The user's socket (`create_datagram_endpoint(sock=)`; owned), or
    /// null for the loop's own: as the stream transport's (stream.zig's
    /// `Inner.sock_owner`), asked for its fd before each system call.
    sock_owner: ?*Obj = null,
    /// 3.13 sends empty datagrams; 3.11 and 3.12 drop them.
    send_empty: bool = false,

    // The receiving side.
    /// `_start_reading` ran (connection_made was called first).
    started: bool = false,
    paused: bool = false,
    /// The last sender's address, raw and as a Python object (owned), so
    /// a peer sending many datagrams costs one tuple.
    last: sockio.Address = .{},
    last_addr: ?*Obj = null,
    /// The `contextvars.Context` datagram_received/error_received run in: a
    /// copy of the current context taken when reading starts or resumes, as
    /// asyncio's `_add_reader` copies it into the reader `Handle`.
    context: ?*Obj = null,

    // The sending side.
    queue: std.ArrayList(Entry) = .empty,
    /// Entries of `queue` before this index are sent.
    head: usize = 0,
    /// As asyncio's `_buffer_size`: payload bytes plus `header_size` each.
    buffer_size: usize = 0,
    header_size: usize = 0,
    high: usize = 64 * 1024,
    low: usize = 16 * 1024,
    /// `(low, high)` as `set_write_buffer_limits` was given them (see
    /// `shared.getWriteBufferLimits`); null until it is called.
    limits: ?*Obj = null,
    protocol_paused: bool = false,
    /// close() was called (or a fatal error): connection_lost follows once
    /// the queue drained.
    closing: bool = false,
    conn_lost: u32 = 0,

    /// `w.fd`, or -1 (the call fails with EBADF) once the user's socket no
    /// longer stands for it.
    pub inline fn sysFd(in: *const Inner) i32 {
        return borrowed.fdFor(in.sock_owner, in.w.fd);
    }

    fn queued(in: *const Inner) usize {
        return in.queue.items.len - in.head;
    }

    fn dropQueue(in: *Inner) void {
        for (in.queue.items[in.head..]) |e| {
            py.decref(e.data);
            py.xdecref(e.addr);
        }
        in.queue.clearRetainingCapacity();
        in.head = 0;
        in.buffer_size = 0;
    }
};

// ------------------------------------------------------------- plumbing

/// Calls `self.<name>(args...)`; false with the error pending.
fn callSelf(t: *Transport, name: *Obj, args: anytype) bool {
    const r = py.callMethod(py.obj(t), name, args) orelse return false;
    py.decref(r);
    return true;
}

/// A Python error raised under the reactor's dispatch: KeyboardInterrupt
/// and SystemExit abort the loop; anything else goes to the loop's
/// exception handler (`_callback_error`), as an exception escaping
/// asyncio's `_read_ready` reaches `Handle._run`.
fn reportPending(t: *Transport) core.RunError!void {
    if (py.pendingIsFatal()) return error.Aborted;
    const exc = py.fetchException() orelse return;
    defer py.decref(exc);
    if (callSelf(t, common.callback_error, .{exc})) return;
    if (py.pendingIsFatal()) return error.Aborted;
    c.PyErr_WriteUnraisable(py.obj(t));
}

/// `protocol.error_received(OSError(errno))`; false with the error pending.
fn errorReceived(t: *Transport, errno: u16) bool {
    const exc = sockio.errnoException(errno) orelse return false;
    defer py.decref(exc);
    const r = py.callMethod(t.protocol.?, common.error_received, .{exc}) orelse
        return false;
    py.decref(r);
    return true;
}

/// `self._fatal_error(pending exception, msg)`; false with an error pending.
fn fatalPending(t: *Transport, comptime msg: [:0]const u8) bool {
    if (py.pendingIsFatal()) return false;
    const exc = py.fetchException() orelse return true;
    defer py.decref(exc);
    const text = c.PyUnicode_FromString(msg) orelse return false;
    defer py.decref(text);
    const r = py.callMethod(py.obj(t), common.fatal_error, .{ exc, text }) orelse
        return false;
    py.decref(r);
    return true;
}

pub fn updateInterest(t: *Transport) void {
    const l = object.attachedLoop(t) orelse return;
    const in = t.inner.?;
    const want: core.Interest = .{
        .read = in.started and !in.paused and !in.closing,
        .write = in.queued() > 0,
    };
    // A user's socket closed under the transport is registered no more
    // (its number may be another file's now); the next sendto/recvfrom
    // fails with EBADF, as asyncio's would.
    if (in.sysFd() < 0) return;
    // Fails only on an fd closed under the transport; the next
    // sendto/recvfrom reports that as the error asyncio would.
    l.reactor.setInterest(&in.w, want) catch {};
}

pub fn maybePause(t: *Transport) bool {
    const in = t.inner.?;
    if (in.buffer_size <= in.high or in.protocol_paused) return true;
    in.protocol_paused = true;
    return callSelf(t, common.pause_cb, .{});
}

fn maybeResume(t: *Transport) bool {
    const in = t.inner.?;
    if (!in.protocol_paused or in.buffer_size > in.low) return true;
    in.protocol_paused = false;
    return callSelf(t, common.resume_cb, .{});
}

const scheduleConnectionLost = object.scheduleConnectionLost;

// ------------------------------------------------------------- addresses

fn portOf(o: *Obj) ?u16 {
    if (c.PyLong_Check(o) == 0) return null;
    const v = c.PyLong_AsLong(o);
    if (v == -1 and c.PyErr_Occurred() != null) {
        c.PyErr_Clear();
        return null;
    }
    if (v < 0 or v > 0xffff) return null;
    return @intCast(v);
}

/// Numeric IPv4/IPv6 tuples and Unix paths, parsed without Python; null
/// for anything else (host names, odd forms), which goes through
/// `socket.sendto` so its resolution and its errors are exactly Python's.
fn parseAddress(family: u16, addr: *Obj, out: *sockio.Address) bool {
    if (family == AF.UNIX) return parseUnix(addr, out);
    if (c.PyTuple_Check(addr) == 0) return false;
    const n = c.PyTuple_Size(addr);
    const want: py.Ssize = if (family == AF.INET) 2 else if (family == AF.INET6) 4 else return false;
    if (n < 2 or n > want) return false;
    const host = c.PyTuple_GetItem(addr, 0);
    if (c.PyUnicode_Check(host) == 0) return false;
    const port = portOf(c.PyTuple_GetItem(addr, 1)) orelse return false;
    const host_z = c.PyUnicode_AsUTF8(host) orelse {
        c.PyErr_Clear();
        return false;
    };
    if (family == AF.INET) {
        const sa: *sa_types.in = @ptrCast(&out.storage);
        sa.* = .{ .port = std.mem.nativeToBig(u16, port), .addr = 0 };
        if (inet_pton(AF.INET, host_z, &sa.addr) != 1) return false;
        out.len = @sizeOf(sa_types.in);
        return true;
    }
    // Flow info and scope id (rare) take Python's path and its checks.
    if (n > 2) return false;
    const sa: *sa_types.in6 = @ptrCast(&out.storage);
    sa.* = .{ .port = std.mem.nativeToBig(u16, port), .flowinfo = 0, .addr = undefined, .scope_id = 0 };
    if (inet_pton(AF.INET6, host_z, &sa.addr) != 1) return false;
    out.len = @sizeOf(sa_types.in6);
    return true;
}

fn parseUnix(addr: *Obj, out: *sockio.Address) bool {
    if (c.PyBytes_Check(addr) == 0 and c.PyUnicode_Check(addr) == 0) return false;
    const raw = if (c.PyUnicode_Check(addr) != 0)
        (c.PyUnicode_EncodeFSDefault(addr) orelse {
            c.PyErr_Clear();
            return false;
        })
    else
        py.newref(addr);
    defer py.decref(raw);
    const len: usize = @intCast(c.PyBytes_Size(raw));
    const sa: *sa_types.un = @ptrCast(&out.storage);
    if (len == 0 or len >= sa.path.len) return false;
    sa.* = .{ .path = undefined }; // the family (and a BSD's length byte)
    const src: [*]const u8 = @ptrCast(c.PyBytes_AsString(raw));
    @memcpy(sa.path[0..len], src[0..len]);
    sa.path[len] = 0;
    // An abstract name (leading NUL) counts exactly its bytes.
    const extra: usize = if (src[0] == 0) 0 else 1;
    out.len = @intCast(@offsetOf(sa_types.un, "path") + len + extra);
    return true;
}

/// The sender's address as the socket module returns it.
fn addressObject(raw: *const sa_types.storage, len: u32) ?*Obj {
    // No address at all: the sender is an unnamed socket (the other end of
    // a socketpair). CPython's makesockaddr gives None then, and so does
    // asyncio's datagram_received.
    if (len == 0) return py.newref(py.none());
    switch (raw.family) {
        AF.INET => {
            const sa: *const sa_types.in = @ptrCast(raw);
            const b: [4]u8 = @bitCast(sa.addr);
            var text: [16]u8 = undefined;
            const s = std.fmt.bufPrint(&text, "{d}.{d}.{d}.{d}", .{ b[0], b[1], b[2], b[3] }) catch unreachable;
            const port: c_int = std.mem.bigToNative(u16, sa.port);
            return c.Py_BuildValue("(s#i)", s.ptr, @as(py.Ssize, @intCast(s.len)), port);
        },
        AF.INET6 => {
            const sa: *const sa_types.in6 = @ptrCast(raw);
            var host: [64]u8 = undefined;
            if (getnameinfo(raw, len, &host, host.len, null, 0, ni_numerichost) != 0) {
                return py.raise(c.PyExc_OSError, "getnameinfo failed on a datagram's address");
            }
            const port: c_int = std.mem.bigToNative(u16, sa.port);
            const flow: c_uint = std.mem.bigToNative(u32, sa.flowinfo);
            return c.Py_BuildValue("(sikI)", @as([*:0]const u8, @ptrCast(&host)), port, @as(c_ulong, flow), sa.scope_id);
        },
        // Read by the target's rule, as the stream transports' names.
        AF.UNIX => return sockaddr.fromStorage(raw, len),
        else => return py.raise(c.PyExc_OSError, "datagram from an unsupported address family"),
    }
}

/// The sender's address, reusing the previous object for the same peer.
fn senderAddress(in: *Inner, from: *const sockio.Address) ?*Obj {
    const len = @min(from.len, @sizeOf(sa_types.storage));
    const new_bytes = std.mem.asBytes(&from.storage)[0..len];
    if (in.last_addr) |a| {
        if (in.last.len == len and std.mem.eql(u8, std.mem.asBytes(&in.last.storage)[0..len], new_bytes)) {
            return py.newref(a);
        }
    }
    const a = addressObject(&from.storage, len) orelse return null;
    py.clear(&in.last_addr);
    in.last_addr = py.newref(a);
    @memcpy(std.mem.asBytes(&in.last.storage)[0..len], new_bytes);
    in.last.len = len;
    return a;
}

// --------------------------------------------------------------- sending

const Sent = enum { sent, would_block, failed };

/// One datagram out. `failed`: the error went to error_received or
/// _fatal_error already. error.Raised: an exception is pending for the
/// caller (from error_received, or one that must abort).
fn sendOne(t: *Transport, data_obj: *Obj, data: []const u8, addr: ?*Obj) error{Raised}!Sent {
    const in = t.inner.?;
    var sa: sockio.Address = .{};
    const got = if (in.connected)
        sockio.sendto(in.sysFd(), data, null)
    else if (addr != null and parseAddress(in.family, addr.?, &sa))
        sockio.sendto(in.sysFd(), data, &sa)
    else
        return sendPython(t, data_obj, addr);
    switch (got) {
        .done => return .sent,
        .would_block => return .would_block,
        .failed => |errno| {
            if (!errorReceived(t, errno)) return error.Raised;
            return .failed;
        },
    }
}

/// `self._sock.sendto(data, addr)` through Python, with asyncio's mapping
/// of what it raises.
fn sendPython(t: *Transport, data_obj: *Obj, addr: ?*Obj) error{Raised}!Sent {
    const a = addr orelse py.none();
    const r = py.callMethod(py.obj(t), common.sendto_py, .{ data_obj, a });
    if (r) |o| {
        py.decref(o);
        return .sent;
    }
    if (c.PyErr_ExceptionMatches(c.PyExc_BlockingIOError) != 0 or
        c.PyErr_ExceptionMatches(c.PyExc_InterruptedError) != 0)
    {
        c.PyErr_Clear();
        return .would_block;
    }
    if (c.PyErr_ExceptionMatches(c.PyExc_OSError) != 0) {
        const exc = py.fetchException() orelse return error.Raised;
        defer py.decref(exc);
        const res = py.callMethod(t.protocol.?, common.error_received, .{exc}) orelse
            return error.Raised;
        py.decref(res);
        return .failed;
    }
    if (!fatalPending(t, msg_write)) return error.Raised;
    return .failed;
}

fn isBytesLike(o: *Obj) bool {
    return c.PyBytes_Check(o) != 0 or c.PyByteArray_Check(o) != 0 or c.PyMemoryView_Check(o) != 0;
}

/// `sendto(data, addr=None)`.
fn sendto(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, kwnames: ?*Obj) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    var bound: [2]?*Obj = undefined;
    if (!py.bindArgs("sendto", &.{ common.data, common.addr }, 1, args, nargs, kwnames, &bound)) return null;
    const addr_arg = bound[1];
    const d = bound[0].?;
    if (!isBytesLike(d)) {
        return c.PyErr_Format(c.PyExc_TypeError, "data argument must be a bytes-like object, not '%.100s'", c.Py_TYPE(d).*.tp_name);
    }
    const in = t.inner orelse return py.raise(c.PyExc_RuntimeError, "transport is not set up");
    var view: c.Py_buffer = undefined;
    if (c.PyObject_GetBuffer(d, &view, c.PyBUF_SIMPLE) < 0) {
        // A bytes-like object that no longer gives its bytes (a released
        // memoryview): asyncio up to 3.12 asks `not data` first, which
        // raises; 3.13+, which sends empty datagrams, meets it later.
        return if (in.send_empty) sendUnreadable(t, addr_arg) else null;
    }
    defer c.PyBuffer_Release(&view);
    const data = @as([*]const u8, @ptrCast(view.buf))[0..@intCast(view.len)];
    if (data.len == 0 and !in.send_empty) return py.newref(py.none());
    var addr: ?*Obj = undefined;
    switch (target(t, addr_arg, &addr)) {
        .raised => return null,
        .dropped => return py.newref(py.none()),
        .send => {},
        .send_once => {
            const r = sendOne(t, d, data, addr) catch return null;
            if (r == .would_block) in.conn_lost += 1;
            return py.newref(py.none());
        },
    }
    if (in.queued() == 0) {
        const r = sendOne(t, d, data, addr) catch return null;
        if (r != .would_block) return py.newref(py.none());
    }
    return enqueue(t, d, data, addr);
}

/// Where sendto()'s datagram goes (`addr`, null for the connected peer),
/// after asyncio's checks in asyncio's order: an address other than a
/// connected endpoint's raises, a lost connection drops the datagram.
fn target(t: *Transport, addr_arg: ?*Obj, addr: *?*Obj) enum { send, send_once, dropped, raised } {
    const in = t.inner.?;
    addr.* = if (py.isNone(addr_arg)) null else addr_arg;
    if (in.address) |fixed| {
        if (addr.*) |a| {
            const same = c.PyObject_RichCompareBool(a, fixed, c.Py_EQ);
            if (same < 0) return .raised;
            if (same == 0) {
                _ = c.PyErr_Format(c.PyExc_ValueError, "Invalid address: must be None or %S", fixed);
                return .raised;
            }
        }
        addr.* = fixed;
    }
    if (in.conn_lost > 0) {
        // An unconnected endpoint still sends until connection_lost() has
        // run and its socket is closing, as asyncio's does: an
        // error_received() that closed the transport hears the next
        // datagram's error too (CPython gh-156920's test). One try, no
        // queueing.
        if (in.address == null and in.attached and in.queued() == 0) return .send_once;
        // asyncio warns only for connected endpoints; past that point the
        // socket is gone (or going) and nothing is sent.
        if (in.address != null and in.conn_lost >= log_threshold_conn_lost and
            !callSelf(t, common.warn_lost, .{})) return .raised;
        in.conn_lost += 1;
        return .dropped;
    }
    return .send;
}

/// sendto() of data whose buffer export just failed (pending), as asyncio
/// 3.13+: after the address checks, the send fails the transport (its
/// `_fatal_error`), or with datagrams queued, copying it raises.
fn sendUnreadable(t: *Transport, addr_arg: ?*Obj) ?*Obj {
    const exc = py.fetchException() orelse return null;
    var addr: ?*Obj = undefined;
    switch (target(t, addr_arg, &addr)) {
        .raised => {
            py.decref(exc);
            return null;
        },
        .dropped, .send_once => {
            py.decref(exc);
            return py.newref(py.none());
        },
        .send => {},
    }
    py.restoreException(exc);
    if (t.inner.?.queued() != 0) return null;
    if (!fatalPending(t, msg_write)) return null;
    return py.newref(py.none());
}

fn enqueue(t: *Transport, d: *Obj, data: []const u8, addr: ?*Obj) ?*Obj {
    const in = t.inner.?;
    // Only an immutable copy may wait in the queue.
    const copy = if (c.PyBytes_CheckExact(d) != 0)
        py.newref(d)
    else
        (c.PyBytes_FromStringAndSize(@ptrCast(data.ptr), @intCast(data.len)) orelse return null);
    in.queue.append(gpa, .{ .data = copy, .addr = if (addr) |a| py.newref(a) else null }) catch {
        py.decref(copy);
        py.xdecref(addr);
        return c.PyErr_NoMemory();
    };
    in.buffer_size += data.len + in.header_size;
    updateInterest(t);
    if (!maybePause(t)) return null;
    return py.newref(py.none());
}

// ------------------------------------------------------------ readiness

/// A Python error under `object.dispatchReady` (the protocol's context).
pub const dispatchFailed = reportPending;

pub fn dispatch(t: *Transport, ev: core.reactor.Event) core.RunError!void {
    const in = t.inner.?;
    if (ev.readable and in.w.interest.read and in.conn_lost == 0) try readReady(t);
    if (ev.writable and in.attached and in.w.interest.write) try writeReady(t);
}

/// Takes a copy of the current context for the read side (see `Inner.context`).
pub fn captureContext(in: *Inner) bool {
    const ctx = c.PyContext_CopyCurrent() orelse return false;
    py.xdecref(in.context);
    in.context = ctx;
    return true;
}

fn readReady(t: *Transport) core.RunError!void {
    const in = t.inner.?;
    var from: sockio.Address = .{};
    @memset(std.mem.asBytes(&from.storage)[0..@sizeOf(sa_types.in6)], 0);
    const rc = switch (sockio.recvfrom(in.sysFd(), &recv_buf, &from)) {
        .done => |n| n,
        .would_block => return,
        .failed => |errno| {
            if (!errorReceived(t, errno)) try reportPending(t);
            return;
        },
    };
    const data = c.PyBytes_FromStringAndSize(@ptrCast(&recv_buf), @intCast(rc)) orelse return reportPending(t);
    defer py.decref(data);
    const addr = senderAddress(in, &from) orelse {
        if (!fatalPending(t, msg_read)) try reportPending(t);
        return;
    };
    defer py.decref(addr);
    const r = py.callMethod(t.protocol.?, common.datagram_received, .{ data, addr });
    if (r) |o| py.decref(o) else try reportPending(t);
}

fn writeReady(t: *Transport) core.RunError!void {
    const in = t.inner.?;
    while (in.queued() > 0) {
        const e = in.queue.items[in.head];
        const data = @as([*]const u8, @ptrCast(c.PyBytes_AsString(e.data)))[0..@intCast(c.PyBytes_Size(e.data))];
        const r = sendOne(t, e.data, data, e.addr) catch {
            popEntry(in);
            return reportPending(t);
        };
        if (r == .would_block) break;
        popEntry(in);
        // As asyncio: an error ends this pass; the writer stays on.
        if (r == .failed) return;
    }
    if (!maybeResume(t)) try reportPending(t);
    if (in.queued() > 0) return;
    updateInterest(t);
    if (in.closing and in.conn_lost == 0) {
        in.conn_lost += 1;
        if (!scheduleConnectionLost(t, py.none())) try reportPending(t);
    }
}

fn popEntry(in: *Inner) void {
    const e = in.queue.items[in.head];
    in.head += 1;
    in.buffer_size -|= @as(usize, @intCast(c.PyBytes_Size(e.data))) + in.header_size;
    py.decref(e.data);
    py.xdecref(e.addr);
    if (in.head == in.queue.items.len) {
        in.queue.clearRetainingCapacity();
        in.head = 0;
    }
}

// --------------------------------------------------------------- methods

const innerOrRaise = object.innerOrRaise;

fn longArg(o: ?*Obj) ?c_long {
    const v = c.PyLong_AsLong(o);
    if (v == -1 and c.PyErr_Occurred() != null) return null;
    return v;
}

/// `_setup(loop, fd, protocol, address, connected, family, send_empty,
/// header_size, sock)`: registers the fd with the loop's reactor (no
/// interest yet) and takes the reactor's reference. `sock`: the user's
/// socket the fd came from (see `Inner.sock_owner`), or None.
fn setup(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    if (nargs != 9) return py.raise(c.PyExc_TypeError, "_setup(loop, fd, protocol, address, connected, family, send_empty, header_size, sock)");
    const to = object.target(t, args[0], args[1]) orelse return null;
    const registered = loop_mod.claimFd(to.loop, to.fd) orelse return null;
    const connected = c.PyObject_IsTrue(args[4]);
    const send_empty = c.PyObject_IsTrue(args[6]);
    if (connected < 0 or send_empty < 0) return null;
    const family = longArg(args[5]) orelse return null;
    const header = longArg(args[7]) orelse return null;
    const user_sock: ?*Obj = if (py.isNone(args[8])) null else args[8].?;
    const in = object.newInner(t, to, registered, user_sock) orelse return null;
    in.family = @intCast(family & 0xffff);
    in.connected = connected != 0;
    in.send_empty = send_empty != 0;
    in.header_size = @intCast(@max(header, 0));
    in.address = if (py.isNone(args[3])) null else py.newref(args[3].?);
    return object.join(t, in, to, args[2].?, user_sock);
}

/// `_detach()`: leave the reactor, drop the queue and the reactor's
/// reference. Called once connection_lost ran, before the socket closes.
fn detach(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    const in = t.inner orelse return py.newref(py.none());
    in.dropQueue();
    object.leaveReactor(t, in);
    return py.newref(py.none());
}

/// An evicted transport's failure (`shared.evictIfStale`): OSError(EBADF)
/// through `_fatal_error`, so connection_lost(exc) next pass (asyncio,
/// which keeps the number, would hand each later send's EBADF to
/// error_received). False with the Python error set when it must abort
/// the caller.
pub fn failGone(t: *Transport) bool {
    const exc = sockio.errnoException(sockio.ebadf) orelse return false;
    py.restoreException(exc);
    return fatalPending(t, msg_gone);
}

fn setProtocolNative(self: ?*Obj, protocol: ?*Obj) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    py.clear(&t.protocol);
    t.protocol = py.newref(protocol.?);
    return py.newref(py.none());
}

fn getWriteBufferSize(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    return c.PyLong_FromSize_t(if (t.inner) |in| in.buffer_size else 0);
}

/// close(): stop receiving; connection_lost(None) once the queue drained.
fn close(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    const in = t.inner orelse return py.newref(py.none());
    if (in.closing) return py.newref(py.none());
    in.closing = true;
    updateInterest(t);
    if (in.queued() > 0) return py.newref(py.none());
    in.conn_lost += 1;
    if (!scheduleConnectionLost(t, py.none())) return null;
    return py.newref(py.none());
}

/// `_force_close(exc)`: drop queued datagrams, connection_lost(exc) next pass.
const forceClose = object.forceClose;

fn abort(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    return forceClose(self, py.none());
}

fn getAddress(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    const in = t.inner orelse return py.newref(py.none());
    return py.newref(in.address orelse py.none());
}

fn getClosing(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    return py.boolean(if (t.inner) |in| in.closing else false);
}

// ------------------------------------------------------------ the object

/// Its own references besides `transport_object`'s, for the collector.
pub fn visitInner(in: *Inner, visit: c.visitproc, arg: ?*anyopaque) c_int {
    const o = in.address orelse return 0;
    return visit.?(o, arg);
}

/// tp_clear's part of `Inner`: nothing of its own can be in a cycle (the
/// queue holds `bytes` and addresses).
pub fn clearInner(_: *Inner) void {}

/// Lets go of what `in` holds but `transport_object`'s fields, before it
/// is freed (dealloc, or a `_setup` that failed to register).
pub fn freeInner(_: *Transport, in: *Inner) void {
    in.dropQueue();
    in.queue.deinit(gpa);
    py.xdecref(in.address);
    py.xdecref(in.last_addr);
}

/// Drops the queued datagrams (`_force_close`).
pub fn dropWrites(in: *Inner) void {
    in.dropQueue();
}

pub var methods = object.methodTable("datagram_received", &.{
    py.methodFast("sendto", sendto, "sendto($self, data, addr=None)\n--\n\nSend one datagram; queue it if the socket is full."),
    py.methodNoArgs("get_write_buffer_size", getWriteBufferSize, "get_write_buffer_size($self, /)\n--\n\nBytes of queued datagrams."),
    py.methodNoArgs("is_closing", shared.isClosing, "is_closing($self, /)\n--\n\nTrue once closing or closed."),
    py.methodNoArgs("close", close, "close($self, /)\n--\n\nFlush, then close; connection_lost(None) follows."),
    py.methodNoArgs("abort", abort, "abort($self, /)\n--\n\nClose now, dropping queued datagrams."),
    py.methodO("_set_protocol", setProtocolNative, null),
    py.methodFast("_setup", setup, null),
    py.methodNoArgs("_detach", detach, null),
});

pub var getsets = object.getsetTable(&.{
    py.getset("_address", getAddress, null),
    py.getset("_closing", getClosing, null),
});

/// Nothing to intern: the texts of its fatal errors are made when needed.
pub fn initNames() void {}

/// Creates `DatagramTransportCore`, derived from `asyncio.DatagramTransport`.
pub fn initTypes(module: *Obj) bool {
    return object.init(module, "DatagramTransport", "DatagramTransportCore", "The native I/O engine of zloop's datagram transports.");
}
