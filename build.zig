//! Builds zloop's CPython extension (`zloop/_zloop.so`) for one interpreter,
//! and runs the core's unit tests with no interpreter at all.
//!
//!   zig build -Dpython-include=DIR [-Doptimize=ReleaseFast] [-Dstrip=true]
//!             [-Dtarget=x86_64-linux-gnu.2.17 -Dcpu=x86_64_v2]
//!   zig build test [-Dportable=true]
//!   zig build test-portable    (the core's tests on the portable path)
//!   zig build check-kqueue     (compile-only, for macOS and FreeBSD)
//!
//! `-Dportable=true` makes a Linux build take the portable path of the OS
//! layer (libc, a pipe for eventfd, accept + fcntl, ...) and offer the
//! backends epoll and kqueue, the latter over a test-only emulation of
//! kqueue(2) on epoll (`src/core/os/kqueue_emu.zig`): a test build, never
//! a release or a wheel (`scripts/wheels` never passes it). macOS and the
//! BSDs always take the portable path, with their real kqueue.
const std = @import("std");

pub fn build(b: *std.Build) void {
    const target = b.standardTargetOptions(.{});
    const optimize = b.standardOptimizeOption(.{});
    const portable = b.option(bool, "portable", "Linux: run the portable OS layer and the emulated kqueue (tests only)") orelse false;
    const options = buildOptions(b, portable);

    const core = b.createModule(.{
        .root_source_file = b.path("src/core/root.zig"),
        .target = target,
        .optimize = optimize,
    });
    core.addOptions("build_options", options);

    const test_step = b.step("test", "Run the core's unit tests (no Python needed)");
    test_step.dependOn(&b.addRunArtifact(coreTests(b, target, optimize, portable)).step);
    const portable_step = b.step("test-portable", "Run the core's unit tests on the portable path (epoll and the emulated kqueue)");
    portable_step.dependOn(&b.addRunArtifact(coreTests(b, target, optimize, true)).step);

    // Real kqueue cannot run on these Linux machines; compiling and linking
    // the core and its tests for macOS and FreeBSD against their libc at
    // least proves that it builds (the emulation on Linux runs the same
    // backend).
    const cross_step = b.step("check-kqueue", "Compile and link the core's tests for macOS and FreeBSD (no run)");
    for ([_][]const u8{ "aarch64-macos", "x86_64-macos", "x86_64-freebsd" }) |triple| {
        const query = std.Target.Query.parse(.{ .arch_os_abi = triple }) catch unreachable;
        const cross = coreTests(b, b.resolveTargetQuery(query), optimize, true);
        // Linked too, against the target's libc stubs: a symbol the target
        // lacks fails here, not on the first Mac.
        _ = cross.getEmittedBin();
        cross_step.dependOn(&cross.step);
    }

    const python_include = b.option([]const u8, "python-include", "Python.h directory") orelse return;
    // Zig 0.17 has no @cImport: Python.h is translated by the build system,
    // once per interpreter (its include directory decides the ABI).
    const translate = b.addTranslateC(.{
        .root_source_file = b.path("src/python/python.h"),
        .target = target,
        .optimize = optimize,
    });
    translate.addSystemIncludePath(.{ .cwd_relative = python_include });

    // Release wheels are stripped (4.5 MB of debug info otherwise).
    const strip = b.option(bool, "strip", "Strip debug info from the extension") orelse false;
    const ext = b.createModule(.{
        .root_source_file = b.path("src/python/module.zig"),
        .target = target,
        .optimize = optimize,
        .link_libc = true,
        .strip = strip,
    });
    ext.addImport("c", translate.createModule());
    ext.addImport("core", core);
    ext.addOptions("build_options", options);

    const lib = b.addLibrary(.{ .name = "_zloop", .root_module = ext, .linkage = .dynamic });
    // Symbols of libpython resolve against the interpreter at import time.
    lib.linker_allow_shlib_undefined = true;
    const install = b.addInstallFileWithDir(lib.getEmittedBin(), .lib, "_zloop.so");
    b.getInstallStep().dependOn(&install.step);
}

/// The options the core and the adapter see as `@import("build_options")`.
fn buildOptions(b: *std.Build, portable: bool) *std.Build.Step.Options {
    const options = b.addOptions();
    options.addOption(bool, "portable", portable);
    return options;
}

/// The core's unit tests for `target`; the portable path links libc, as
/// it runs through it.
fn coreTests(b: *std.Build, target: std.Build.ResolvedTarget, optimize: std.builtin.OptimizeMode, portable: bool) *std.Build.Step.Compile {
    const module = b.createModule(.{
        .root_source_file = b.path("src/core/root.zig"),
        .target = target,
        .optimize = optimize,
        .link_libc = portable or target.result.os.tag != .linux,
    });
    module.addOptions("build_options", buildOptions(b, portable));
    return b.addTest(.{ .root_module = module, .name = if (portable) "core-portable" else "core" });
}
