"""The decode step's native kernel (trainer/rollout/native/few_rows_matmul.cc through few_rows_matmul.py):
it builds on this machine, computes what XLA's dot computes (to fp32 rounding) on every path it has (AVX-512
and plain loops, row blocks and remainders, batch dimensions, both weight layouts), is chosen only for a few
fp32 rows on a CPU with AVX-512F, is built by its build command (bootstrap's and the trainer image's) and only
looked up at use, and says why when it cannot be built or is not there. Its speed is bench/rollout/decode_dot_bandwidth.py's
and bench/rollout/rollout_speed.py's; that the engine's decode uses it is test_slow_qwen3_rollout.py's."""

from __future__ import annotations

import logging
import os
import re
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trainer.rollout import few_rows_matmul as frm

REPO = Path(__file__).resolve().parents[3]
WITHOUT_AVX512 = frozenset({"fpu", "sse2", "avx", "avx2", "fma"})  # a CPU from before AVX-512, or a Zen 3
READ_CPU_FLAGS = frm.cpu_flags  # the reader itself, whatever the fixture below reports


@pytest.fixture(scope="module", autouse=True)
def built() -> Iterator[None]:
    """The kernel in the cache a process looks in, as scripts/bootstrap.sh leaves it (a no-op where bootstrap built
    it): at use it is only looked up. On a CPU without AVX-512F, where the trainer does not use it, the tests still
    check its arithmetic (the plain loops, all such a CPU runs) by reporting the flag."""
    frm.build()
    with pytest.MonkeyPatch.context() as patch:
        if "avx512f" not in frm.cpu_flags():
            real = frm.cpu_flags()
            patch.setattr(frm, "cpu_flags", lambda: real | {"avx512f"})
        frm.available.cache_clear()
        yield
    frm.available.cache_clear()


@pytest.fixture
def fresh_choice() -> Iterator[None]:
    """available() and load() decide again, under what the test set, and again after it."""
    frm.available.cache_clear()
    frm.load.cache_clear()
    yield
    frm.available.cache_clear()
    frm.load.cache_clear()


def uses_kernel(fn, *args) -> bool:
    # A fresh function each time: jit caches a trace by function, and the choice is made while tracing.
    return frm.TARGET in jax.jit(lambda *a: fn(*a)).lower(*args).as_text()


def draw(shape: tuple[int, ...], seed: int, dtype=np.float32) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def test_the_kernel_builds_and_loads_here():
    # CI has a C++ compiler (scripts/install-system-deps.sh); without one every decode falls back to XLA's dot.
    assert frm.available(), "few_rows_matmul is not used: see the reason logged by trainer.rollout.few_rows_matmul"


@pytest.mark.parametrize(
    ("x_shape", "w_shape"),
    [
        ((8, 576), (960, 576)),  # a decode step's q/k/v product: AVX-512, one block of 8 rows
        ((13, 64), (130, 64)),  # a block of 8 and a remainder of 5
        ((2, 3, 48), (6, 48)),  # leading dimensions flattened into rows
        ((3, 33), (10, 33)),  # k not a multiple of 16: the plain loops
        ((4, 32), (7, 32)),  # n odd: the plain loops
        ((frm.MOST_ROWS, 16), (256, 16)),  # the most rows the kernel takes
    ],
)
def test_project_is_x_times_w_transposed(x_shape, w_shape):
    x, w = draw(x_shape, 0), draw(w_shape, 1)
    assert uses_kernel(frm.project, x, w)
    got = np.asarray(jax.jit(frm.project)(x, w))
    expected = np.einsum("...k,nk->...n", np.asarray(x, np.float64), np.asarray(w, np.float64))
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-6 * np.sqrt(x_shape[-1]) * 4)


