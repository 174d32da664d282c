"""Every place that takes a DNS-1123 label applies the one rule (trainer/contract/spec/dns_label.py) the same way."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

from service.adapters.k8s.errors import ManifestError
from service.adapters.k8s.names import check_dns_label
from service.adapters.k8s.settings import K8sSettings
from service.domain.records.errors import InvalidRequest
from service.domain.tokens import TokenService
from tests.trainer.conftest import write_spec
from trainer.cli import main as trainer_main
from trainer.contract import ExitCode, JobSpec

ACCEPTED = ["a", "0", "rl-abc123def456", "team-a", "a" * 63]
# "a\n": a regex's `$` also matches before a final newline, so `re.match` alone would let it through.
REFUSED = ["A", "-a", "a-", "a_b", "a.b", "a\n", "é", "a" * 64]


class _TokenStore:
    def add_token(self, record, token_hash) -> None:
        pass


def _site_checks(tmp_path: Path, spec: dict, capsys) -> dict[str, Callable[[str], None]]:
    spec_file = write_spec(tmp_path / "spec.yaml", spec)

    def trainer_job_id(value: str) -> None:
        code = trainer_main(["plan", "--spec", str(spec_file), f"--job-id={value}"])
        if "  --job-id:" in capsys.readouterr().err:
            assert code == ExitCode.INVALID_SPEC
            raise ValueError("refused --job-id")

    return {
        "job name": lambda v: JobSpec.model_validate({**spec, "name": v}),
        "label key": lambda v: JobSpec.model_validate({**spec, "labels": {v: "x"}}),
        "team": lambda v: TokenService(_TokenStore()).create(v),  # type: ignore[arg-type]
        "k8s namespace": lambda v: K8sSettings(namespace=v),
        "k8s service account": lambda v: K8sSettings(service_account=v),
        "k8s object name": lambda v: check_dns_label(v, what="object name"),
        "trainer --job-id": trainer_job_id,
    }


SITES = ["job name", "label key", "team", "k8s namespace", "k8s service account", "k8s object name", "trainer --job-id"]


@pytest.mark.parametrize("site", SITES)
def test_each_site_accepts_and_refuses_the_same_names(site: str, tmp_path: Path, tiny_spec_dict: dict, capsys) -> None:
    check = _site_checks(tmp_path, tiny_spec_dict, capsys)[site]
    for value in ACCEPTED:
        check(value)
    for value in REFUSED:
        with pytest.raises((ValueError, ValidationError, InvalidRequest, ManifestError)):
            check(value)
            print(f"{site} accepted {value!r}")
