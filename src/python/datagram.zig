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
//! exception is fatal. Layout and lifecycle are those of `transport.zig`:
//! the type derives from `asyncio.DatagramTransport`, whose `_extra` slot
//! follows the object header; an attached transport holds a reference to
//! itself on the reactor's behalf, dropped by `_detach`.
const std = @import("std");
const core = @import("core");
const py = @import("py.zig");
const c = py.c;
const Obj = py.Obj;
const loop_mod = @import("loop.zig");
const borrowed = @import("borrowed.zig");
const transport_methods = @import("transport_methods.zig");
const shared = transport_methods.Methods(@This());
const linux = std.os.linux;

const gpa = std.heap.c_allocator;

/// Bytes asked of one recvfrom(), as `_SelectorTransport.max_size`.
const max_read = 256 * 1024;
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
const NI_NUMERICHOST = 1;

pub const Transport = extern struct {
    ob_base: Obj,
    /// `asyncio.BaseTransport._extra`: owned by that slot descriptor.
    extra: ?*Obj,
    loop: ?*Obj,
    protocol: ?*Obj,
    inner: ?*Inner,
};

/// A queued datagram: an immutable `bytes` and its address (or null).
const Entry = struct {
    data: *Obj,
    addr: ?*Obj,
};

pub const Inner = struct {
    owner: *Transport,
    /// Queued behind the ready callbacks when the fd is ready (`shared.onReady`).
    io: transport_methods.IoQueued = shared.ioQueued(),
    w: core.IoWatcher,
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
    conn_lost: u32 = 0,
    family: u16,
    /// The socket is connected (`peername` is set): send(), not sendto().
    connected: bool,
    /// 3.13 sends empty datagrams; 3.11 and 3.12 drop them.
    send_empty: bool,
    /// `remote_addr` as given (owned), or null.
    address: ?*Obj = null,
    attached: bool = false,
    started: bool = false,
    paused: bool = false,
    closing: bool = false,
    protocol_paused: bool = false,
    /// The last sender's address, raw and as a Python object (owned), so
    /// a peer sending many datagrams costs one tuple.
    last_raw: linux.sockaddr.storage = undefined,
    last_len: u32 = 0,
    last_addr: ?*Obj = null,
    /// The `contextvars.Context` datagram_received/error_received run in: a
    /// copy of the current context taken when reading starts or resumes, as
    /// asyncio's `_add_reader` copies it into the reader `Handle`.
    context: ?*Obj = null,
    /// The user's socket (`create_datagram_endpoint(sock=)`; owned), or
    /// null for the loop's own: as the stream transport's (transport.zig's
    /// `Inner.sock_owner`), asked for its fd before each system call.
    sock_owner: ?*Obj = null,

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

pub var TransportType: ?*c.PyTypeObject = null;
var spec: c.PyType_Spec = undefined;
var slots = [_]c.PyType_Slot{
    .{ .slot = c.Py_tp_doc, .pfunc = @ptrCast(@constCast("The native I/O engine of zloop's datagram transports.")) },
    .{ .slot = c.Py_tp_new, .pfunc = @ptrCast(@constCast(&new)) },
    .{ .slot = c.Py_tp_dealloc, .pfunc = @ptrCast(@constCast(&dealloc)) },
    .{ .slot = c.Py_tp_traverse, .pfunc = @ptrCast(@constCast(&traverse)) },
    .{ .slot = c.Py_tp_clear, .pfunc = @ptrCast(@constCast(&clearGc)) },
    .{ .slot = c.Py_tp_methods, .pfunc = @ptrCast(&methods) },
    .{ .slot = c.Py_tp_getset, .pfunc = @ptrCast(&getsets) },
    .{ .slot = 0, .pfunc = null },
};

const Names = struct {
    datagram_received: *Obj,
    error_received: *Obj,
    fatal_error: *Obj,
    callback_error: *Obj,
    call_connection_lost: *Obj,
    call_soon: *Obj,
    pause_cb: *Obj,
    resume_cb: *Obj,
    warn_lost: *Obj,
    sendto_py: *Obj,
    addr: *Obj,
    data: *Obj,
    msg_read: *Obj,
    msg_write: *Obj,
    msg_gone: *Obj,
};
var names: Names = undefined;

fn loopOf(t: *Transport) *loop_mod.Loop {
    return py.cast(loop_mod.Loop, t.loop.?);
}

pub fn isWatcher(w: *core.IoWatcher) bool {
    return w.on_ready == shared.onReady;
}

pub fn ownerOfWatcher(w: *core.IoWatcher) *Obj {
    const in: *Inner = @fieldParentPtr("w", w);
    return py.obj(in.owner);
}

// ------------------------------------------------------------- plumbing

/// `OSError(errno, strerror)`: CPython picks the subclass from errno
/// (ConnectionRefusedError...), as the socket module raises.
fn errnoException(errno: u16) ?*Obj {
    const e: c_int = errno;
    const args = c.Py_BuildValue("(is)", e, c.strerror(e)) orelse return null;
    defer py.decref(args);
    return c.PyObject_Call(c.PyExc_OSError, args, null);
}

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
    if (callSelf(t, names.callback_error, .{exc})) return;
    if (py.pendingIsFatal()) return error.Aborted;
    c.PyErr_WriteUnraisable(py.obj(t));
}