@pytest.mark.parametrize(
    ("x_shape", "w_shape"),
    [
        ((8, 3, 3, 64), (8, 3, 424, 64)),  # attention scores: each query group against its head's cached keys
        ((5, 7, 30), (5, 11, 30)),  # plain loops
    ],
)
def test_batched_project_is_one_product_per_batch_entry(x_shape, w_shape):
    x, w = draw(x_shape, 2), draw(w_shape, 3)
    assert uses_kernel(frm.batched_project, x, w)
    got = np.asarray(jax.jit(frm.batched_project)(x, w))
    expected = np.einsum("...rk,...nk->...rn", np.asarray(x, np.float64), np.asarray(w, np.float64))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * np.sqrt(x_shape[-1]))


@pytest.mark.parametrize(
    ("x_shape", "w_shape"),
    [
        ((8, 3, 3, 424), (8, 3, 424, 64)),  # attention's weights over its head's cached values: AVX-512
        ((4, 9, 100), (4, 100, 128)),  # two column tiles, row blocks of 4 and a remainder of 1
        ((2, 5, 7), (2, 7, 30)),  # n not a multiple of 64: the plain loops
    ],
)
def test_batched_matmul_takes_weights_k_major(x_shape, w_shape):
    x, w = draw(x_shape, 4), draw(w_shape, 5)
    assert frm.TARGET_KN in jax.jit(frm.batched_matmul).lower(x, w).as_text()
    got = np.asarray(jax.jit(frm.batched_matmul)(x, w))
    expected = np.einsum("...rk,...kn->...rn", np.asarray(x, np.float64), np.asarray(w, np.float64))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * np.sqrt(x_shape[-1]))


def test_many_rows_other_dtypes_and_the_switch_use_xlas_dot(monkeypatch):
    w = draw((64, 32), 6)
    assert not uses_kernel(frm.project, draw((frm.MOST_ROWS + 1, 32), 7), w)  # a prefill: compute bound, XLA's GEMM
    assert not uses_kernel(frm.project, draw((8, 32), 8, np.float16).astype(jnp.bfloat16), w.astype(jnp.bfloat16))
    assert not uses_kernel(lambda x, w: frm.project(x, w, jnp.bfloat16), draw((8, 32), 9), w)
    monkeypatch.setenv("RLJOB_FEW_ROWS_KERNEL", "0")
    frm.available.cache_clear()
    try:
        assert not uses_kernel(frm.project, draw((8, 32), 10), w)
    finally:
        monkeypatch.delenv("RLJOB_FEW_ROWS_KERNEL")
        frm.available.cache_clear()
    assert uses_kernel(frm.project, draw((8, 32), 10), w)


def test_a_cpu_without_avx512f_gets_xlas_dot_and_is_told_why_once(monkeypatch, caplog, fresh_choice):
    # The kernel's fast paths are AVX-512F functions; elsewhere it runs plain loops, slower than XLA's dot.
    monkeypatch.setattr(frm, "cpu_flags", lambda: WITHOUT_AVX512)
    caplog.set_level(logging.INFO, logger=frm.__name__)
    x, w = draw((8, 64), 12), draw((128, 64), 13)
    assert not uses_kernel(frm.project, x, w)
    assert not uses_kernel(frm.batched_project, x[None], w[None])
    assert frm.TARGET_KN not in jax.jit(frm.batched_matmul).lower(x[None], w.T[None]).as_text()
    reasons = [r.getMessage() for r in caplog.records if r.name == frm.__name__]
    assert len(reasons) == 1 and "does not report avx512f" in reasons[0] and "XLA's dot" in reasons[0], reasons
    np.testing.assert_allclose(np.asarray(jax.jit(frm.project)(x, w)), np.asarray(x) @ np.asarray(w).T, rtol=1e-5, atol=1e-5)


