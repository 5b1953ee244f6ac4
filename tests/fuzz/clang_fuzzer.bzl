"""clang_fuzzer: a libFuzzer binary built with clang-14, outside Bazel's (gcc) C++ toolchain.

Bazel's auto-configured cc toolchain here is gcc 12, which has no libFuzzer and no coverage
instrumentation libFuzzer can use; switching the whole toolchain to clang (CC=clang-14) would
re-configure @local_config_cc and every C++ action with it. Instead this rule walks `deps` with an
aspect, collects the C sources, headers, prebuilt objects (the nvcc-compiled kernels) and linkopts
(cudart_static) of every cc_library below, and compiles the C sources itself with
/usr/bin/clang-14 -fsanitize=fuzzer-no-link,address,undefined. CUDA objects are linked as built
(not instrumented). Nothing is fetched: clang-14 and its runtimes come from Debian's clang-14 and
libclang-rt-14-dev (tools/setup.sh). New plugin sources or kernel libraries are picked up without
editing this file.
"""

_CLANG = "/usr/bin/clang-14"
_CLANGXX = "/usr/bin/clang++-14"

_SANITIZE = [
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer",
]

_FuzzInputs = provider(fields = ["units", "hdrs", "objects", "linkopts"])

def _collect_impl(target, ctx):
    units, hdrs, objects, linkopts = [], [], [], []
    if ctx.rule.kind == "cc_library":
        copts = getattr(ctx.rule.attr, "copts", [])
        for f in getattr(ctx.rule.files, "srcs", []):
            if f.extension == "c":
                units.append(struct(src = f, copts = copts))
            elif f.extension in ("o", "a", "lo"):
                objects.append(f)
            elif f.extension in ("h", "inc"):
                hdrs.append(f)
            else:
                fail("clang_fuzzer: {} in {} is not C or an object".format(f.path, target.label))
        hdrs += getattr(ctx.rule.files, "hdrs", [])
        linkopts = list(getattr(ctx.rule.attr, "linkopts", []))
    for dep in getattr(ctx.rule.attr, "deps", []):
        if _FuzzInputs in dep:
            d = dep[_FuzzInputs]
            units += d.units
            hdrs += d.hdrs
            objects += d.objects
            linkopts += d.linkopts
    return [_FuzzInputs(units = units, hdrs = hdrs, objects = objects, linkopts = linkopts)]

_collect = aspect(implementation = _collect_impl, attr_aspects = ["deps"])

def _unique(items):
    seen, out = {}, []
    for item in items:
        key = item.src.path if hasattr(item, "src") else item
        if key not in seen:
            seen[key] = True
            out.append(item)
    return out

def _compile(ctx, src, copts, hdrs, extra):
    obj = ctx.actions.declare_file("_fuzz_objs/{}/{}.o".format(ctx.label.name, src.path))
    ctx.actions.run(
        executable = _CLANG,
        arguments = [
            "-std=c11",
            "-O1",
            "-g",
            "-Wall",
            "-Wextra",
            "-I.",
            "-I" + ctx.bin_dir.path,
        ] + _SANITIZE + extra + copts + ["-c", src.path, "-o", obj.path],
        inputs = [src] + hdrs,
        outputs = [obj],
        mnemonic = "ClangFuzz",
        progress_message = "clang-14 (fuzzer) {}".format(src.short_path),
        use_default_shell_env = True,
    )
    return obj

def _clang_fuzzer_impl(ctx):
    units, hdrs, objects, linkopts = [], list(ctx.files.hdrs), [], []
    for dep in ctx.attr.deps:
        d = dep[_FuzzInputs]
        units += d.units
        hdrs += d.hdrs
        objects += d.objects
        linkopts += d.linkopts
    hdrs = _unique(hdrs)
    objs = []

    # The code under test: coverage for libFuzzer, its own copts (-D..., never -Werror).
    for unit in _unique(units):
        copts = [c for c in unit.copts if not c.startswith("-Werror")]
        objs.append(_compile(ctx, unit.src, copts, hdrs, ["-fsanitize=fuzzer-no-link"]))

    # The harness: warnings are errors here.
    for src in ctx.files.srcs:
        if src.extension == "c":
            objs.append(_compile(ctx, src, [], hdrs, ["-Werror", "-fsanitize=fuzzer-no-link"]))

    out = ctx.actions.declare_file(ctx.label.name)
    objects = _unique(objects)
    ctx.actions.run(
        executable = _CLANGXX,
        arguments = ["-fsanitize=fuzzer", "-o", out.path] + _SANITIZE +
                    [f.path for f in objs + objects] + _unique(linkopts),
        inputs = objs + objects,
        outputs = [out],
        mnemonic = "ClangFuzzLink",
        progress_message = "clang++-14 (fuzzer) linking {}".format(out.short_path),
        use_default_shell_env = True,
    )
    return [DefaultInfo(executable = out, files = depset([out]))]

clang_fuzzer = rule(
    implementation = _clang_fuzzer_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".c"]),
        "hdrs": attr.label_list(allow_files = [".h"]),
        "deps": attr.label_list(aspects = [_collect]),
    },
    executable = True,
)