/// `protocol.error_received(OSError(errno))`; false with the error pending.
fn errorReceived(t: *Transport, errno: u16) bool {
    const exc = errnoException(errno) orelse return false;
    defer py.decref(exc);
    const r = py.callMethod(t.protocol.?, names.error_received, .{exc}) orelse
        return false;
    py.decref(r);
    return true;
}

/// `self._fatal_error(pending exception, msg)`; false with an error pending.
fn fatalPending(t: *Transport, msg: *Obj) bool {
    if (py.pendingIsFatal()) return false;
    const exc = py.fetchException() orelse return true;
    defer py.decref(exc);
    const r = py.callMethod(py.obj(t), names.fatal_error, .{ exc, msg }) orelse
        return false;
    py.decref(r);
    return true;
}

pub fn updateInterest(t: *Transport) void {
    const in = t.inner orelse return;
    if (!in.attached) return;
    const l = loopOf(t);
    if (!l.has_reactor) return;
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
    return callSelf(t, names.pause_cb, .{});
}

fn maybeResume(t: *Transport) bool {
    const in = t.inner.?;
    if (!in.protocol_paused or in.buffer_size > in.low) return true;
    in.protocol_paused = false;
    return callSelf(t, names.resume_cb, .{});
}

/// `loop.call_soon(self._call_connection_lost, exc)`.
fn scheduleConnectionLost(t: *Transport, exc: *Obj) bool {
    const m = c.PyObject_GetAttr(py.obj(t), names.call_connection_lost) orelse return false;
    defer py.decref(m);
    const r = py.callMethod(t.loop.?, names.call_soon, .{ m, exc });
    if (r) |o| py.decref(o) else return false;
    return true;
}

// ------------------------------------------------------------- addresses

const SockAddr = struct {
    storage: linux.sockaddr.storage = undefined,
    len: u32 = 0,
};

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
fn parseAddress(family: u16, addr: *Obj, out: *SockAddr) bool {
    if (family == linux.AF.UNIX) return parseUnix(addr, out);
    if (c.PyTuple_Check(addr) == 0) return false;
    const n = c.PyTuple_Size(addr);
    const want: py.Ssize = if (family == linux.AF.INET) 2 else if (family == linux.AF.INET6) 4 else return false;
    if (n < 2 or n > want) return false;
    const host = c.PyTuple_GetItem(addr, 0);
    if (c.PyUnicode_Check(host) == 0) return false;
    const port = portOf(c.PyTuple_GetItem(addr, 1)) orelse return false;
    const host_z = c.PyUnicode_AsUTF8(host) orelse {
        c.PyErr_Clear();
        return false;
    };
    if (family == linux.AF.INET) {
        const sa: *linux.sockaddr.in = @ptrCast(&out.storage);
        sa.* = .{ .port = std.mem.nativeToBig(u16, port), .addr = 0 };
        if (inet_pton(linux.AF.INET, host_z, &sa.addr) != 1) return false;
        out.len = @sizeOf(linux.sockaddr.in);
        return true;
    }
    // Flow info and scope id (rare) take Python's path and its checks.
    if (n > 2) return false;
    const sa: *linux.sockaddr.in6 = @ptrCast(&out.storage);
    sa.* = .{ .port = std.mem.nativeToBig(u16, port), .flowinfo = 0, .addr = undefined, .scope_id = 0 };
    if (inet_pton(linux.AF.INET6, host_z, &sa.addr) != 1) return false;
    out.len = @sizeOf(linux.sockaddr.in6);
    return true;
}

