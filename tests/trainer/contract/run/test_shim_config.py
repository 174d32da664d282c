"""The shim document (trainer/contract/run/shim_config.py) refuses a field it does not know, at the top and in each part.

A field left out is a feature not installed (train_rl_entry.py's INSTALLS), so a misnamed one read with
extra="ignore" would drop its feature without a word: the entry must stop at the name instead."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from trainer.contract.run.shim_config import SHIM_CONFIG_FLAG, GrpoObjective, ShimConfig, pop_shim_config


def _argv(document: dict[str, object]) -> list[str]:
    return ["model_name=x", SHIM_CONFIG_FLAG + json.dumps(document), "steps=3"]


def test_a_known_document_is_read_and_taken_off_the_argv() -> None:
    shim, rest = pop_shim_config(_argv({"rollout_seed": 7, "objective": {"kl_loss_mode": "mse_kl"}}))
    assert shim == ShimConfig(rollout_seed=7, objective=GrpoObjective(kl_loss_mode="mse_kl")) and rest == ["model_name=x", "steps=3"]


@pytest.mark.parametrize(
    ("document", "misnamed"),
    [
        ({"rollout_seeds": 7}, "rollout_seeds"),  # the seed's feature would never be installed
        ({"objective": {"kl_loss_mode": "mse_kl", "epsilon_hi": 0.3}}, "epsilon_hi"),  # inside a part
    ],
)
def test_a_misnamed_field_is_refused_not_dropped(document: dict[str, object], misnamed: str) -> None:
    with pytest.raises(ValidationError, match=misnamed) as refused:
        pop_shim_config(_argv(document))
    assert "extra_forbidden" in str(refused.value)
