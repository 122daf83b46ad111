//! Thin, typed helpers over the translated CPython API: reference counts,
//! singletons and error plumbing. Everything that touches Python.h directly
//! and is used by more than one file lives here.
const std = @import("std");
pub const c = @import("c");

pub const Obj = c.PyObject;

/// Built for CPython 3.14 or later (the extension is built per interpreter):
/// where asyncio's behaviour changed in 3.14, the native side follows it.
pub const at_least_313 = c.PY_VERSION_HEX >= 0x030D0000;
pub const at_least_314 = c.PY_VERSION_HEX >= 0x030E0000;
pub const Ssize = c.Py_ssize_t;

pub inline fn incref(o: *Obj) void {
    c.Py_INCREF(o);
}

pub inline fn decref(o: *Obj) void {
    c.Py_DECREF(o);
}

pub inline fn xdecref(o: ?*Obj) void {
    if (o) |p| c.Py_DECREF(p);
}

/// Returns `o` with a new reference.
pub inline fn newref(o: *Obj) *Obj {
    c.Py_INCREF(o);
    return o;
}

/// Moves a strong reference out of `slot`, leaving null, and drops it.
pub inline fn clear(slot: *?*Obj) void {
    const old = slot.*;
    slot.* = null;
    xdecref(old);
}

/// Sets a `bytes` object's length within its allocation (never beyond the
/// size it was made with), as `_PyBytes_Resize` does in place: the NUL
/// terminator follows the data, and the cached hash is forgotten. For the
/// read buffers the loop lends out and takes back.
pub fn setBytesSize(b: *Obj, len: usize) void {
    const bo: *c.PyBytesObject = @ptrCast(@alignCast(b));
    bo.ob_base.ob_size = @intCast(len);
    bo.ob_shash = -1;
    c.PyBytes_AS_STRING(b)[len] = 0;
}

/// A call's result, consumed: true if there was one, false if the call
/// raised (the Python error stays set).
pub fn consumed(r: ?*Obj) bool {
    decref(r orelse return false);
    return true;
}

pub inline fn none() *Obj {
    return &c._Py_NoneStruct;
}

pub inline fn isNone(o: ?*Obj) bool {
    return o == null or o.? == none();
}

/// `o is True` (a borrowed or null reference).
pub fn isTrue(o: ?*Obj) bool {
    return o == @as(?*Obj, @ptrCast(&c._Py_TrueStruct));
}

pub fn boolean(v: bool) *Obj {
    const o: *Obj = if (v) @ptrCast(&c._Py_TrueStruct) else @ptrCast(&c._Py_FalseStruct);
    return newref(o);
}

/// A zero-filled instance of `tp` (a native type or a Python subclass of
/// one), allocated as `object.__new__` does: through `tp_alloc`, and, on
/// 3.11 and 3.12, with a Python subclass's inline attribute values set up
/// (`_PyObject_InitializeDict`, which PyType_GenericAlloc alone skips).
/// Without them the instance's attributes live in a separate dict from the
/// first assignment, and the interpreter never specializes an attribute or
/// method lookup on it: each `loop.call_soon` or `transport.write` from
/// Python code takes the generic path.
pub fn allocInstance(tp: ?*c.PyTypeObject) ?*Obj {
    const no_args = c.PyTuple_New(0) orelse return null; // the shared empty tuple
    defer decref(no_args);
    return c.PyBaseObject_Type.tp_new.?(tp, no_args, null);
}

/// `o.name(*args)`, `args` a tuple of `*Obj`: a new reference, or null
/// with an exception set. Through PyObject_VectorcallMethod, which finds
/// the method without making a bound method and passes the arguments
/// where they are (PyObject_CallMethodObjArgs walks a C varargs list into
/// a temporary array first).
pub inline fn callMethod(o: *Obj, name: *Obj, args: anytype) ?*Obj {
    const n = args.len;
    // Slot 0 is scratch, so the callee may use PY_VECTORCALL_ARGUMENTS_OFFSET.
    var argv: [n + 2]?*Obj = undefined;
    argv[0] = null;
    argv[1] = o;
    // Each argument must be a `*Obj`: a null one would end the call's
    // arguments early in C's varargs API; here it would crash the callee.
    inline for (0..n) |i| {
        const a: *Obj = args[i];
        argv[2 + i] = a;
    }
    return c.PyObject_VectorcallMethod(name, @ptrCast(&argv[1]), (n + 1) | c.PY_VECTORCALL_ARGUMENTS_OFFSET, null);
}