fn parseUnix(addr: *Obj, out: *SockAddr) bool {
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
    const sa: *linux.sockaddr.un = @ptrCast(&out.storage);
    if (len == 0 or len >= sa.path.len) return false;
    sa.family = linux.AF.UNIX;
    const src: [*]const u8 = @ptrCast(c.PyBytes_AsString(raw));
    @memcpy(sa.path[0..len], src[0..len]);
    sa.path[len] = 0;
    // An abstract name (leading NUL) counts exactly its bytes.
    const extra: usize = if (src[0] == 0) 0 else 1;
    out.len = @intCast(@offsetOf(linux.sockaddr.un, "path") + len + extra);
    return true;
}

/// The sender's address as the socket module returns it.
fn addressObject(raw: *const linux.sockaddr.storage, len: u32) ?*Obj {
    // No address at all: the sender is an unnamed socket (the other end of
    // a socketpair). CPython's makesockaddr gives None then, and so does
    // asyncio's datagram_received.
    if (len == 0) return py.newref(py.none());
    switch (raw.family) {
        linux.AF.INET => {
            const sa: *const linux.sockaddr.in = @ptrCast(raw);
            const b: [4]u8 = @bitCast(sa.addr);
            var text: [16]u8 = undefined;
            const s = std.fmt.bufPrint(&text, "{d}.{d}.{d}.{d}", .{ b[0], b[1], b[2], b[3] }) catch unreachable;
            const port: c_int = std.mem.bigToNative(u16, sa.port);
            return c.Py_BuildValue("(s#i)", s.ptr, @as(py.Ssize, @intCast(s.len)), port);
        },
        linux.AF.INET6 => {
            const sa: *const linux.sockaddr.in6 = @ptrCast(raw);
            var host: [64]u8 = undefined;
            if (getnameinfo(raw, len, &host, host.len, null, 0, NI_NUMERICHOST) != 0) {
                return py.raise(c.PyExc_OSError, "getnameinfo failed on a datagram's address");
            }
            const port: c_int = std.mem.bigToNative(u16, sa.port);
            const flow: c_uint = std.mem.bigToNative(u32, sa.flowinfo);
            return c.Py_BuildValue("(sikI)", @as([*:0]const u8, @ptrCast(&host)), port, @as(c_ulong, flow), sa.scope_id);
        },
        linux.AF.UNIX => {
            const sa: *const linux.sockaddr.un = @ptrCast(raw);
            const path_off = @offsetOf(linux.sockaddr.un, "path");
            const n: usize = if (len > path_off) len - path_off else 0;
            if (n > 0 and sa.path[0] == 0) {
                return c.PyBytes_FromStringAndSize(@ptrCast(&sa.path), @intCast(n));
            }
            const end = std.mem.indexOfScalar(u8, sa.path[0..n], 0) orelse n;
            return c.PyUnicode_DecodeFSDefaultAndSize(@ptrCast(&sa.path), @intCast(end));
        },
        else => return py.raise(c.PyExc_OSError, "datagram from an unsupported address family"),
    }
}

/// The sender's address, reusing the previous object for the same peer.
fn senderAddress(in: *Inner, raw: *const linux.sockaddr.storage, len: u32) ?*Obj {
    const new_bytes = std.mem.asBytes(raw)[0..len];
    if (in.last_addr) |a| {
        if (in.last_len == len and std.mem.eql(u8, std.mem.asBytes(&in.last_raw)[0..len], new_bytes)) {
            return py.newref(a);
        }
    }
    const a = addressObject(raw, len) orelse return null;
    py.clear(&in.last_addr);
    in.last_addr = py.newref(a);
    @memcpy(std.mem.asBytes(&in.last_raw)[0..len], new_bytes);
    in.last_len = len;
    return a;
}

