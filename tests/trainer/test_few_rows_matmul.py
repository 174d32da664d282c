"""The decode step's native kernel (trainer/rollout/native/few_rows_matmul.cc through few_rows_matmul.py):
it builds on this machine, computes what XLA's dot computes (to fp32 rounding) on every path it has (AVX-512
and plain loops, row blocks and remainders, batch dimensions, both weight layouts), is chosen only for a few
fp32 rows on CPU, and says why when it cannot be built. Its speed is bench/decode_dot_bandwidth.py's and
bench/rollout_speed.py's; that the engine's decode uses it is test_slow_qwen3_rollout.py's."""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trainer.rollout import few_rows_matmul as frm


def uses_kernel(fn, *args) -> bool:
    # A fresh function each time: jit caches a trace by function, and the choice is made while tracing.
    return frm.TARGET in jax.jit(lambda *a: fn(*a)).lower(*args).as_text()


def draw(shape: tuple[int, ...], seed: int, dtype=np.float32) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def test_the_kernel_builds_and_loads_here():
    # CI has a C++ compiler (scripts/install-system-deps.sh); without one every decode falls back to XLA's dot.
    assert frm.available(), "few_rows_matmul did not build: see the warning logged by trainer.rollout.few_rows_matmul"


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
