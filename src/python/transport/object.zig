//! The Python object both native transports are, the stream transport
//! (stream.zig) and the datagram transport (datagram.zig): its layout
//! under an asyncio base class, the type made from a spec, its GC slots,
//! joining and leaving the reactor, the hand-over of connection_lost, and
//! the getters of the fields both have. `methods.zig` holds the
//! transport methods both share; this file holds the object around them.
//!
//! Each file instantiates `Object(@This())`. Besides what
//! methods.zig asks of it, the file provides `Transport`
//! (`Layout(Inner)`, or an extern struct that starts with its fields and
//! adds its own: checked below), `Inner` with `conn_lost`,
//! `protocol_paused`, `attached`, and `context`, `sock_owner` and `limits`
//! (owned, or null), and:
//!   `dispatch(t, ev)`        the readiness work, in the protocol's context
//!   `dispatchFailed(t)`      a Python error under it that must be reported
//!   `dropWrites(in)`         drops what waits to be sent (abort, errors)
//!   `visitInner(in, visit, arg) c_int`, `clearInner(in)`, `freeInner(t, in)`
//!                            its own references, for the GC slots (the ones
//!                            above are this file's)
//!   `methods`, `getsets`     the type's tables (`methodTable`, `getsetTable`)
//!   `initNames()`            interns the texts of its own errors
//! and, where it has them:
//!   `visitObject(t, visit, arg) c_int`, `clearObject(t)`, `freeObject(t)`
//!                            the references in its own fields of `Transport`
//!   `finalize(self)`         the type's tp_finalize
//!   `queueConnectionLost(t, exc, own) bool`
//!                            connection_lost queued natively, outside debug
//!                            mode (see `scheduleConnectionLost`)
const std = @import("std");
const core = @import("core");
const py = @import("../capi/py.zig");
const c = py.c;
const Obj = py.Obj;
const transport_methods = @import("methods.zig");
const loop_mod = @import("../loop/loop.zig");
const sockio = @import("../sock/io.zig");
const state = @import("../capi/state.zig");

const gpa = std.heap.c_allocator;

/// The object: the type's base is the asyncio class itself (set at
/// import), so `isinstance(t, asyncio.Transport)` holds. Its
/// `asyncio.BaseTransport` declares `__slots__ = ('_extra',)`, which puts
/// `_extra` right after the object header: `extra` sits there. Everything
/// the I/O path needs lives in a separately allocated `Inner`, so the
/// layout stays an `extern struct`.
pub fn Layout(comptime Inner: type) type {
    return extern struct {
        ob_base: Obj,
        /// `asyncio.BaseTransport._extra`: owned by that slot descriptor.
        extra: ?*Obj,
        loop: ?*Obj,
        protocol: ?*Obj,
        inner: ?*Inner,
    };
}

/// The names the native transports call, interned once: their own
/// cold-path helpers (in `zloop._net` and `zloop._udp`), the protocols'
/// callbacks, the loop's call_soon, and their keyword arguments.
pub const Names = struct {
    fatal_error: *Obj,
    call_connection_lost: *Obj,
    call_soon: *Obj,
    pause_cb: *Obj,
    resume_cb: *Obj,
    warn_lost: *Obj,
    callback_error: *Obj,
    sendto_py: *Obj,
    data_received: *Obj,
    eof_received: *Obj,
    get_buffer: *Obj,
    buffer_updated: *Obj,
    datagram_received: *Obj,
    error_received: *Obj,
    data: *Obj,
    list_of_data: *Obj,
    addr: *Obj,
    debug_log: *Obj,
    pauses_reading: *Obj,
    resumes_reading: *Obj,
    received_eof: *Obj,
};
pub var names: Names = undefined;