// --------------------------------------------------------------- sending

const Sent = enum { sent, would_block, failed };

/// One datagram out. `failed`: the error went to error_received or
/// _fatal_error already. error.Raised: an exception is pending for the
/// caller (from error_received, or one that must abort).
fn sendOne(t: *Transport, data_obj: *Obj, data: []const u8, addr: ?*Obj) error{Raised}!Sent {
    const in = t.inner.?;
    var sa: SockAddr = .{};
    var rc: usize = undefined;
    if (in.connected) {
        rc = linux.sendto(in.sysFd(), data.ptr, data.len, 0, null, 0);
    } else if (addr != null and parseAddress(in.family, addr.?, &sa)) {
        rc = linux.sendto(in.sysFd(), data.ptr, data.len, 0, @ptrCast(&sa.storage), sa.len);
    } else {
        return sendPython(t, data_obj, addr);
    }
    switch (linux.errno(rc)) {
        .SUCCESS => return .sent,
        .AGAIN, .INTR => return .would_block,
        else => |e| {
            if (!errorReceived(t, @intFromEnum(e))) return error.Raised;
            return .failed;
        },
    }
}

/// `self._sock.sendto(data, addr)` through Python, with asyncio's mapping
/// of what it raises.
fn sendPython(t: *Transport, data_obj: *Obj, addr: ?*Obj) error{Raised}!Sent {
    const a = addr orelse py.none();
    const r = py.callMethod(py.obj(t), names.sendto_py, .{ data_obj, a });
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
        const res = py.callMethod(t.protocol.?, names.error_received, .{exc}) orelse
            return error.Raised;
        py.decref(res);
        return .failed;
    }
    if (!fatalPending(t, names.msg_write)) return error.Raised;
    return .failed;
}

fn isBytesLike(o: *Obj) bool {
    return c.PyBytes_Check(o) != 0 or c.PyByteArray_Check(o) != 0 or c.PyMemoryView_Check(o) != 0;
}

/// `sendto(data, addr=None)`.
fn sendto(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, kwnames: ?*Obj) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    var bound: [2]?*Obj = undefined;
    if (!py.bindArgs("sendto", &.{ names.data, names.addr }, 1, args, nargs, kwnames, &bound)) return null;
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
            !callSelf(t, names.warn_lost, .{})) return .raised;
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
    if (!fatalPending(t, names.msg_write)) return null;
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

/// Runs from the ready queue (see `shared.onReady`).
pub fn dispatchReady(w: *core.IoWatcher, ev: core.reactor.Event) core.RunError!void {
    const in: *Inner = @fieldParentPtr("w", w);
    const t = in.owner;
    // The callbacks below may close the transport and drop the reactor's
    // reference; keep it alive until this dispatch is over.
    py.incref(py.obj(t));
    defer py.decref(py.obj(t));
    const ctx = in.context orelse return dispatch(t, ev);
    py.incref(ctx);
    defer py.decref(ctx);
    if (c.PyContext_Enter(ctx) < 0) return reportPending(t);
    const result = dispatch(t, ev);
    if (c.PyContext_Exit(ctx) < 0) return reportPending(t);
    return result;
}

