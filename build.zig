//! Builds zloop's CPython extension (`zloop/_zloop.so`) for one interpreter,
//! and runs the core's unit tests with no interpreter at all.
//!
//!   zig build -Dpython-include=DIR [-Doptimize=ReleaseFast] [-Dstrip=true]
//!             [-Dtarget=x86_64-linux-gnu.2.17 -Dcpu=x86_64_v2]
//!   zig build test
//!   zig build check-kqueue     (compile-only, for macOS and FreeBSD)
const std = @import("std");

pub fn build(b: *std.Build) void {
    const target = b.standardTargetOptions(.{});
    const optimize = b.standardOptimizeOption(.{});

    const core = b.createModule(.{
        .root_source_file = b.path("src/core/root.zig"),
        .target = target,
        .optimize = optimize,
    });

    const core_tests = b.addTest(.{ .root_module = b.createModule(.{
        .root_source_file = b.path("src/core/root.zig"),
        .target = target,
        .optimize = optimize,
    }) });
    const test_step = b.step("test", "Run the core's unit tests (no Python needed)");
    test_step.dependOn(&b.addRunArtifact(core_tests).step);

    // kqueue cannot run on these Linux machines; compiling the core and its
    // tests for macOS and FreeBSD at least proves that it builds.
    const cross_step = b.step("check-kqueue", "Compile the core's tests for macOS and FreeBSD (no run)");
    for ([_][]const u8{ "aarch64-macos", "x86_64-freebsd" }) |triple| {
        const query = std.Target.Query.parse(.{ .arch_os_abi = triple }) catch unreachable;
        const cross = b.addTest(.{ .root_module = b.createModule(.{
            .root_source_file = b.path("src/core/root.zig"),
            .target = b.resolveTargetQuery(query),
            .optimize = optimize,
            .link_libc = true,
        }) });
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

    const lib = b.addLibrary(.{ .name = "_zloop", .root_module = ext, .linkage = .dynamic });
    // Symbols of libpython resolve against the interpreter at import time.
    lib.linker_allow_shlib_undefined = true;
    const install = b.addInstallFileWithDir(lib.getEmittedBin(), .lib, "_zloop.so");
    b.getInstallStep().dependOn(&install.step);
}