fn initNames() void {
    names = .{
        .fatal_error = py.intern("_fatal_error"),
        .call_connection_lost = py.intern("_call_connection_lost"),
        .call_soon = py.intern("call_soon"),
        .pause_cb = py.intern("_pause_protocol"),
        .resume_cb = py.intern("_resume_protocol"),
        .warn_lost = py.intern("_warn_write_after_lost"),
        .callback_error = py.intern("_callback_error"),
        .sendto_py = py.intern("_sendto_py"),
        .data_received = py.intern("data_received"),
        .eof_received = py.intern("eof_received"),
        .get_buffer = py.intern("get_buffer"),
        .buffer_updated = py.intern("buffer_updated"),
        .datagram_received = py.intern("datagram_received"),
        .error_received = py.intern("error_received"),
        .data = py.intern("data"),
        .list_of_data = py.intern("list_of_data"),
        .addr = py.intern("addr"),
        .debug_log = py.intern("_debug_log"),
        .pauses_reading = py.intern("pauses reading"),
        .resumes_reading = py.intern("resumes reading"),
        .received_eof = py.intern("received EOF"),
    };
}

/// A transport's place in the loop's ready queue (methods.zig).
pub const IoQueued = transport_methods.IoQueued;

/// `_setup`'s loop and fd, checked as both transports check them.
pub const Target = struct {
    loop_obj: *Obj,
    loop: *loop_mod.Loop,
    fd: i32,
};