fn dispatch(t: *Transport, ev: core.reactor.Event) core.RunError!void {
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
    var raw: linux.sockaddr.storage = undefined;
    @memset(std.mem.asBytes(&raw)[0..@sizeOf(linux.sockaddr.in6)], 0);
    var len: u32 = @sizeOf(linux.sockaddr.storage);
    const rc = linux.recvfrom(in.sysFd(), &recv_buf, recv_buf.len, 0, @ptrCast(&raw), &len);
    switch (linux.errno(rc)) {
        .SUCCESS => {},
        .AGAIN, .INTR => return,
        else => |e| {
            if (!errorReceived(t, @intFromEnum(e))) try reportPending(t);
            return;
        },
    }
    const data = c.PyBytes_FromStringAndSize(@ptrCast(&recv_buf), @intCast(rc)) orelse return reportPending(t);
    defer py.decref(data);
    const addr = senderAddress(in, &raw, @min(len, @sizeOf(linux.sockaddr.storage))) orelse {
        if (!fatalPending(t, names.msg_read)) try reportPending(t);
        return;
    };
    defer py.decref(addr);
    const r = py.callMethod(t.protocol.?, names.datagram_received, .{ data, addr });
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

pub fn innerOrRaise(self: ?*Obj) ?*Inner {
    const t = py.cast(Transport, self.?);
    if (t.inner) |in| return in;
    c.PyErr_SetString(c.PyExc_RuntimeError, "transport is not set up");
    return null;
}

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
    if (t.inner != null) return py.raise(c.PyExc_RuntimeError, "transport already set up");
    const loop_obj = args[0].?;
    if (c.PyObject_TypeCheck(loop_obj, &loop_mod.LoopType) == 0) {
        return py.raise(c.PyExc_TypeError, "_setup() expects a zloop loop");
    }
    const l = py.cast(loop_mod.Loop, loop_obj);
    if (l.closed or !l.has_reactor) return py.raise(c.PyExc_RuntimeError, "Event loop is closed");
    const fd_long = longArg(args[1]) orelse return null;
    if (fd_long < 0 or fd_long > std.math.maxInt(i32)) return py.raise(c.PyExc_ValueError, "Invalid file descriptor");
    const fd: i32 = @intCast(fd_long);
    const registered = loop_mod.claimFd(l, fd) orelse return null;
    const connected = c.PyObject_IsTrue(args[4]);
    const send_empty = c.PyObject_IsTrue(args[6]);
    if (connected < 0 or send_empty < 0) return null;
    const family = longArg(args[5]) orelse return null;
    const header = longArg(args[7]) orelse return null;
    const sock_owner: ?*Obj = if (py.isNone(args[8])) null else args[8].?;
    const in = gpa.create(Inner) catch return c.PyErr_NoMemory();
    in.* = .{
        .owner = t,
        .w = .{
            .fd = fd,
            .on_ready = shared.onReady,
            .registered = registered,
            .borrowed = sock_owner != null,
        },
        .family = @intCast(family & 0xffff),
        .connected = connected != 0,
        .send_empty = send_empty != 0,
        .header_size = @intCast(@max(header, 0)),
        .address = if (py.isNone(args[3])) null else py.newref(args[3].?),
    };
    l.reactor.attach(&in.w) catch |err| {
        py.xdecref(in.address);
        gpa.destroy(in);
        return loop_mod.attachFailed(err);
    };
    in.attached = true;
    if (sock_owner) |o| in.sock_owner = py.newref(o);
    t.inner = in;
    py.clear(&t.loop);
    t.loop = py.newref(loop_obj);
    py.clear(&t.protocol);
    t.protocol = py.newref(args[2].?);
    py.incref(py.obj(t)); // the reactor's reference, dropped by _detach
    return py.newref(py.none());
}

fn leaveReactor(t: *Transport, in: *Inner) void {
    if (!in.attached) return;
    in.attached = false;
    const l = loopOf(t);
    if (l.has_reactor and l.reactor.watcherFor(in.w.fd) == &in.w) l.reactor.detach(&in.w);
    py.decref(py.obj(t));
}

/// `_detach()`: leave the reactor, drop the queue and the reactor's
/// reference. Called once connection_lost ran, before the socket closes.
fn detach(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    const in = t.inner orelse return py.newref(py.none());
    in.dropQueue();
    leaveReactor(t, in);
    return py.newref(py.none());
}

pub const evictIfStale = shared.evictIfStale;

/// An evicted transport's failure (`shared.evictIfStale`): OSError(EBADF)
/// through `_fatal_error`, so connection_lost(exc) next pass (asyncio,
/// which keeps the number, would hand each later send's EBADF to
/// error_received). False with the Python error set when it must abort
/// the caller.
pub fn failGone(t: *Transport) bool {
    const exc = errnoException(@intFromEnum(linux.E.BADF)) orelse return false;
    py.restoreException(exc);
    return fatalPending(t, names.msg_gone);
}

/// Called by the loop's close() for a transport still registered: the
/// reactor goes away, so leave it (an unclosed transport is then collected
/// and warns, as asyncio's do).
pub fn loopClosing(w: *core.IoWatcher) void {
    const in: *Inner = @fieldParentPtr("w", w);
    leaveReactor(in.owner, in);
}