/// `f(*args)`, `args` a tuple of `*Obj`: a new reference, or null with an
/// exception set (a vectorcall, as `callMethod`).
pub inline fn call(f: *Obj, args: anytype) ?*Obj {
    const n = args.len;
    var argv: [n + 1]?*Obj = undefined;
    argv[0] = null;
    inline for (0..n) |i| argv[i + 1] = args[i];
    return c.PyObject_Vectorcall(f, @ptrCast(&argv[1]), n | c.PY_VECTORCALL_ARGUMENTS_OFFSET, null);
}

pub inline fn cast(comptime T: type, o: anytype) *T {
    return @ptrCast(@alignCast(o));
}

pub inline fn obj(p: anytype) *Obj {
    return @ptrCast(p);
}

/// Sets `exc_type(msg)` and returns null for direct `return raise(...)`.
pub fn raise(exc_type: [*c]Obj, msg: [*:0]const u8) ?*Obj {
    c.PyErr_SetString(exc_type, msg);
    return null;
}

/// Sets an OSError (the errno picks the subclass, as `OSError(errno, msg)`
/// does in Python) for a failed syscall.
pub fn raiseErrno(errno: u16) ?*Obj {
    const e: c_int = errno;
    const args = c.Py_BuildValue("(is)", e, c.strerror(e)) orelse return null;
    return raiseOSError(args);
}

/// `raiseErrno` for a syscall on the file `path`, which the exception
/// carries as its `filename`, as `os.stat(path)`'s does.
pub fn raiseErrnoPath(errno: u16, path: *Obj) ?*Obj {
    const e: c_int = errno;
    const args = c.Py_BuildValue("(isO)", e, c.strerror(e), path) orelse return null;
    return raiseOSError(args);
}

/// Sets `OSError(*args)` (consuming `args`), the subclass its errno picks.
fn raiseOSError(args: *Obj) ?*Obj {
    defer decref(args);
    const exc = c.PyObject_Call(c.PyExc_OSError, args, null) orelse return null;
    defer decref(exc);
    c.PyErr_SetObject(obj(c.Py_TYPE(exc)), exc);
    return null;
}

/// True when the pending exception must abort the loop instead of being
/// reported: KeyboardInterrupt and SystemExit, as `asyncio.Handle._run`.
pub fn pendingIsFatal() bool {
    return c.PyErr_ExceptionMatches(c.PyExc_KeyboardInterrupt) != 0 or
        c.PyErr_ExceptionMatches(c.PyExc_SystemExit) != 0;
}

/// Takes the pending exception as one normalised object (with traceback).
pub fn fetchException() ?*Obj {
    if (@hasDecl(c, "PyErr_GetRaisedException")) {
        return c.PyErr_GetRaisedException();
    }
    var t: [*c]Obj = null;
    var v: [*c]Obj = null;
    var tb: [*c]Obj = null;
    c.PyErr_Fetch(&t, &v, &tb);
    c.PyErr_NormalizeException(&t, &v, &tb);
    if (tb != null and v != null) _ = c.PyException_SetTraceback(v, tb);
    xdecref(t);
    xdecref(tb);
    return v;
}

/// The exception on its way out of the loop (a KeyboardInterrupt or
/// SystemExit a callback raised), set aside while the loop finishes its
/// own work after that callback (work that may call Python, which must
/// not run with an exception pending), and put back by `restore`.
pub const Aside = struct {
    exc: ?*Obj,

    pub fn take() Aside {
        return .{ .exc = if (c.PyErr_Occurred() != null) fetchException() else null };
    }

    /// Puts the set-aside exception back. Should the work have raised
    /// one of its own meanwhile, the first wins, as the loop was
    /// leaving for it already; the second is printed, not lost.
    pub fn restore(a: Aside) void {
        const exc = a.exc orelse return;
        if (c.PyErr_Occurred() != null) c.PyErr_WriteUnraisable(null);
        restoreException(exc);
    }
};

