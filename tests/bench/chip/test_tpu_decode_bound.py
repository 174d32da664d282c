"""bench/chip/tpu_decode_bound.py: the committed result is what its committed raw files give, its bound is a bound,
and every cache layout it times computes the same attention (run small on this machine's CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.chip import tpu_decode_bound

REPO = tpu_decode_bound.REPO


def _committed() -> dict:
    return json.loads(tpu_decode_bound.RESULT.read_text())


def test_the_committed_result_is_what_its_raw_files_give():
    committed = _committed()
    again = tpu_decode_bound.collect(REPO / committed["raw"], REPO / committed["repeat"], REPO / committed["probe"])
    assert again == committed


def test_no_program_and_no_profiled_decode_step_moved_more_than_the_bound():
    committed = _committed()
    rates = [p["gb_per_s"] for p in committed["programs"].values()] + [s["gb_per_s"] for s in committed["shapes"].values()]
    assert committed["bound_gb_per_s"] == max(rates)
    for shape in committed["shapes"].values():
        assert shape["over_bound"] >= 0.995  # no step faster than its bound (rounded to two places)


def test_the_bound_rises_to_a_decode_step_that_beats_every_program(tmp_path: Path):
    raw = json.loads((REPO / _committed()["raw"]).read_text())
    slow = {name: case | {"gb_per_s": 1.0} for name, case in raw["programs"].items()}
    (tmp_path / "raw.json").write_text(json.dumps(raw | {"programs": slow}))
    result = tpu_decode_bound.collect(tmp_path / "raw.json")
    assert result["bound_from"] == "decode step"
    assert result["bound_gb_per_s"] == max(s["gb_per_s"] for s in result["shapes"].values())


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("decode_bound")
    tpu_decode_bound.measure(out, small=True)
    return json.loads((out / "tpu_decode_bound-raw.json").read_text())


def test_every_layout_writes_and_attends_to_the_same_numbers(small_run: dict):
    variants = small_run["shapes"]["small"]["variants"]
    writes = {name: v["checksum"] for name, v in variants.items() if name != "attend_only"}
    assert set(writes) == set(tpu_decode_bound._layouts())
    first = next(iter(writes.values()))
    assert all(abs(c - first) <= 1e-5 * abs(first) for c in writes.values()), writes
    assert abs(variants["attend_only"]["checksum"] - first) > 1e-3 * abs(first)  # the writes reach what attention reads


def test_every_program_reports_the_bytes_it_moved(small_run: dict):
    programs = small_run["programs"]
    assert programs["copy_bf16 (read + write)"]["bytes"] == 2 * programs["sum_bf16"]["bytes"]
    assert all(p["gb_per_s"] > 0 for p in programs.values())


def test_the_padded_remedy_is_told_from_the_shapes_own_measurement_only_where_it_ran():
    import copy

    from bench.readme_render.tpu_decode_bound import render_tpu_decode_bound

    committed = _committed()
    told = render_tpu_decode_bound(committed)
    narrow = [n for n, s in committed["shapes"].items() if s["cache"]["head_dim"] < 128]
    s = committed["shapes"][narrow[0]]
    ratio = s["variant_ms"]["padded_128_dus"] / s["variant_ms"]["heads_first_dus"]
    assert f"{narrow[0]} {s['variant_ms']['padded_128_dus']:.3f} ms against {s['variant_ms']['heads_first_dus']:.3f} ({ratio:.2f}x)" in told
    without = copy.deepcopy(committed)
    for shape in without["shapes"].values():
        shape["variant_ms"].pop("padded_128_dus", None)
    assert "Measured on the 64-wide shapes themselves" not in render_tpu_decode_bound(without)


@pytest.mark.parametrize("t", [0, 15, 16, 35, 39])
def test_the_pallas_write_puts_one_position_where_dynamic_update_slice_does(t: int):
    """In Pallas's interpreter here (the chip compiles it): a cache length that is not a multiple of the kernel's
    block (40 rows, blocks of 16) included, and nothing else in the cache changes."""
    import jax
    import jax.numpy as jnp

    cache = jax.random.normal(jax.random.key(0), (2, 3, 40, 64)).astype(jnp.bfloat16)
    new = jax.random.normal(jax.random.key(1), (2, 3, 64)).astype(jnp.bfloat16)
    expected = jax.lax.dynamic_update_slice(cache, new[:, :, None, :], (0, 0, t, 0))
    written = jax.jit(tpu_decode_bound._pallas_block_write)(cache, new, jnp.int32(t))
    assert bool((written == expected).all())


def test_a_variant_that_fails_is_recorded_and_the_others_still_measured(monkeypatch: pytest.MonkeyPatch):
    layouts = tpu_decode_bound._layouts()

    def refused(cache, new, t):
        raise RuntimeError("Mosaic failed to lower")

    monkeypatch.setattr(tpu_decode_bound, "_layouts", lambda: {**layouts, "refused_dus": ("bhld", layouts["heads_first_dus"][1], refused)})
    found, failed = tpu_decode_bound.cache_variants(tpu_decode_bound.SMALL["small"], 1)
    assert failed == {"refused_dus": "RuntimeError: Mosaic failed to lower"}
    assert set(found) == {"attend_only", *layouts}