fn startReading(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const in = innerOrRaise(self) orelse return null;
    if (!captureContext(in)) return null;
    in.started = true;
    updateInterest(py.cast(Transport, self.?));
    return py.newref(py.none());
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
fn forceClose(self: ?*Obj, exc: ?*Obj) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    const in = t.inner orelse return py.newref(py.none());
    if (in.conn_lost > 0) return py.newref(py.none());
    in.dropQueue();
    in.closing = true;
    updateInterest(t);
    in.conn_lost += 1;
    if (!scheduleConnectionLost(t, exc.?)) return null;
    return py.newref(py.none());
}

fn abort(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    return forceClose(self, py.none());
}

fn getProtocol(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    return py.newref(t.protocol orelse py.none());
}

fn getProtocolAttr(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    return getProtocol(self, null);
}

fn getConnLost(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    return c.PyLong_FromUnsignedLong(if (t.inner) |in| in.conn_lost else 0);
}

fn getFd(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    return c.PyLong_FromLong(if (t.inner) |in| in.w.fd else -1);
}

fn getAddress(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    const in = t.inner orelse return py.newref(py.none());
    return py.newref(in.address orelse py.none());
}

fn getProtocolPaused(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    return py.boolean(if (t.inner) |in| in.protocol_paused else false);
}

fn getClosing(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    const t = py.cast(Transport, self.?);
    return py.boolean(if (t.inner) |in| in.closing else false);
}

// -------------------------------------------------------------- the type

fn new(tp: ?*c.PyTypeObject, _: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const raw = py.allocInstance(tp) orelse return null;
    const t = py.cast(Transport, raw);
    t.extra = null;
    t.loop = null;
    t.protocol = null;
    t.inner = null;
    return raw;
}

fn traverse(self: ?*Obj, visit: c.visitproc, arg: ?*anyopaque) callconv(.c) c_int {
    const t = py.cast(Transport, self.?);
    // A heap type's instances own a reference to it (subtype_traverse
    // leaves that to the first heap type with its own traverse).
    const tp_rc = visit.?(py.obj(c.Py_TYPE(self)), arg);
    if (tp_rc != 0) return tp_rc;
    inline for (.{ t.extra, t.loop, t.protocol }) |m| if (m) |o| {
        const rc = visit.?(o, arg);
        if (rc != 0) return rc;
    };
    if (t.inner) |in| inline for (.{ in.address, in.context, in.sock_owner, in.limits }) |m| if (m) |o| {
        const rc = visit.?(o, arg);
        if (rc != 0) return rc;
    };
    return 0;
}

fn clearGc(self: ?*Obj) callconv(.c) c_int {
    const t = py.cast(Transport, self.?);
    py.clear(&t.extra);
    py.clear(&t.protocol);
    if (t.inner) |in| {
        py.clear(&in.context);
        py.clear(&in.limits);
    }
    return 0;
}

fn dealloc(self: ?*Obj) callconv(.c) void {
    const t = py.cast(Transport, self.?);
    c.PyObject_GC_UnTrack(self);
    if (t.inner) |in| {
        // An attached transport holds a reference to itself.
        std.debug.assert(!in.attached);
        in.dropQueue();
        in.queue.deinit(gpa);
        py.xdecref(in.address);
        py.xdecref(in.last_addr);
        py.xdecref(in.context);
        py.xdecref(in.sock_owner);
        py.xdecref(in.limits);
        gpa.destroy(in);
        t.inner = null;
    }
    py.clear(&t.extra);
    py.clear(&t.protocol);
    py.clear(&t.loop);
    // A heap type: subtype_dealloc leaves the instance's reference to its
    // type for this dealloc to drop.
    const tp = c.Py_TYPE(self);
    tp.*.tp_free.?(self);
    py.decref(py.obj(tp));
}