pub fn restoreException(exc: *Obj) void {
    if (@hasDecl(c, "PyErr_SetRaisedException")) {
        c.PyErr_SetRaisedException(exc);
        return;
    }
    const t = obj(c.Py_TYPE(exc));
    incref(t);
    c.PyErr_Restore(t, exc, c.PyException_GetTraceback(exc));
}

pub fn intern(s: [*:0]const u8) *Obj {
    return c.PyUnicode_InternFromString(s) orelse @panic("out of memory interning a string");
}

pub const MethodFast = *const fn (?*Obj, [*c]const ?*Obj, Ssize, ?*Obj) callconv(.c) ?*Obj;
pub const MethodNoArgs = *const fn (?*Obj, ?*Obj) callconv(.c) ?*Obj;

pub fn methodFast(name: [*:0]const u8, f: MethodFast, doc: ?[*:0]const u8) c.PyMethodDef {
    return .{
        .ml_name = name,
        .ml_meth = @ptrCast(f),
        .ml_flags = c.METH_FASTCALL | c.METH_KEYWORDS,
        .ml_doc = doc,
    };
}

pub fn methodNoArgs(name: [*:0]const u8, f: MethodNoArgs, doc: ?[*:0]const u8) c.PyMethodDef {
    return .{ .ml_name = name, .ml_meth = @ptrCast(f), .ml_flags = c.METH_NOARGS, .ml_doc = doc };
}

pub fn methodO(name: [*:0]const u8, f: MethodNoArgs, doc: ?[*:0]const u8) c.PyMethodDef {
    return .{ .ml_name = name, .ml_meth = @ptrCast(f), .ml_flags = c.METH_O, .ml_doc = doc };
}

/// The end of a heap type's tp_dealloc: frees the instance and drops its
/// reference to its type (subtype_dealloc leaves that to this dealloc).
pub fn freeHeapInstance(self: *Obj) void {
    const tp = c.Py_TYPE(self);
    tp.*.tp_free.?(self);
    decref(obj(tp));
}

/// The slots of a type the collector tracks, made from a spec: its doc,
/// `tp_new`, `tp_dealloc`, `tp_traverse`, `tp_clear`, its method and getset
/// tables, and the end. Pointers to the functions and to the (global)
/// tables.
pub fn gcTypeSlots(
    doc: [*:0]const u8,
    new: anytype,
    dealloc: anytype,
    traverse: anytype,
    clear_gc: anytype,
    methods: anytype,
    getsets: anytype,
) [8]c.PyType_Slot {
    return .{
        .{ .slot = c.Py_tp_doc, .pfunc = @ptrCast(@constCast(doc)) },
        .{ .slot = c.Py_tp_new, .pfunc = @ptrCast(@constCast(new)) },
        .{ .slot = c.Py_tp_dealloc, .pfunc = @ptrCast(@constCast(dealloc)) },
        .{ .slot = c.Py_tp_traverse, .pfunc = @ptrCast(@constCast(traverse)) },
        .{ .slot = c.Py_tp_clear, .pfunc = @ptrCast(@constCast(clear_gc)) },
        .{ .slot = c.Py_tp_methods, .pfunc = @ptrCast(methods) },
        .{ .slot = c.Py_tp_getset, .pfunc = @ptrCast(getsets) },
        .{ .slot = 0, .pfunc = null },
    };
}

pub const sentinel_method = std.mem.zeroes(c.PyMethodDef);
pub const sentinel_getset = std.mem.zeroes(c.PyGetSetDef);

pub const Getter = *const fn (?*Obj, ?*anyopaque) callconv(.c) ?*Obj;
pub const Setter = *const fn (?*Obj, ?*Obj, ?*anyopaque) callconv(.c) c_int;

pub fn getset(name: [*:0]const u8, get: Getter, set: ?Setter) c.PyGetSetDef {
    return .{ .name = name, .get = @ptrCast(get), .set = if (set) |s| @ptrCast(s) else null, .doc = null, .closure = null };
}

