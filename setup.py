"""Build script: compiles every ``cython/<part>/<name>.pyx`` into ``rknnlite._native.<name>``.

Metadata lives in pyproject.toml; this file only declares the extensions.
"""

import os
from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

HERE = Path(__file__).parent

# The C files (cython/src/, headers in cython/include/) each extension module links in.
C_SOURCES = {
    "affine_kernels": ["rk_affine.c"],
    "conv_kernels": ["rk_conv.c", "rk_gemv.c"],
    "custom_op_plugin": ["rk_plugin_host.c"],
    "elementwise_kernels": ["rk_elementwise.c"],
    "executor_kernels": ["rk_executor.c"],
    "layout_kernels": ["rk_layout.c"],
    "pool_kernels": ["rk_pooling.c", "rk_pooling_narrow.c"],
    "sparse_kernels": ["rk_sparse.c"],
    "thread_pool": ["rk_pool.c"],
}

# executor_kernels' scalar loops must round as a Mul then an Add (numpy's order), never as one fused
# multiply-add, which compilers emit by default where the CPU has it (aarch64)
EXTRA_FLAGS = {"executor_kernels": ["-ffp-contract=off"]}


def extensions():
    # RKNNLITE_NATIVE_ONLY="a,b" builds just those modules (a developer convenience).
    only = {name for name in os.environ.get("RKNNLITE_NATIVE_ONLY", "").split(",") if name}
    modules = []
    for pyx in sorted((HERE / "cython").glob("*/*.pyx"), key=lambda p: p.stem):
        if only and pyx.stem not in only:
            continue
        modules.append(
            Extension(
                f"rknnlite._native.{pyx.stem}",
                [str(pyx.relative_to(HERE))] + [f"cython/src/{c}" for c in C_SOURCES.get(pyx.stem, [])],
                include_dirs=[numpy.get_include(), "cython/include"],
                define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
                extra_compile_args=["-O3", "-pthread"] + EXTRA_FLAGS.get(pyx.stem, []),
                extra_link_args=["-pthread"],  # the native worker pool (older glibc, musl)
            )
        )
    return cythonize(
        modules,
        include_path=["cython/include", "cython/npu", "cython/kernels"],
        build_dir="build/cython" + ("-" + "-".join(sorted(only)) if only else ""),
        compiler_directives={
            "language_level": 3,
            "embedsignature": True,
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
        },
    )


setup(ext_modules=extensions())
