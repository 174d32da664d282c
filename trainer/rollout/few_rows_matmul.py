"""`x @ w.T` for the few rows of a decode step, by native/few_rows_matmul.cc where it can run, else by XLA.

A decode step multiplies a handful of rows (one per sequence) by every weight matrix once, so its speed is how
fast those products stream the weights. On the CPUs rljob's CPU rollouts run on, XLA's dot (YNNPACK) streams
them at about half the speed XLA reads the same bytes, the hand-written kernel near that speed
(bench/decode_dot_bandwidth.py; its figures are in bench/README.md's rollout-speed section). Weights are kept
out-features first ([n, k]) for both paths.

The kernel takes fp32 products of at most MOST_ROWS rows on a CPU with AVX-512F, the instructions its fast paths
are written for (elsewhere its plain loops are slower than XLA's dot). It is compiled when the environment is set
up, not at use: `python -m trainer.rollout.few_rows_matmul build` (scripts/bootstrap.sh and the trainer image run
it) compiles it with the machine's C++ compiler (`$CXX`, else `c++`) against the FFI headers of the installed
jaxlib, into a cache keyed by the source and jaxlib's version (native_cache.py); `RLJOB_NATIVE_CACHE` names
the cache directory. A process only looks the library up there. Where it is missing, the CPU lacks AVX-512F, or
RLJOB_FEW_ROWS_KERNEL=0, the products use XLA's dot and the reason is logged once: the results agree to fp32
rounding, only the speed differs.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import hashlib
import importlib.metadata
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from .native_cache import cache_dir

log = logging.getLogger(__name__)

SOURCE = Path(__file__).resolve().parent / "native" / "few_rows_matmul.cc"
TARGET = "rljob_few_rows_matmul"  # w [batch..., n, k]
TARGET_KN = "rljob_few_rows_matmul_kn"  # w [batch..., k, n]
# The kernel re-reads each pair of weight rows from L1 per block of 8 rows, so more rows make it compute bound where
# XLA's blocked GEMM is not: on a decode step's 30 SmolLM2 layers it was well ahead at 8 and 16 rows, level at 32
# and behind from 48 (2 cores, AVX-512).
MOST_ROWS = 16
COMPILE_TIMEOUT_S = 300
BUILD_COMMAND = "python -m trainer.rollout.few_rows_matmul build"
CPUINFO = Path("/proc/cpuinfo")
# The kernel's fast paths are `target("avx512f")` functions; without them it runs plain loops, slower than XLA's dot.
NEEDED_FLAG = "avx512f"
# Every copy of the library has the same functions: one registration per process (XLA refuses a second handler
# under the same name, which a test pointing the cache somewhere else would otherwise attempt).
_registered: list[Path] = []


class KernelUnavailable(RuntimeError):
    """The kernel could not be built or loaded here; the message says why."""


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux lists them (the `flags` line of /proc/cpuinfo); none elsewhere, or where
    that file cannot be read."""
    if not sys.platform.startswith("linux"):
        return frozenset()
    try:
        text = CPUINFO.read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        name, colon, value = line.partition(":")
        if colon and name.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def cpu_lacks_instructions() -> str | None:
    """Why this CPU does not get the kernel (it lacks AVX-512F, or its flags cannot be read), None where it does."""
    if NEEDED_FLAG in cpu_flags():
        return None
    where = f"{CPUINFO}'s flags" if sys.platform.startswith("linux") else f"{sys.platform}: CPU flags are read on Linux only"
    return f"this CPU does not report {NEEDED_FLAG} ({where}), the instructions the kernel is written for"


def compiler() -> str:
    name = os.environ.get("CXX") or "c++"
    found = shutil.which(name)
    if not found:
        raise KernelUnavailable(f"no C++ compiler ({name!r} is not on PATH; set CXX or install g++)")
    return found


def library(directory: Path | None = None) -> Path:
    """Where the library for this source and jaxlib is (or would be) in `directory`, else the cache. The key leaves
    out the compiler (the trainer image keeps the library its build made and needs no compiler to find it) and where
    jaxlib is installed (the FFI headers are its version's; the emulated cluster's pods see the venv at the image's
    path and find the library bootstrap built, harness/podrun/pods/plan.py)."""
    key = hashlib.sha256(b"\0".join([SOURCE.read_bytes(), importlib.metadata.version("jaxlib").encode()])).hexdigest()[:16]
    return (directory or cache_dir()) / f"few_rows_matmul-{key}.so"


