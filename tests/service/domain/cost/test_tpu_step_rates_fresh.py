"""The rates a TPU job's estimate uses (service/domain/cost/tpu_step_rates.json) are what the chip bench's result
(bench/results/tpu_grpo.json) gives today, so a re-measured chip cannot leave the estimate on the old figures."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

from service.domain.cost.tpu_step_time import RATES_FILE, REGENERATE, measured_rates, rates_from_json

ROOT = Path(__file__).resolve().parents[4]


def _script() -> ModuleType:
    """scripts/ is not a package: load the script by path, as `python scripts/tpu_step_rates.py` runs it."""
    spec = importlib.util.spec_from_file_location("tpu_step_rates", ROOT / "scripts" / "tpu_step_rates.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("tpu_step_rates", module)
    spec.loader.exec_module(module)
    return module


script = _script()


def test_the_checked_in_rates_are_what_the_bench_result_gives() -> None:
    assert RATES_FILE.read_text() == script.rendered(), (
        f"{RATES_FILE.relative_to(ROOT)} is not what bench/results/tpu_grpo.json gives (the chip was measured again, or "
        f"the derivation changed): run `{REGENERATE}` and commit the file"
    )
    assert measured_rates() == rates_from_json(json.loads(script.rendered()))


def test_a_changed_measurement_changes_the_rates() -> None:
    result = json.loads(script.RESULT.read_text())
    before = script.derive_rates(result)
    slower = copy.deepcopy(result)
    for shape in slower["shapes"]:
        for step in shape["steps"]:
            step["parts"]["rollout"] *= 2
            step["parts"]["update"] *= 2
    after = script.derive_rates(slower)
    assert after["decode_overhead_s_per_position"]["value"] > before["decode_overhead_s_per_position"]["value"]
    assert all(a["update_utilization"] < b["update_utilization"] for a, b in zip(after["shapes"], before["shapes"], strict=True))


def test_the_settings_passed_since_the_offloading_runs_are_maxtexts_defaults() -> None:
    """A run of the offloaded result pairs with today's command less the kept layers' overrides and the settings the
    train stage passes since at MaxText's defaults: each such setting is base.yml's value, read from the installed
    MaxText, and the offloaded runs never passed it (so they ran the default)."""
    import yaml
    from maxtext.configs import __file__ as configs_init

    base = yaml.safe_load((Path(configs_init).parent / "base.yml").read_text())
    offloaded = json.loads(script.OFFLOADED.read_text())
    for arg in script.DEFAULTS_PASSED_SINCE_OFFLOADED:
        key, value = arg.split("=", 1)
        assert str(base[key]).lower() == value, arg
        assert all(not a.startswith(f"{key}=") for s in offloaded["shapes"] for a in s["command"]), arg
        assert all(arg in s["command"] for s in json.loads(script.RESULT.read_text())["shapes"]), arg
