"""nvcc under Bazel 4 without rules_cuda.

cuda_objects compiles each .cu file with /usr/local/cuda/bin/nvcc into one
object file (one action per file, so they build in parallel). Headers come
from `hdrs` and from the CcInfo of `deps` (their transitive headers, include
paths and defines), so the sandbox sees exactly what the .cu files include.
A cc_library lists the target in its srcs to link the objects.

Use only in targets that are compatible with --config=cuda alone
(CUDA_ONLY below): machines without the toolkit skip them.
"""

NVCC = "/usr/local/cuda/bin/nvcc"

# sm_90 machine code (H100/H200) plus compute_90 PTX for newer GPUs (JIT).
CUDA_COPTS = [
    "-O3",
    "-std=c++17",
    "-lineinfo",
    "-gencode",
    "arch=compute_90,code=sm_90",
    "-gencode",
    "arch=compute_90,code=compute_90",
    "-Xcompiler",
    "-fPIC",
    "-Xcompiler",
    "-O2",
    "--expt-relaxed-constexpr",
    "-Werror=all-warnings",
]

# target_compatible_with value: build only under --config=cuda.
CUDA_ONLY = select({
    "//engine/backend/cuda:enabled": [],
    "//conditions:default": ["@platforms//:incompatible"],
})

def _cuda_objects_impl(ctx):
    contexts = [dep[CcInfo].compilation_context for dep in ctx.attr.deps]
    headers = depset(ctx.files.hdrs, transitive = [c.headers for c in contexts])
    include_dirs = depset(
        transitive = [c.includes for c in contexts] +
                     [c.quote_includes for c in contexts] +
                     [c.system_includes for c in contexts],
    )
    defines = depset(transitive = [c.defines for c in contexts])
    outs = []
    for src in ctx.files.srcs:
        stem = src.basename[:-len(".cu")]
        out = ctx.actions.declare_file("_nvcc/{}/{}.o".format(ctx.label.name, stem))
        args = ctx.actions.args()
        args.add_all(CUDA_COPTS)
        args.add_all(ctx.attr.copts)
        args.add("-I.")
        args.add("-I" + ctx.bin_dir.path)
        args.add_all(include_dirs, format_each = "-I%s")
        args.add_all(defines, format_each = "-D%s")
        args.add("-c", src)
        args.add("-o", out)
        ctx.actions.run(
            executable = NVCC,
            arguments = [args],
            inputs = depset([src], transitive = [headers]),
            outputs = [out],
            mnemonic = "Nvcc",
            progress_message = "nvcc %s" % src.short_path,
            use_default_shell_env = True,
        )
        outs.append(out)
    return [DefaultInfo(files = depset(outs))]

cuda_objects = rule(
    implementation = _cuda_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = [".h", ".cuh"]),
        "deps": attr.label_list(providers = [CcInfo]),
        "copts": attr.string_list(),
    },
)