def build(out_dir: Path | None = None) -> Path:
    """The kernel's shared library, compiled once per source and jaxlib; atomic, so concurrent builders each end
    with a complete file. Readable by any user: the image builds it as root and runs as another uid."""
    target = library(out_dir)
    if target.is_file():
        return target
    cxx = compiler()
    directory = target.parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise KernelUnavailable(f"cannot create the kernel cache {directory}: {error}; set RLJOB_NATIVE_CACHE") from error
    fd, partial = tempfile.mkstemp(dir=directory, prefix=".few_rows_matmul-", suffix=".so")
    os.close(fd)
    include = jax.ffi.include_dir()
    command = [cxx, "-O3", "-std=c++17", "-shared", "-fPIC", f"-I{include}", str(SOURCE), "-o", partial]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False)
        if done.returncode != 0:
            raise KernelUnavailable(f"compiling {SOURCE.name} failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
        os.chmod(partial, 0o755)  # mkstemp made it 0600, which the linker keeps
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return target


@functools.cache
def load() -> Path:
    """Find the built library in the cache and register the kernel, once per process; never compiles. Raises
    KernelUnavailable saying why not."""
    found = library()
    if not found.is_file():
        raise KernelUnavailable(f"not built: no {found.name} in {found.parent} (run `{BUILD_COMMAND}`; bootstrap and the trainer image do)")
    if not _registered:
        handle = ctypes.cdll.LoadLibrary(str(found))
        jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(handle.RljobFewRowsMatmul), platform="cpu")  # type: ignore[no-untyped-call]  # jax ships this untyped
        jax.ffi.register_ffi_target(TARGET_KN, jax.ffi.pycapsule(handle.RljobFewRowsMatmulKn), platform="cpu")  # type: ignore[no-untyped-call]
        _registered.append(found)
    return found


@functools.cache
def available() -> bool:
    if os.environ.get("RLJOB_FEW_ROWS_KERNEL", "1") == "0":
        log.info("few_rows_matmul: off (RLJOB_FEW_ROWS_KERNEL=0); decode products use XLA's dot")
        return False
    lacking = cpu_lacks_instructions()
    if lacking:
        log.info("few_rows_matmul: %s; decode products use XLA's dot (same results, faster than its plain loops)", lacking)
        return False
    try:
        load()
    except (KernelUnavailable, OSError) as error:
        log.warning("few_rows_matmul: %s; decode products use XLA's dot (same results, slower)", error)
        return False
    return True


def kernel(x: jax.Array, w: jax.Array, kn: bool = False) -> jax.Array:
    """x [batch..., rows, k] by w [batch..., n, k] (kn: [batch..., k, n]) -> [batch..., rows, n], by the native
    kernel (fp32 only)."""
    load()  # registered before it is named in a computation; once per process
    n = w.shape[-1] if kn else w.shape[-2]
    result = jax.ShapeDtypeStruct((*x.shape[:-1], n), jnp.float32)  # type: ignore[no-untyped-call]  # jax ships this untyped
    return jax.ffi.ffi_call(TARGET_KN if kn else TARGET, result)(x, w)


def _use_kernel(x: jax.Array, w: jax.Array, rows: int, out_dtype: Any) -> bool:
    fp32 = x.dtype == jnp.float32 and w.dtype == jnp.float32 and (out_dtype is None or jnp.dtype(out_dtype) == jnp.float32)
    return fp32 and rows <= MOST_ROWS and jax.default_backend() == "cpu" and available()


def project(x: jax.Array, w: jax.Array, out_dtype: Any = None, precision: Any = None) -> jax.Array:
    """x [..., k] by w [n, k] -> [..., n]; the kernel for a decode step's few fp32 rows on CPU, else XLA's dot at
    `precision` (MaxText's matmul_precision: on TPU an fp32 dot at the default is one bf16 pass; the CPU computes fp32
    products whatever it is asked, so the kernel needs none)."""
    rows = math.prod(x.shape[:-1])
    if _use_kernel(x, w, rows, out_dtype):
        return kernel(x.reshape(rows, x.shape[-1]), w).reshape(*x.shape[:-1], w.shape[0])
    return jnp.einsum("...k,nk->...n", x, w, preferred_element_type=out_dtype, precision=precision)


def batched_project(x: jax.Array, w: jax.Array, out_dtype: Any = None, precision: Any = None) -> jax.Array:
    """x [batch..., rows, k] by w [batch..., n, k] -> [batch..., rows, n]: a decode step's attention scores, one query
    group against one head's cached keys per batch entry (the cache as kept: a reshaped operand costs a copy)."""
    if _use_kernel(x, w, x.shape[-2], out_dtype):
        return kernel(x, w)
    return jnp.einsum("...rk,...nk->...rn", x, w, preferred_element_type=out_dtype, precision=precision)


def batched_matmul(x: jax.Array, w: jax.Array, out_dtype: Any = None, precision: Any = None) -> jax.Array:
    """x [batch..., rows, k] by w [batch..., k, n] -> [batch..., rows, n]: a decode step's attention weights over one
    head's cached values per batch entry."""
    if _use_kernel(x, w, x.shape[-2], out_dtype):
        return kernel(x, w, kn=True)
    return jnp.einsum("...rk,...kn->...rn", x, w, preferred_element_type=out_dtype, precision=precision)


def main(argv: list[str] | None = None) -> int:
    """`build`: compile the kernel into the cache (or find it there) and print the library's path. It builds on a CPU
    without AVX-512F too (an image is often built on another machine than the one it runs on) and says so."""
    parser = argparse.ArgumentParser(prog="python -m trainer.rollout.few_rows_matmul", description=main.__doc__)
    parser.add_argument("command", choices=["build"])
    parser.parse_args(argv)
    try:
        built = build()
    except (KernelUnavailable, OSError, subprocess.SubprocessError) as error:
        print(f"few_rows_matmul: not built: {error}", file=sys.stderr)
        return 1
    lacking = cpu_lacks_instructions()
    if lacking:
        print(f"few_rows_matmul: built, but {lacking}: the trainer uses XLA's dot on this machine", file=sys.stderr)
    print(built)
    return 0


if __name__ == "__main__":
    sys.exit(main())
