//! `zloop._zloop.ServerConnections`: a server's count of the connections it
//! serves and the list of their transports, kept natively so that a
//! connection accepted and closed costs the server no Python call (asyncio's
//! `Server._attach`/`_detach` and a `WeakSet` entry). `zloop._net.Server`
//! holds one and answers asyncio's API from it: `_active_count`, `_attach`,
//! `_detach`, `close_clients`, `abort_clients`, and `wait_closed`, whose
//! waiters `wakeup` (the server's `_wakeup`) releases once the server is
//! closed and its last connection gone.
//!
//! The list is intrusive (`transport.Transport.conn_prev/conn_next`) and
//! holds no references, as asyncio's `WeakSet` holds none: a transport
//! leaves it when its connection is lost, or when it is freed.
const std = @import("std");
const py = @import("../capi/py.zig");
const c = py.c;
const Obj = py.Obj;
const transport = @import("stream.zig");
const Transport = transport.Transport;

pub const Connections = struct {
    ob_base: Obj,
    /// Connections counted: the transports listed, and bare `_attach()`
    /// calls (CPython's own tests hold a server open that way).
    count: isize,
    /// The transports listed, oldest first.
    head: ?*Transport,
    tail: ?*Transport,
    /// The server was closed (`_close`): the count reaching 0 wakes it.
    closed: bool,
    /// `Server._wakeup`, called when the count reaches 0 after `_close`.
    wakeup: ?*Obj,
};

comptime {
    std.debug.assert(@offsetOf(Connections, "ob_base") == 0);
}

pub var ConnectionsType: ?*c.PyTypeObject = null;

fn isConnections(o: *Obj) bool {
    return c.PyObject_TypeCheck(o, ConnectionsType.?) != 0;
}

/// Lists `t` with `conns` and counts it; `t` holds a reference to `conns`
/// while listed.
pub fn attach(conns_obj: *Obj, t: *Transport) void {
    const s = py.cast(Connections, conns_obj);
    std.debug.assert(t.conns == null);
    t.conns = py.newref(conns_obj);
    t.conn_next = null;
    t.conn_prev = s.tail;
    if (s.tail) |last| last.conn_next = t else s.head = t;
    s.tail = t;
    s.count += 1;
}

/// Takes `t` off its server's list without counting it out (it is being
/// freed: as a `WeakSet` drops a collected transport, the count stays).
pub fn unlink(t: *Transport) void {
    const conns_obj = t.conns orelse return;
    const s = py.cast(Connections, conns_obj);
    if (t.conn_prev) |p| p.conn_next = t.conn_next else s.head = t.conn_next;
    if (t.conn_next) |n| n.conn_prev = t.conn_prev else s.tail = t.conn_prev;
    t.conn_prev = null;
    t.conn_next = null;
    t.conns = null;
    py.decref(conns_obj);
}

/// The connection of `t` is over: off the list, counted out, and the
/// server woken if that was its last one after close(). False with the
/// Python error set when `wakeup` raised.
pub fn detach(t: *Transport) bool {
    const conns_obj = t.conns orelse return true;
    py.incref(conns_obj);
    defer py.decref(conns_obj);
    unlink(t);
    return countOut(py.cast(Connections, conns_obj));
}

fn countOut(s: *Connections) bool {
    s.count -= 1;
    if (s.count != 0 or !s.closed) return true;
    const wakeup = s.wakeup orelse return true;
    py.incref(wakeup);
    defer py.decref(wakeup);
    const r = c.PyObject_CallNoArgs(wakeup) orelse return false;
    py.decref(r);
    return true;
}

// --------------------------------------------------------------- methods

/// `_attach(transport=None)`: counts a connection; a native stream
/// transport is listed too (True), anything else is the caller's to keep
/// (False).
fn attachMethod(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    const s = py.cast(Connections, self.?);
    if (nargs > 1) return py.raise(c.PyExc_TypeError, "_attach(transport=None)");
    const arg: ?*Obj = if (nargs == 1) args[0] else null;
    if (arg) |o| if (transport.isTransport(o)) {
        const t = py.cast(Transport, o);
        if (t.conns == null) {
            attach(self.?, t);
            return py.boolean(true);
        }
    };
    s.count += 1;
    return py.boolean(false);
}