var methods = [_]c.PyMethodDef{
    py.methodFast("sendto", sendto, "sendto($self, data, addr=None)\n--\n\nSend one datagram; queue it if the socket is full."),
    py.methodNoArgs("get_write_buffer_size", getWriteBufferSize, "get_write_buffer_size($self, /)\n--\n\nBytes of queued datagrams."),
    py.methodNoArgs("get_write_buffer_limits", shared.getWriteBufferLimits, "get_write_buffer_limits($self, /)\n--\n\n(low, high) water marks."),
    py.methodNoArgs("pause_reading", shared.pauseReading, "pause_reading($self, /)\n--\n\nStop calling datagram_received()."),
    py.methodNoArgs("resume_reading", shared.resumeReading, "resume_reading($self, /)\n--\n\nResume calling datagram_received()."),
    py.methodNoArgs("is_reading", shared.isReading, "is_reading($self, /)\n--\n\nTrue while receiving."),
    py.methodNoArgs("is_closing", shared.isClosing, "is_closing($self, /)\n--\n\nTrue once closing or closed."),
    py.methodNoArgs("close", close, "close($self, /)\n--\n\nFlush, then close; connection_lost(None) follows."),
    py.methodNoArgs("abort", abort, "abort($self, /)\n--\n\nClose now, dropping queued datagrams."),
    py.methodNoArgs("get_protocol", getProtocol, "get_protocol($self, /)\n--\n\nThe current protocol."),
    py.methodO("_force_close", forceClose, null),
    py.methodO("_set_protocol", setProtocolNative, null),
    py.methodFast("_setup", setup, null),
    py.methodFast("_set_limits", shared.setLimits, null),
    py.methodNoArgs("_start_reading", startReading, null),
    py.methodNoArgs("_detach", detach, null),
    py.sentinel_method,
};

var getsets = [_]c.PyGetSetDef{
    py.getset("_protocol", getProtocolAttr, null),
    py.getset("_conn_lost", getConnLost, null),
    py.getset("_sock_fd", getFd, null),
    py.getset("_address", getAddress, null),
    py.getset("_protocol_paused", getProtocolPaused, null),
    py.getset("_closing", getClosing, null),
    py.sentinel_getset,
};

fn initNames() void {
    names = .{
        .datagram_received = py.intern("datagram_received"),
        .error_received = py.intern("error_received"),
        .fatal_error = py.intern("_fatal_error"),
        .callback_error = py.intern("_callback_error"),
        .call_connection_lost = py.intern("_call_connection_lost"),
        .call_soon = py.intern("call_soon"),
        .pause_cb = py.intern("_pause_protocol"),
        .resume_cb = py.intern("_resume_protocol"),
        .warn_lost = py.intern("_warn_write_after_lost"),
        .sendto_py = py.intern("_sendto_py"),
        .addr = py.intern("addr"),
        .data = py.intern("data"),
        .msg_read = py.intern("Fatal read error on datagram transport"),
        .msg_write = py.intern("Fatal write error on datagram transport"),
        .msg_gone = py.intern("Fatal error on datagram transport: its socket was closed"),
    };
}

/// Creates the type with `asyncio.DatagramTransport` as its base.
pub fn initTypes(module: *Obj) bool {
    initNames();
    const asyncio = c.PyImport_ImportModule("asyncio") orelse return false;
    defer py.decref(asyncio);
    const base_obj = c.PyObject_GetAttrString(asyncio, "DatagramTransport") orelse return false;
    defer py.decref(base_obj);
    const base: *c.PyTypeObject = @ptrCast(@alignCast(base_obj));
    // The `_extra` slot of asyncio.BaseTransport must be where `extra` is.
    if (base.tp_basicsize != @offsetOf(Transport, "loop") or base.tp_dictoffset != 0) {
        _ = py.raise(c.PyExc_ImportError, "zloop: unexpected asyncio.DatagramTransport layout");
        return false;
    }
    spec = .{
        .name = "zloop._zloop.DatagramTransportCore",
        .basicsize = @sizeOf(Transport),
        .itemsize = 0,
        .flags = c.Py_TPFLAGS_DEFAULT | c.Py_TPFLAGS_BASETYPE | c.Py_TPFLAGS_HAVE_GC,
        .slots = &slots,
    };
    const bases = c.PyTuple_Pack(1, base_obj) orelse return false;
    defer py.decref(bases);
    const tp = c.PyType_FromSpecWithBases(&spec, bases) orelse return false;
    TransportType = @ptrCast(@alignCast(tp));
    return c.PyModule_AddObjectRef(module, "DatagramTransportCore", tp) >= 0;
}