pub fn Object(comptime M: type) type {
    const Transport = M.Transport;
    const Inner = M.Inner;
    comptime {
        // A file's own `Transport` starts as `Layout(Inner)` does.
        const Base = Layout(Inner);
        const info = @typeInfo(Base).@"struct";
        for (info.field_names, info.field_types) |name, T| {
            if (@offsetOf(Transport, name) != @offsetOf(Base, name) or @FieldType(Transport, name) != T) {
                @compileError("Transport does not start as transport_object.Layout: " ++ name);
            }
        }
    }
    return struct {
        /// The transport methods both share (methods.zig).
        pub const methods = transport_methods.Methods(M);

        pub var type_obj: ?*c.PyTypeObject = null;
        var spec: c.PyType_Spec = undefined;
        const finalize_slot = if (@hasDecl(M, "finalize")) [_]c.PyType_Slot{
            .{ .slot = c.Py_tp_finalize, .pfunc = @ptrCast(@constCast(&M.finalize)) },
        } else [0]c.PyType_Slot{};
        var slots = [_]c.PyType_Slot{
            .{ .slot = c.Py_tp_doc, .pfunc = null }, // set by `init`
            .{ .slot = c.Py_tp_new, .pfunc = @ptrCast(@constCast(&new)) },
            .{ .slot = c.Py_tp_dealloc, .pfunc = @ptrCast(@constCast(&dealloc)) },
            .{ .slot = c.Py_tp_traverse, .pfunc = @ptrCast(@constCast(&traverse)) },
            .{ .slot = c.Py_tp_clear, .pfunc = @ptrCast(@constCast(&clearGc)) },
            .{ .slot = c.Py_tp_methods, .pfunc = @ptrCast(&M.methods) },
            .{ .slot = c.Py_tp_getset, .pfunc = @ptrCast(&M.getsets) },
        } ++ finalize_slot ++ [_]c.PyType_Slot{
            .{ .slot = 0, .pfunc = null },
        };

        pub fn loopOf(t: *Transport) *loop_mod.Loop {
            return py.cast(loop_mod.Loop, t.loop.?);
        }

        /// The loop whose reactor an attached transport's watcher is in;
        /// null when the transport is gone, detached, or its loop closed.
        pub fn attachedLoop(t: *Transport) ?*loop_mod.Loop {
            const in = t.inner orelse return null;
            if (!in.attached) return null;
            const l = loopOf(t);
            return if (l.has_reactor) l else null;
        }

        /// Whether reactor watcher `w` is one of this kind of transport's.
        pub fn isWatcher(w: *core.IoWatcher) bool {
            return w.on_ready == methods.onReady;
        }

        /// The transport owning `w` (`isWatcher`).
        pub fn ownerOfWatcher(w: *core.IoWatcher) *Obj {
            const in: *Inner = @fieldParentPtr("w", w);
            return py.obj(in.owner);
        }

        pub fn innerOrRaise(self: ?*Obj) ?*Inner {
            const t = py.cast(Transport, self.?);
            if (t.inner) |in| return in;
            c.PyErr_SetString(c.PyExc_RuntimeError, "transport is not set up");
            return null;
        }

        // ------------------------------------------------ the reactor

        /// A new `Inner` for `t`, watching `to.fd` (not registered yet:
        /// `join`); every other field at its default. `registered`: what
        /// `loop.claimFd` said; `sock`: the user's socket the fd came from,
        /// or null. Null with MemoryError.
        pub fn newInner(t: *Transport, to: Target, registered: bool, sock: ?*Obj) ?*Inner {
            const in = gpa.create(Inner) catch {
                _ = c.PyErr_NoMemory();
                return null;
            };
            in.* = .{
                .owner = t,
                .w = .{
                    .fd = to.fd,
                    .on_ready = methods.onReady,
                    .registered = registered,
                    // User code may close it behind the loop's back.
                    .borrowed = sock != null,
                },
            };
            return in;
        }

        /// `_setup(loop, fd, ...)`'s first checks: not set up yet, a
        /// zloop loop still open, a valid fd. Null with the error set.
        pub fn target(t: *Transport, loop_arg: ?*Obj, fd_arg: ?*Obj) ?Target {
            if (t.inner != null) return refuse(c.PyExc_RuntimeError, "transport already set up");
            const loop_obj = loop_arg.?;
            if (c.PyObject_TypeCheck(loop_obj, &loop_mod.LoopType) == 0) {
                return refuse(c.PyExc_TypeError, "_setup() expects a zloop loop");
            }
            const l = py.cast(loop_mod.Loop, loop_obj);
            if (l.closed or !l.has_reactor) return refuse(c.PyExc_RuntimeError, "Event loop is closed");
            const fd = c.PyLong_AsLong(fd_arg);
            if (fd == -1 and c.PyErr_Occurred() != null) return null;
            if (fd < 0 or fd > std.math.maxInt(i32)) return refuse(c.PyExc_ValueError, "Invalid file descriptor");
            return .{ .loop_obj = loop_obj, .loop = l, .fd = @intCast(fd) };
        }

        /// Registers `in` (made by the caller, which gives it up) with the
        /// reactor, no interest yet, and makes it the transport's: its
        /// loop, protocol and `sock` (the user's socket the fd came from,
        /// or null), and the reactor's reference to the transport,
        /// dropped by `leaveReactor`. Null with the error set (`in` is
        /// freed then).
        pub fn join(t: *Transport, in: *Inner, to: Target, protocol: *Obj, sock: ?*Obj) ?*Obj {
            to.loop.reactor.attach(&in.w) catch |err| {
                M.freeInner(t, in);
                gpa.destroy(in);
                return loop_mod.attachFailed(err);
            };
            // Before the loop's first send on it.
            sockio.noSigpipe(to.fd);
            in.attached = true;
            if (sock) |o| in.sock_owner = py.newref(o);
            t.inner = in;
            py.clear(&t.loop);
            t.loop = py.newref(to.loop_obj);
            py.clear(&t.protocol);
            t.protocol = py.newref(protocol);
            takeHold(t, in);
            return py.newref(py.none());
        }

        /// The reactor's reference, taken when the transport joins it.
        pub fn takeHold(t: *Transport, in: *Inner) void {
            py.incref(py.obj(t));
            if (@hasField(Inner, "held")) in.held = true;
        }

        /// Holds the reactor's reference while `need`, lets go of it
        /// otherwise (a file whose `Inner` has `held`; the others hold it
        /// while attached). Letting go may free `t`: the caller holds a
        /// reference of its own, or calls this last.
        pub fn holdWhile(t: *Transport, in: *Inner, need: bool) void {
            if (!@hasField(Inner, "held")) return;
            if (need == in.held or !in.attached) return;
            in.held = need;
            if (need) py.incref(py.obj(t)) else py.decref(py.obj(t));
        }

        /// Leaves the reactor and drops its reference if held (once
        /// connection_lost ran, before the socket closes; or the loop
        /// closes; or the transport is collected). Idempotent.
        pub fn leaveReactor(t: *Transport, in: *Inner) void {
            if (!in.attached) return;
            in.attached = false;
            const l = loopOf(t);
            if (l.has_reactor and l.reactor.watcherFor(in.w.fd) == &in.w) l.reactor.detach(&in.w);
            const held = if (@hasField(Inner, "held")) in.held else true;
            if (@hasField(Inner, "held")) in.held = false;
            if (held) py.decref(py.obj(t));
        }

        /// Called by the loop's close() for a transport still registered:
        /// the reactor goes away, so leave it (an unclosed transport is
        /// then collected and warns, as asyncio's do).
        pub fn loopClosing(w: *core.IoWatcher) void {
            const in: *Inner = @fieldParentPtr("w", w);
            leaveReactor(in.owner, in);
        }

        /// Runs from the ready queue (see `transport_methods.onReady`). In
        /// debug mode it is timed as asyncio times the transport's reader
        /// or writer Handle, which it stands for (`loop.checkSlowIo`);
        /// outside it costs one test.
        pub fn dispatchReady(w: *core.IoWatcher, ev: core.reactor.Event) core.RunError!void {
            const in: *Inner = @fieldParentPtr("w", w);
            const t = in.owner;
            // The callbacks below may close the transport and drop the
            // reactor's reference; keep it alive until this dispatch is over.
            py.incref(py.obj(t));
            defer py.decref(py.obj(t));
            const l = loopOf(t);
            if (!l.debug) return dispatchIn(t, in, ev);
            const t0 = core.sys.monotonic_s();
            // A KeyboardInterrupt out of it is not timed, as asyncio's.
            try dispatchIn(t, in, ev);
            const reading = ev.readable or !ev.writable;
            return loop_mod.checkSlowIo(l, py.obj(t), reading, core.sys.monotonic_s() - t0);
        }

        /// In debug mode, asyncio's debug line `<transport> <what>`
        /// (`what`: one of `names`' texts); a failure to log goes to
        /// sys.unraisablehook, a KeyboardInterrupt stays pending.
        pub fn debugLog(t: *Transport, what: *Obj) void {
            if (!loopOf(t).debug) return;
            if (py.consumed(py.callMethod(py.obj(t), names.debug_log, .{what}))) return;
            if (!py.pendingIsFatal()) c.PyErr_WriteUnraisable(py.obj(t));
        }

        fn dispatchIn(t: *Transport, in: *Inner, ev: core.reactor.Event) core.RunError!void {
            // Protocol callbacks see the context captured when reading
            // started (a ContextVar set around create_server or
            // create_connection is visible in data_received, as with
            // asyncio's reader Handle).
            const ctx = in.context orelse return M.dispatch(t, ev);
            py.incref(ctx);
            defer py.decref(ctx);
            if (c.PyContext_Enter(ctx) < 0) return M.dispatchFailed(t);
            const result = M.dispatch(t, ev);
            if (c.PyContext_Exit(ctx) < 0) return M.dispatchFailed(t);
            return result;
        }

        // ------------------------------------------------- the ending

        /// `loop.call_soon(self._call_connection_lost, exc)`, with
        /// `context=` the transport's own where it keeps one for its whole
        /// life (a stream transport's `context_fixed`). A file with
        /// `queueConnectionLost` queues it itself outside debug mode (where
        /// a Handle is timed and named in reports), passing that context
        /// or null.
        pub fn scheduleConnectionLost(t: *Transport, exc: *Obj) bool {
            const own = if (@hasField(Inner, "context_fixed")) fixedContext(t) else null;
            if (@hasDecl(M, "queueConnectionLost")) {
                const l = loopOf(t);
                if (l.closed) {
                    _ = py.raise(c.PyExc_RuntimeError, "Event loop is closed");
                    return false;
                }
                if (!l.debug) return M.queueConnectionLost(t, exc, own);
            }
            const m = c.PyObject_GetAttr(py.obj(t), names.call_connection_lost) orelse return false;
            defer py.decref(m);
            const ctx = own orelse return py.consumed(py.callMethod(t.loop.?, names.call_soon, .{ m, exc }));
            // Slot 0 is scratch for PY_VECTORCALL_ARGUMENTS_OFFSET, as in
            // py.callMethod.
            var argv = [_]?*Obj{ null, t.loop.?, m, exc, ctx };
            const nargs = 3 | c.PY_VECTORCALL_ARGUMENTS_OFFSET;
            const kw = state.get().kw_context;
            return py.consumed(c.PyObject_VectorcallMethod(names.call_soon, @ptrCast(&argv[1]), nargs, kw));
        }

        fn fixedContext(t: *Transport) ?*Obj {
            const in = t.inner orelse return null;
            return if (in.context_fixed) in.context else null;
        }

        /// `_force_close(exc)`: drop what waits to be sent;
        /// connection_lost(exc) next pass.
        pub fn forceClose(self: ?*Obj, exc: ?*Obj) callconv(.c) ?*Obj {
            const t = py.cast(Transport, self.?);
            const in = t.inner orelse return py.newref(py.none());
            if (in.conn_lost > 0) return py.newref(py.none());
            M.dropWrites(in);
            in.closing = true;
            M.updateInterest(t);
            in.conn_lost += 1;
            if (!scheduleConnectionLost(t, exc.?)) return null;
            return py.newref(py.none());
        }

        // ------------------------------------------------- the getters

        pub fn getProtocol(self: ?*Obj, _: ?*Obj) callconv(.c) ?*Obj {
            const t = py.cast(Transport, self.?);
            return py.newref(t.protocol orelse py.none());
        }

        /// `_protocol`.
        pub fn getProtocolAttr(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
            return getProtocol(self, null);
        }

        /// `_conn_lost`.
        pub fn getConnLost(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
            const t = py.cast(Transport, self.?);
            const n: u32 = if (t.inner) |in| in.conn_lost else 0;
            return c.PyLong_FromUnsignedLong(n);
        }

        /// `_sock_fd`.
        pub fn getFd(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
            const t = py.cast(Transport, self.?);
            const fd: c_long = if (t.inner) |in| in.w.fd else -1;
            return c.PyLong_FromLong(fd);
        }

        /// `_protocol_paused`.
        pub fn getProtocolPaused(self: ?*Obj, _: ?*anyopaque) callconv(.c) ?*Obj {
            const t = py.cast(Transport, self.?);
            return py.boolean(if (t.inner) |in| in.protocol_paused else false);
        }

        // ------------------------------------------------- the type

        /// The method table: what both transports offer alike, then `own`,
        /// then the sentinel. `received`: the protocol callback reading
        /// feeds, for the docstrings.
        pub fn methodTable(
            comptime received: []const u8,
            comptime own: []const c.PyMethodDef,
        ) [own.len + 9]c.PyMethodDef {
            const m = methods;
            const alike = [_]c.PyMethodDef{
                py.methodNoArgs("get_write_buffer_limits", m.getWriteBufferLimits, "get_write_buffer_limits($self, /)\n--\n\n(low, high) water marks."),
                py.methodNoArgs("pause_reading", m.pauseReading, "pause_reading($self, /)\n--\n\nStop calling " ++ received ++ "()."),
                py.methodNoArgs("resume_reading", m.resumeReading, "resume_reading($self, /)\n--\n\nResume calling " ++ received ++ "()."),
                py.methodNoArgs("is_reading", m.isReading, "is_reading($self, /)\n--\n\nTrue while receiving."),
                py.methodNoArgs("get_protocol", getProtocol, "get_protocol($self, /)\n--\n\nThe current protocol."),
                py.methodO("_force_close", forceClose, null),
                py.methodFast("_set_limits", m.setLimits, null),
                py.methodNoArgs("_start_reading", m.startReading, null),
            };
            return alike ++ own[0..own.len].* ++ [_]c.PyMethodDef{py.sentinel_method};
        }

        /// The getset table: the fields both transports have, then `own`,
        /// then the sentinel.
        pub fn getsetTable(comptime own: []const c.PyGetSetDef) [own.len + 5]c.PyGetSetDef {
            const alike = [_]c.PyGetSetDef{
                py.getset("_protocol", getProtocolAttr, null),
                py.getset("_conn_lost", getConnLost, null),
                py.getset("_sock_fd", getFd, null),
                py.getset("_protocol_paused", getProtocolPaused, null),
            };
            return alike ++ own[0..own.len].* ++ [_]c.PyGetSetDef{py.sentinel_getset};
        }

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
            // A heap type's instances own a reference to it
            // (subtype_traverse leaves that to the first heap type with
            // its own traverse).
            const tp_rc = visit.?(py.obj(c.Py_TYPE(self)), arg);
            if (tp_rc != 0) return tp_rc;
            inline for (.{ t.extra, t.loop, t.protocol }) |m| if (m) |o| {
                const rc = visit.?(o, arg);
                if (rc != 0) return rc;
            };
            if (@hasDecl(M, "visitObject")) {
                const rc = M.visitObject(t, visit, arg);
                if (rc != 0) return rc;
            }
            const in = t.inner orelse return 0;
            inline for (.{ in.context, in.sock_owner, in.limits }) |m| if (m) |o| {
                const rc = visit.?(o, arg);
                if (rc != 0) return rc;
            };
            return M.visitInner(in, visit, arg);
        }

        fn clearGc(self: ?*Obj) callconv(.c) c_int {
            const t = py.cast(Transport, self.?);
            py.clear(&t.extra);
            py.clear(&t.protocol);
            if (@hasDecl(M, "clearObject")) M.clearObject(t);
            if (t.inner) |in| {
                py.clear(&in.context);
                py.clear(&in.limits);
                M.clearInner(in);
            }
            return 0;
        }

        fn dealloc(self: ?*Obj) callconv(.c) void {
            const t = py.cast(Transport, self.?);
            c.PyObject_GC_UnTrack(self);
            if (@hasDecl(M, "freeObject")) M.freeObject(t);
            if (t.inner) |in| {
                // A held transport holds a reference to itself; one the
                // reactor did not hold left it in its finalizer.
                std.debug.assert(!in.attached);
                py.clear(&in.context);
                py.clear(&in.sock_owner);
                py.clear(&in.limits);
                M.freeInner(t, in);
                gpa.destroy(in);
                t.inner = null;
            }
            py.clear(&t.extra);
            py.clear(&t.protocol);
            py.clear(&t.loop);
            py.freeHeapInstance(self.?);
        }

        /// Creates the type `zloop._zloop.<name>` with `asyncio.<base>` as
        /// its base (imports asyncio) and adds it to `module`. A heap type
        /// (PyType_FromSpecWithBases): a static type may not derive from a
        /// class defined in Python.
        pub fn init(module: *Obj, comptime base: [:0]const u8, comptime name: [:0]const u8, doc: [*:0]const u8) bool {
            initNames();
            M.initNames();
            const asyncio = c.PyImport_ImportModule("asyncio") orelse return false;
            defer py.decref(asyncio);
            const base_obj = c.PyObject_GetAttrString(asyncio, base) orelse return false;
            defer py.decref(base_obj);
            const base_tp: *c.PyTypeObject = @ptrCast(@alignCast(base_obj));
            // The `_extra` slot of asyncio.BaseTransport must be where
            // `extra` is.
            if (base_tp.tp_basicsize != @offsetOf(Transport, "loop") or base_tp.tp_dictoffset != 0) {
                _ = py.raise(c.PyExc_ImportError, "zloop: unexpected asyncio." ++ base ++ " layout");
                return false;
            }
            slots[0].pfunc = @ptrCast(@constCast(doc));
            spec = .{
                .name = "zloop._zloop." ++ name,
                .basicsize = @sizeOf(Transport),
                .itemsize = 0,
                .flags = c.Py_TPFLAGS_DEFAULT | c.Py_TPFLAGS_BASETYPE | c.Py_TPFLAGS_HAVE_GC,
                .slots = &slots,
            };
            const bases = c.PyTuple_Pack(1, base_obj) orelse return false;
            defer py.decref(bases);
            const tp = c.PyType_FromSpecWithBases(&spec, bases) orelse return false;
            type_obj = @ptrCast(@alignCast(tp));
            return c.PyModule_AddObjectRef(module, name, tp) >= 0;
        }
    };
}

/// Sets `exc_type(msg)`; null, for `return refuse(...)` from any function
/// returning an optional.
fn refuse(exc_type: [*c]Obj, msg: [*:0]const u8) ?Target {
    c.PyErr_SetString(exc_type, msg);
    return null;
}