/// `_detach(transport=None)`: counts a connection out (and unlists its
/// transport), waking the server if it was the last after `_close`.
fn detachMethod(self: ?*Obj, args: [*c]const ?*Obj, nargs: py.Ssize, _: ?*Obj) callconv(.c) ?*Obj {
    const s = py.cast(Connections, self.?);
    if (nargs > 1) return py.raise(c.PyExc_TypeError, "_detach(transport=None)");
    const arg: ?*Obj = if (nargs == 1) args[0] else null;
    if (arg) |o| if (transport.isTransport(o)) {
        const t = py.cast(Transport, o);
        if (t.conns == self) {
            if (!detach(t)) return null;
            return py.newref(py.none());
        }
    };
    if (!countOut(s)) return null;
    return py.newref(py.none());
}

/// `_close()`: the server is closed; from now on the count reaching 0
/// wakes it.
fn closeMethod(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    py.cast(Connections, self.?).closed = true;
    return py.newref(py.none());
}

/// `_transports()`: the listed transports, oldest first (a new list).
fn transportsMethod(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
    const s = py.cast(Connections, self.?);
    const list = c.PyList_New(0) orelse return null;
    var it = s.head;
    while (it) |t| : (it = t.conn_next) {
        if (c.PyList_Append(list, py.obj(t)) < 0) {
            py.decref(list);
            return null;
        }
    }
    return list;
}

fn getCount(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
    return c.PyLong_FromSsize_t(py.cast(Connections, self.?).count);
}

// -------------------------------------------------------------- the type

/// `ServerConnections(wakeup)`.
fn new(tp: ?*c.PyTypeObject, args: ?*Obj, kwargs: ?*Obj) callconv(.c) ?*Obj {
    var wakeup: ?*Obj = null;
    var kwlist = [_:null]?[*:0]const u8{ "wakeup", null };
    if (c.PyArg_ParseTupleAndKeywords(args, kwargs, "O:ServerConnections", @ptrCast(&kwlist), &wakeup) == 0) return null;
    if (c.PyCallable_Check(wakeup) == 0) return py.raise(c.PyExc_TypeError, "wakeup must be callable");
    const raw = py.allocInstance(tp) orelse return null;
    const s = py.cast(Connections, raw);
    s.count = 0;
    s.head = null;
    s.tail = null;
    s.closed = false;
    s.wakeup = py.newref(wakeup.?);
    return raw;
}

fn traverse(self: ?*Obj, visit: c.visitproc, arg: ?*anyopaque) callconv(.c) c_int {
    const s = py.cast(Connections, self.?);
    const tp_rc = visit.?(py.obj(c.Py_TYPE(self)), arg);
    if (tp_rc != 0) return tp_rc;
    if (s.wakeup) |w| return visit.?(w, arg);
    return 0;
}

fn clearGc(self: ?*Obj) callconv(.c) c_int {
    py.clear(&py.cast(Connections, self.?).wakeup);
    return 0;
}

fn dealloc(self: ?*Obj) callconv(.c) void {
    const s = py.cast(Connections, self.?);
    c.PyObject_GC_UnTrack(self);
    // Listed transports hold a reference: none is left.
    std.debug.assert(s.head == null);
    py.clear(&s.wakeup);
    py.freeHeapInstance(self.?);
}

var methods = [_]c.PyMethodDef{
    py.methodFast("_attach", attachMethod, "Count a connection; list a native transport (True)."),
    py.methodFast("_detach", detachMethod, "Count a connection out."),
    py.methodNoArgs("_close", closeMethod, "The server is closed."),
    py.methodNoArgs("_transports", transportsMethod, "The listed transports, oldest first."),
    py.sentinel_method,
};

var getsets = [_]c.PyGetSetDef{
    py.getset("count", getCount, null),
    py.sentinel_getset,
};

const doc = "A server's connections: their count and their native transports.";
var spec: c.PyType_Spec = undefined;
var slots = py.gcTypeSlots(doc, &new, &dealloc, &traverse, &clearGc, &methods, &getsets);

pub fn initTypes(module: *Obj) bool {
    spec = .{
        .name = "zloop._zloop.ServerConnections",
        .basicsize = @sizeOf(Connections),
        .itemsize = 0,
        .flags = c.Py_TPFLAGS_DEFAULT | c.Py_TPFLAGS_HAVE_GC,
        .slots = &slots,
    };
    const tp = c.PyType_FromSpec(&spec) orelse return false;
    ConnectionsType = @ptrCast(@alignCast(tp));
    return c.PyModule_AddObjectRef(module, "ServerConnections", tp) >= 0;
}
