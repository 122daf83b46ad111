//! Process-wide state of the extension: interned names and the few Python
//! callables the native side calls back into. Set once at import time
//! (zloop supports one interpreter per process, as uvloop does).
const py = @import("py.zig");
const Obj = py.Obj;

pub const State = struct {
    str_context: *Obj,
    str_report: *Obj,
    str_debug_check: *Obj,
    str_debug_traceback: *Obj,
    str_log_slow: *Obj,
    str_log_slow_io: *Obj,
    str_call_soon: *Obj,
    str_call_soon_threadsafe: *Obj,
    str_call_later: *Obj,
    str_call_at: *Obj,
    str_name: *Obj,
    str_loop: *Obj,
    str_set_name: *Obj,
    str_create_task_py: *Obj,
    str_future: *Obj,
    str_task: *Obj,
    /// ("loop",) and ("loop", "name", "context"): keyword names for
    /// vectorcalls of asyncio.Future and asyncio.Task.
    kw_loop: *Obj,
    kw_task: *Obj,
    kw_context: *Obj,
    /// zloop._handles.handle_repr, installed by `_zloop._install`.
    handle_repr: ?*Obj = null,
    /// The namespaces of asyncio.futures and asyncio.tasks, where the
    /// current `Future` and `Task` classes are looked up per call.
    futures_dict: ?*Obj = null,
    tasks_dict: ?*Obj = null,
};

var instance: State = undefined;

pub fn init() void {
    instance = .{
        .str_context = py.intern("context"),
        .str_report = py.intern("_report_callback_exception"),
        .str_debug_check = py.intern("_debug_check"),
        .str_debug_traceback = py.intern("_debug_traceback"),
        .str_log_slow = py.intern("_log_slow_callback"),
        .str_log_slow_io = py.intern("_log_slow_io"),
        .str_call_soon = py.intern("call_soon"),
        .str_call_soon_threadsafe = py.intern("call_soon_threadsafe"),
        .str_call_later = py.intern("call_later"),
        .str_call_at = py.intern("call_at"),
        .str_name = py.intern("name"),
        .str_loop = py.intern("loop"),
        .str_set_name = py.intern("set_name"),
        .str_create_task_py = py.intern("_create_task_py"),
        .str_future = py.intern("Future"),
        .str_task = py.intern("Task"),
        .kw_loop = undefined,
        .kw_task = undefined,
        .kw_context = undefined,
    };
    instance.kw_loop = py.c.Py_BuildValue("(O)", instance.str_loop) orelse @panic("out of memory");
    instance.kw_task = py.c.Py_BuildValue("(OOO)", instance.str_loop, instance.str_name, instance.str_context) orelse @panic("out of memory");
    instance.kw_context = py.c.Py_BuildValue("(O)", instance.str_context) orelse @panic("out of memory");
}

pub inline fn get() *State {
    return &instance;
}

/// asyncio's current `futures.Future` (a new reference), looked up per call
/// as base_events does: a program, or CPython's own tests, may swap in the
/// pure-Python class, and zloop's futures must follow.
pub fn futureType() ?*Obj {
    return lookup(instance.futures_dict.?, instance.str_future);
}

/// asyncio's current `tasks.Task` (a new reference); see `futureType`.
pub fn taskType() ?*Obj {
    return lookup(instance.tasks_dict.?, instance.str_task);
}

fn lookup(dict: *Obj, name: *Obj) ?*Obj {
    const found = py.c.PyDict_GetItemWithError(dict, name) orelse {
        if (py.c.PyErr_Occurred() == null) _ = py.c.PyErr_SetObject(py.c.PyExc_AttributeError, name);
        return null;
    };
    return py.newref(found);
}
