"""nvcc for Bazel: compiles .cu files into objects a cc_library links.

Three CUDA configurations, picked with --config (see .bazelrc):
  default  CUDA 13 at /usr/local/cuda, SASS for sm_75 and sm_90 (the device machine's H200).
  sm70     Debian's CUDA 11.8, SASS for sm_70 plus compute_70 PTX: the V100 release build (the
           wheel's V100 library, tools/wheel.sh). CUDA 13 cannot target sm_70, and 11.8 needs
           clang-14 as host compiler and its own ptxas first on PATH.
  sim      the sm70 build for the simulated V100 (tools/sim_tests.sh), which executes the PTX:
           the same without -lineinfo (its PTX parser rejects the .loc directives).
"""

# The V100 release build's toolchain; the simulator's build is the same without -lineinfo.
_SM70 = dict(
    path = "/usr/lib/nvidia-cuda-toolkit/bin:/usr/bin:/bin",
    nvcc = "/usr/bin/nvcc",
    host_compiler = "clang-14",
    archs = ["70"],
    # /usr/local/include holds links to CUDA 13's headers and comes before /usr/include in
    # the default search order; CUDA 11.8's kernel-launch stubs then fail to compile. Spell
    # out the search path with /usr/local/include left out.
    host_includes = [
        "-nostdlibinc",
        "-isystem/usr/include/c++/12",
        "-isystem/usr/include/x86_64-linux-gnu/c++/12",
        "-isystem/usr/include/c++/12/backward",
        "-isystem/usr/lib/llvm-14/lib/clang/14.0.6/include",
        "-isystem/usr/include/x86_64-linux-gnu",
        "-isystem/usr/include",
    ],
    # compute_70 PTX beside the SASS: what the simulated V100 executes, and what a driver could
    # JIT for a newer GPU (which context.c allows only under SM70OPS_ALLOW_PTX, for validation).
    ptx = True,
    lineinfo = True,
)

_TOOLCHAINS = {
    "default": struct(
        path = "/usr/local/cuda/bin:/usr/bin:/bin",
        nvcc = "/usr/local/cuda/bin/nvcc",
        host_compiler = "g++",
        archs = ["75", "90"],
        host_includes = [],
        ptx = False,
        lineinfo = True,
    ),
    "sm70": struct(**_SM70),
    "sim": struct(**dict(_SM70, lineinfo = False)),
}

_FLAGS = [
    "-std=c++17",
    "-O3",
    "-lineinfo",
    "-Werror=all-warnings",
    "-Xcompiler=-fPIC,-fvisibility=hidden,-Wall,-Wextra,-Werror",
    "-I.",
]

def _cuda_objects_impl(ctx):
    toolchain = _TOOLCHAINS[ctx.attr.toolchain]
    gencode = ["-gencode=arch=compute_{0},code=sm_{0}".format(a) for a in toolchain.archs]
    if toolchain.ptx:
        gencode += ["-gencode=arch=compute_{0},code=compute_{0}".format(a) for a in toolchain.archs]
    flags = [f for f in _FLAGS if toolchain.lineinfo or f != "-lineinfo"]
    objects = []
    for src in ctx.files.srcs:
        obj = ctx.actions.declare_file("_objs/{}/{}.o".format(ctx.label.name, src.path))
        host = ["-Xcompiler=" + flag for flag in toolchain.host_includes]
        args = flags + gencode + host + ctx.attr.copts + [
            "-ccbin",
            toolchain.host_compiler,
            "-c",
            src.path,
            "-o",
            obj.path,
        ]
        ctx.actions.run_shell(
            inputs = [src] + ctx.files.hdrs,
            outputs = [obj],
            # A private TMPDIR: sandboxed actions run in their own PID namespaces, so nvcc's
            # pid-named temporaries in a shared /tmp collide between parallel actions.
            command = "tmp=$(mktemp -d) && TMPDIR=$tmp PATH={} {} {}; rc=$?; rm -rf $tmp; exit $rc".format(
                toolchain.path,
                toolchain.nvcc,
                " ".join(args),
            ),
            mnemonic = "Nvcc",
            progress_message = "nvcc (sm_{}) {}".format(",".join(toolchain.archs), src.short_path),
        )
        objects.append(obj)
    return [DefaultInfo(files = depset(objects))]

_cuda_objects = rule(
    implementation = _cuda_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        # .hpp and .inl: CUTLASS's headers (//tests/sim_bench:cutlass_peers) include both.
        "hdrs": attr.label_list(allow_files = [".h", ".cuh", ".hpp", ".inl"]),
        "copts": attr.string_list(),
        "toolchain": attr.string(values = _TOOLCHAINS.keys()),
    },
)

def cuda_library(name, srcs, hdrs = [], copts = [], deps = [], visibility = None, tags = None):
    """A cc_library of nvcc-compiled objects, built by the toolchain --config selects.

    tags go to both targets: a library tagged manual (one that needs an optional download, such as
    //tests/sim_bench:cutlass_peers's CUTLASS headers) keeps both out of `bazel build //...`.
    """
    _cuda_objects(
        name = name + "_objects",
        srcs = srcs,
        hdrs = hdrs,
        copts = copts,
        # sim is sm70 with one more flag set: Bazel picks the more specific of the two.
        toolchain = select({
            "//tools:sim": "sim",
            "//tools:sm70": "sm70",
            "//conditions:default": "default",
        }),
        tags = tags,
    )
    native.cc_library(
        name = name,
        srcs = [":" + name + "_objects"],
        hdrs = hdrs,
        deps = deps + ["//tools:cudart"],
        # Kernels are reached through the plugin's tables, not by symbol: keep every object.
        alwayslink = 1,
        visibility = visibility,
        tags = tags,
    )