def test_the_cpu_flags_are_linuxs_flags_line(monkeypatch, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    monkeypatch.setattr(frm, "CPUINFO", cpuinfo)
    monkeypatch.setattr(frm, "cpu_flags", READ_CPU_FLAGS)
    cpuinfo.write_text("processor\t: 0\nmodel name\t: x\nflags\t\t: fpu sse2 avx2 avx512f avx512bw\n\nprocessor\t: 1\n")
    assert frm.cpu_flags() == {"fpu", "sse2", "avx2", "avx512f", "avx512bw"} and frm.cpu_lacks_instructions() is None
    cpuinfo.write_text("processor\t: 0\nFeatures\t: fp asimd evtstrm aes\n")  # arm64 lists Features, no flags
    assert frm.cpu_flags() == frozenset()
    assert "does not report avx512f" in (frm.cpu_lacks_instructions() or "")
    cpuinfo.unlink()
    assert frm.cpu_flags() == frozenset()
    cpuinfo.write_text("flags\t\t: fpu avx512f\n")
    monkeypatch.setattr(frm.sys, "platform", "darwin")  # not Linux: no flags are read, so no kernel
    assert frm.cpu_flags() == frozenset() and "darwin" in (frm.cpu_lacks_instructions() or "")


def test_an_empty_cache_is_a_named_reason_until_built(monkeypatch, caplog, tmp_path, fresh_choice):
    # At use the library is looked up, never compiled: a job must not spend its first decode on g++, nor need one.
    cache = tmp_path / "native"
    monkeypatch.setenv("RLJOB_NATIVE_CACHE", str(cache))
    caplog.set_level(logging.INFO, logger=frm.__name__)
    assert not frm.available()
    (reason,) = [r.getMessage() for r in caplog.records if r.name == frm.__name__]
    assert "not built" in reason and "python -m trainer.rollout.few_rows_matmul build" in reason, reason
    assert not cache.exists() or list(cache.iterdir()) == []  # nothing compiled behind the reason
    library = frm.build()
    assert library.parent == cache and library.is_file()
    frm.available.cache_clear()
    frm.load.cache_clear()
    assert frm.available() and frm.load() == library


def _dockerfile_run(command: str) -> str:
    """The trainer image's RUN that names `command`, after checking that the image sets RLJOB_NATIVE_CACHE before it."""
    text = (REPO / "docker" / "trainer.Dockerfile").read_text()
    runs = re.findall(r"^RUN (.*" + re.escape(command) + r".*)$", text, re.M)
    assert len(runs) == 1, f"docker/trainer.Dockerfile should RUN `{command}` once: {runs}"
    env = re.search(r"^ENV RLJOB_NATIVE_CACHE=(/\S+)$", text, re.M)
    assert env and env.start() < text.index(runs[0]), "the image must set RLJOB_NATIVE_CACHE, a fixed directory, before it builds"
    return runs[0]


def test_the_images_build_command_fills_the_cache_a_process_only_looks_in(monkeypatch, tmp_path, fresh_choice):
    # The command as docker/trainer.Dockerfile runs it (its `python` is the image's venv, here this one), into a cache
    # of its own; then a process with no compiler at all finds it there: the key leaves the compiler out.
    cache = tmp_path / "opt-rljob-native"
    run = _dockerfile_run(frm.BUILD_COMMAND)
    assert frm.BUILD_COMMAND in (REPO / "scripts" / "bootstrap.sh").read_text()
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    done = subprocess.run(
        ["bash", "-c", run],
        env={**os.environ, "PATH": path, "RLJOB_NATIVE_CACHE": str(cache)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    library = Path(done.stdout.strip().splitlines()[-1])
    assert library.parent == cache and library.is_file(), done.stdout
    assert stat.S_IMODE(library.stat().st_mode) & 0o444 == 0o444, "the image builds as root and runs as uid 1000"
    monkeypatch.setenv("RLJOB_NATIVE_CACHE", str(cache))
    monkeypatch.setenv("CXX", "no-such-compiler-rljob")

    def no_compiling(*args, **kwargs):
        raise AssertionError(f"compiled at use: {args}")

    monkeypatch.setattr(frm.subprocess, "run", no_compiling)
    assert frm.available() and frm.load() == library


def test_the_build_command_exits_non_zero_with_the_reason(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("RLJOB_NATIVE_CACHE", str(tmp_path / "native"))
    monkeypatch.setenv("CXX", "no-such-compiler-rljob")
    assert frm.main(["build"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "not built: no C++ compiler ('no-such-compiler-rljob'" in err, err


def test_the_build_command_builds_on_a_cpu_without_avx512f_and_says_it_is_not_used(monkeypatch, capsys):
    # An image is often built on another machine than the nodes it runs on: it builds, and says the trainer here won't.
    monkeypatch.setattr(frm, "cpu_flags", lambda: WITHOUT_AVX512)
    assert frm.main(["build"]) == 0
    out, err = capsys.readouterr()
    assert Path(out.strip()) == frm.library() and "does not report avx512f" in err and "XLA's dot" in err, err


def test_concurrent_calls_each_finish_with_their_own_result():
    # Each call claims its work units and finishes whatever XLA's threads have not started, so calls from several
    # threads at once (each holding an intra-op thread while it waits) neither stall nor mix results.
    # Wide enough that each thread's share takes a while, and read by the next operation the moment the call returns:
    # a call that returned before every share was written gives a result with columns missing.
    w = draw((65536, 64), 11)
    step = jax.jit(lambda x, w: frm.project(x, w) * 2.0)
    rows = [draw((8, 64), 20 + i) for i in range(4)]
    expected = [2.0 * (np.asarray(x, np.float64) @ np.asarray(w, np.float64).T) for x in rows]
    failures: list[str] = []

    def run(i: int) -> None:
        for _ in range(50):
            got = np.asarray(step(rows[i], w))
            if not np.allclose(got, expected[i], atol=2e-4):
                failures.append(f"thread {i}: {np.abs(got - expected[i]).max()}")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a call never finished"
    assert not failures, failures


def test_without_a_compiler_the_reason_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("CXX", "no-such-compiler-rljob")
    with pytest.raises(frm.KernelUnavailable, match="no C.. compiler .'no-such-compiler-rljob' is not on PATH"):
        frm.build(tmp_path)


def test_a_failed_compile_says_why_and_leaves_no_library(monkeypatch, tmp_path):
    source = tmp_path / "broken.cc"
    source.write_text("this is not C++\n")
    monkeypatch.setattr(frm, "SOURCE", source)
    out = tmp_path / "cache"
    with pytest.raises(frm.KernelUnavailable, match="compiling broken.cc failed"):
        frm.build(out)
    assert list(out.iterdir()) == []


def test_a_build_is_cached_by_source(monkeypatch, tmp_path):
    first = frm.build(tmp_path)
    mtime = first.stat().st_mtime_ns
    assert frm.build(tmp_path) == first and first.stat().st_mtime_ns == mtime  # found, not rebuilt
    edited = tmp_path / "edited.cc"
    edited.write_text(frm.SOURCE.read_text() + "\n// edited\n")
    monkeypatch.setattr(frm, "SOURCE", edited)
    assert frm.build(tmp_path) != first  # a changed source is a new library


def test_the_cache_is_the_variables_else_home_else_temp(monkeypatch, tmp_path):
    monkeypatch.setenv("RLJOB_NATIVE_CACHE", str(tmp_path / "mine"))
    assert frm.cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("RLJOB_NATIVE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert frm.cache_dir() == tmp_path / "xdg" / "rljob" / "native"
    monkeypatch.delenv("XDG_CACHE_HOME")

    def no_home() -> None:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(frm.Path, "home", no_home)
    assert frm.cache_dir().parent.parent == frm.Path(frm.tempfile.gettempdir())


def test_an_unwritable_cache_is_a_named_reason(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(frm.KernelUnavailable, match="cannot create the kernel cache .*RLJOB_NATIVE_CACHE"):
        frm.build(blocker / "cache")