/// Binds a vectorcall's arguments to `params` (interned names), positional
/// or by keyword, as a Python signature `(p0, ..., pN)` whose parameters
/// from `required` on default to None would: `out[i]` is null for one not
/// given. false: a TypeError is set, worded as CPython's.
pub fn bindArgs(
    comptime fname: [:0]const u8,
    params: []const *Obj,
    required: usize,
    args: [*c]const ?*Obj,
    nargs: Ssize,
    kwnames: ?*Obj,
    out: []?*Obj,
) bool {
    @memset(out, null);
    if (nargs > params.len) {
        if (required == params.len) {
            _ = c.PyErr_Format(c.PyExc_TypeError, fname ++ "() takes %zd positional arguments but %zd were given", params.len + 1, nargs + 1);
        } else {
            _ = c.PyErr_Format(c.PyExc_TypeError, fname ++ "() takes from %zd to %zd positional arguments but %zd were given", required + 1, params.len + 1, nargs + 1);
        }
        return false;
    }
    for (0..@intCast(nargs)) |i| out[i] = args[i];
    if (kwnames) |kw| {
        const nkw = c.PyTuple_Size(kw);
        var k: Ssize = 0;
        while (k < nkw) : (k += 1) {
            const key = c.PyTuple_GetItem(kw, k);
            const slot: usize = for (params, 0..) |p, i| {
                if (key == p or c.PyUnicode_Compare(key, p) == 0) break i;
            } else {
                _ = c.PyErr_Format(c.PyExc_TypeError, fname ++ "() got an unexpected keyword argument '%U'", key);
                return false;
            };
            if (out[slot] != null) {
                _ = c.PyErr_Format(c.PyExc_TypeError, fname ++ "() got multiple values for argument '%U'", key);
                return false;
            }
            out[slot] = args[@intCast(nargs + k)];
        }
    }
    for (out[0..required], params[0..required]) |o, p| if (o == null) {
        _ = c.PyErr_Format(c.PyExc_TypeError, fname ++ "() missing 1 required positional argument: '%U'", p);
        return false;
    };
    return true;
}

/// The arguments of a scheduling method, `name(lead..., *args, context=None)`
/// (call_soon's `callback`, call_later's `delay, callback`), as a vector:
/// `args[0..nargs]` with the leading parameters in front.
pub const CallArgs = struct {
    args: [*c]const ?*Obj,
    nargs: usize,
    context: ?*Obj = null,
};

/// Binds a scheduling method's keywords as asyncio's Python signature
/// would: `context=`, and a leading parameter named by keyword
/// (`call_later(delay=1, callback=f)`), which leaves `*args` empty. `buf`
/// holds the rebuilt vector then (its contents need no initializing); it has
/// room for every leading parameter.
/// null: a TypeError is set, worded as CPython's for a Python function.
pub fn bindScheduleArgs(
    fname: [*:0]const u8,
    args: [*c]const ?*Obj,
    nargs: Ssize,
    kwnames: ?*Obj,
    context_name: *Obj,
    lead: []const [:0]const u8,
    buf: []?*Obj,
) ?CallArgs {
    var out: CallArgs = .{ .args = args, .nargs = @intCast(nargs) };
    const names = kwnames orelse return out;
    @memset(buf, null);
    const nkw: usize = @intCast(c.PyTuple_Size(names));
    const kwv = args + @as(usize, @intCast(nargs));
    var by_kw: usize = 0;
    for (0..nkw) |i| {
        const key = c.PyTuple_GetItem(names, @intCast(i));
        if (key == context_name or c.PyUnicode_Compare(key, context_name) == 0) {
            out.context = kwv[i];
            continue;
        }
        const slot = for (lead, 0..) |pname, j| {
            if (c.PyUnicode_CompareWithASCIIString(key, pname) == 0) break j;
        } else {
            _ = c.PyErr_Format(c.PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fname, key);
            return null;
        };
        if (slot < out.nargs) {
            _ = c.PyErr_Format(c.PyExc_TypeError, "%s() got multiple values for argument '%U'", fname, key);
            return null;
        }
        buf[slot] = kwv[i];
        by_kw += 1;
    }
    if (by_kw == 0) return out;
    // Keywords filled some leading parameters: positionals fill the ones
    // before them, so nothing is left for *args.
    for (0..out.nargs) |j| buf[j] = args[j];
    for (out.nargs..lead.len) |j| {
        if (buf[j] == null) {
            _ = c.PyErr_Format(c.PyExc_TypeError, "%s() missing 1 required positional argument: '%s'", fname, lead[j].ptr);
            return null;
        }
    }
    out.args = buf.ptr;
    out.nargs = lead.len;
    return out;
}
