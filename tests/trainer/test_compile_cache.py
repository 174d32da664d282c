"""The run's JAX compilation cache (trainer/compile_cache.py): where it lives, what a job's processes are given, and that
JAX really reads an entry another process wrote there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trainer.compile_cache import CACHE_ROOT_ENV, DIR_ENV, LOCAL_MAX_BYTES, MAX_SIZE_ENV, cache_env
from trainer.contract import JobSpec

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_cache_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's own cache (tests/conftest.py) out of the way, restored afterwards."""
    for name in (DIR_ENV, MAX_SIZE_ENV, CACHE_ROOT_ENV):
        monkeypatch.setenv(name, "restored-after")
        monkeypatch.delenv(name)


def _spec(tiny_spec_dict: dict, output: str) -> JobSpec:
    return JobSpec.model_validate({**tiny_spec_dict, "output": output})


def test_the_cache_lives_beside_the_conversion_cache_bounded_on_disk_and_not_on_gcs(tiny_spec_dict, tmp_path, monkeypatch, no_cache_env):
    local = _spec(tiny_spec_dict, str(tmp_path / "runs"))
    assert cache_env(local) == {DIR_ENV: f"{tmp_path}/runs/_cache/jax", MAX_SIZE_ENV: str(LOCAL_MAX_BYTES)}
    gcs = _spec(tiny_spec_dict, "gs://team-bucket/runs")
    assert cache_env(gcs) == {DIR_ENV: "gs://team-bucket/runs/_cache/jax"}  # objects appear whole: no lock to take
    monkeypatch.setenv(CACHE_ROOT_ENV, "file:///fast/disk/")
    assert cache_env(gcs) == {DIR_ENV: "/fast/disk", MAX_SIZE_ENV: str(LOCAL_MAX_BYTES)}
    monkeypatch.setenv(CACHE_ROOT_ENV, "off")
    assert cache_env(gcs) == {}
    monkeypatch.setenv(CACHE_ROOT_ENV, "jax-cache")
    with pytest.raises(ValueError, match="RLJOB_JAX_CACHE='jax-cache': give gs://BUCKET/PATH, an absolute path or off"):
        cache_env(gcs)
    monkeypatch.delenv(CACHE_ROOT_ENV)
    monkeypatch.setenv(DIR_ENV, "/operator/choice")
    assert cache_env(gcs) == {}  # one the machine names is kept


def test_trainer_run_gives_every_stage_the_cache_before_anything_compiles(tiny_spec_dict, tmp_path, monkeypatch, no_cache_env):
    """`trainer run` sets the cache in its own environment, which the stage processes inherit (runner.py), before the
    pipeline starts; a local root is made 0700, so a reward worker of another uid cannot plant an entry."""
    import yaml

    from trainer import pipeline
    from trainer.cli import main
    from trainer.contract import ExitCode

    seen: dict[str, str | None] = {}

    def pipeline_seeing_the_env(ctx: object, **_: object) -> ExitCode:
        seen.update({name: os.environ.get(name) for name in (DIR_ENV, MAX_SIZE_ENV)})
        return ExitCode.SUCCESS

    monkeypatch.setattr(pipeline, "run_pipeline", pipeline_seeing_the_env)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(tiny_spec_dict))
    assert main(["run", "--spec", str(spec)]) == ExitCode.SUCCESS
    cache = tmp_path / "runs" / "_cache" / "jax"
    assert seen == {DIR_ENV: str(cache), MAX_SIZE_ENV: str(LOCAL_MAX_BYTES)}
    assert cache.is_dir() and cache.stat().st_mode & 0o777 == 0o700


def test_a_bad_cache_root_is_refused_before_anything_runs(tiny_spec_dict, tmp_path, monkeypatch, capsys, no_cache_env):
    import yaml

    from trainer.cli import main
    from trainer.contract import ExitCode

    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(tiny_spec_dict))
    monkeypatch.setenv(CACHE_ROOT_ENV, "relative/cache")
    assert main(["run", "--spec", str(spec)]) == ExitCode.INVALID_SPEC
    assert "RLJOB_JAX_CACHE" in capsys.readouterr().err and not (tmp_path / "runs").exists()


COMPILE = textwrap.dedent(
    """
    import json, sys
    from trainer.contract import JobSpec
    from trainer.compile_cache import use_compile_cache
    use_compile_cache(JobSpec.model_validate_json(sys.argv[1]))
    import jax, jax.numpy as jnp
    hits = []
    jax.monitoring.register_event_listener(lambda event, **kw: hits.append(event) if event.endswith("cache_hits") else None)
    print(json.dumps({"value": float(jax.jit(lambda x: (x @ x.T).sum())(jnp.ones((64, 64)))), "hits": len(hits)}))
    """
)


def test_a_second_process_of_the_job_runs_what_the_first_compiled(tiny_spec_dict, tmp_path, no_cache_env):
    """Real JAX: the first process compiles and writes the entry, the second finds it (JAX's own hit counter)."""
    spec = _spec(tiny_spec_dict, str(tmp_path / "runs")).model_dump_json()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env |= {"JAX_PLATFORMS": "cpu", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "PYTHONPATH": str(ROOT)}
    runs = [
        json.loads(subprocess.run([sys.executable, "-c", COMPILE, spec], env=env, capture_output=True, text=True, check=True).stdout)
        for _ in range(2)
    ]
    assert runs[0]["hits"] == 0 and runs[1]["hits"] >= 1 and runs[0]["value"] == runs[1]["value"] == 64.0 * 64 * 64
    assert any(p.name.endswith("-cache") for p in (tmp_path / "runs" / "_cache" / "jax").iterdir())
