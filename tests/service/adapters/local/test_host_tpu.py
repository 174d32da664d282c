"""The local launcher's view of this machine's TPU: the chips this process can open, the slice that makes it runnable,
why a job cannot run here, and the operator's RLJOB_HOST_TPU. Fabricated /dev and /sys trees and environments; one
of them is the v5e machine lent to this project as read there (gVisor, 13 cores, one chip of a 4-chip host)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from service.adapters.launchers import build_launcher
from service.adapters.local.host_tpu import GOOGLE_PCI_VENDOR, HostTpu, host_accelerator_problem, probe_host_tpu
from service.config import Settings
from service.domain.records.errors import InvalidRequest
from service.settings_env import SettingsInvalid
from tests.service.observation_recorder import Recorder
from tests.service.service_helpers import spec_body
from trainer.contract import JobSpec


def _machine(
    tmp_path: Path, accel: int = 0, vfio: dict[str, str] | None = None, accel_vendor: str | None = None, iommu_groups: int = 0
) -> tuple[Path, Path]:
    """A /dev and /sys: `accel` /dev/accel<N> chips, the `vfio` groups /dev/vfio shows (group -> its device's vendor),
    and `iommu_groups` Google groups in sysfs that /dev does not show (the host's other chips)."""
    dev, sys = tmp_path / "dev", tmp_path / "sys"
    dev.mkdir(parents=True)
    for i in range(accel):
        (dev / f"accel{i}").touch()
        if accel_vendor:
            vendor = sys / "class" / "accel" / f"accel{i}" / "device" / "vendor"
            vendor.parent.mkdir(parents=True)
            vendor.write_text(accel_vendor + "\n")
    for group in range(iommu_groups):
        device = sys / "kernel" / "iommu_groups" / str(group) / "devices" / f"0000:00:{8 + group:02x}.0"
        device.mkdir(parents=True)
        (device / "vendor").write_text(GOOGLE_PCI_VENDOR + "\n")
        pci = sys / "bus" / "pci" / "devices" / device.name  # what JAX counts: the host's chips, not this process's
        pci.mkdir(parents=True)
        (pci / "vendor").write_text(GOOGLE_PCI_VENDOR + "\n")
        (pci / "device").write_text("0x0063\n")
    if vfio is not None:
        (dev / "vfio").mkdir()
        (dev / "vfio" / "vfio").touch()  # the container node every vfio host has
        for group, vendor in vfio.items():
            (dev / "vfio" / group).touch()
            device = sys / "kernel" / "iommu_groups" / group / "devices" / "0000:00:04.0"
            if not device.parent.exists():
                device.mkdir(parents=True)
                (device / "vendor").write_text(vendor + "\n")
    return dev, sys


def _no_metadata() -> str | None:
    raise AssertionError("a machine without TPU chips must not ask the metadata server")


def _google_vfio(*groups: int) -> dict[str, str]:
    return {str(g): GOOGLE_PCI_VENDOR for g in groups}


# The lent v5e machine, read there: its environment (the TPU_* variables), /dev/vfio/3 and the vfio node, four IOMMU
# groups and four v5e PCI functions in sysfs (the host's), and JAX 0.10.2 ran the train stage on its one chip.
LENT_V5E_ENV = {
    "TPU_ACCELERATOR_TYPE": "v5litepod-4",
    "TPU_CHIPS_PER_HOST_BOUNDS": "2,2,1",
    "TPU_HOST_BOUNDS": "1,1,1",
    "TPU_SKIP_MDS_QUERY": "true",
    "TPU_TOPOLOGY": "2x2",
    "TPU_WORKER_HOSTNAMES": "localhost",
    "TPU_WORKER_ID": "0",
}


def test_the_lent_v5e_machine_runs_v5e_1_jobs_on_the_one_chip_it_sees(tmp_path: Path) -> None:
    dev, sys = _machine(tmp_path, vfio=_google_vfio(3), iommu_groups=4)
    host = probe_host_tpu(LENT_V5E_ENV, dev, sys, _no_metadata)
    assert (host.chips, host.accelerator_type, host.job_chips) == (1, "v5e-1", 1)
    said = "TPU_ACCELERATOR_TYPE says v5litepod-4 (a v5e-4 host; TPU_TOPOLOGY=2x2), this process sees 1 chip"
    assert host.type_source.startswith(said)
    assert host.summary().endswith(": it runs v5e-1 jobs, one at a time")
    assert host_accelerator_problem("v5e-1", host) is None
    refused = host_accelerator_problem("v5e-4", host)
    assert refused is not None and refused.startswith(f"hardware.accelerator is v5e-4, but this machine runs v5e-1 jobs ({said}")


@pytest.mark.parametrize(
    ("devices", "env", "chips", "runs", "says"),
    [
        # The chips this process sees and the host's slice agree.
        ({"accel": 8}, {"TPU_ACCELERATOR_TYPE": "v6e-8"}, 8, "v6e-8", "TPU_ACCELERATOR_TYPE says v6e-8, this process sees 8 chips"),
        ({"vfio": _google_vfio(0, 1, 2, 3)}, {"TPU_ACCELERATOR_TYPE": "v5litepod-4"}, 4, "v5e-4", "(a v5e-4 host)"),
        ({"accel": 8}, {"TPU_ACCELERATOR_TYPE": "v5litepod-8", "TPU_TOPOLOGY": "2x4"}, 8, "v5e-8", "TPU_TOPOLOGY=2x4)"),
        # Fewer chips than the host's VM: the single-VM slice of its generation with the chips seen.
        ({"accel": 4}, {"TPU_ACCELERATOR_TYPE": "v5litepod-8"}, 4, "v5e-4", "sees 4 chips (4 TPU devices under /dev)"),
        ({"accel": 8}, {"TPU_ACCELERATOR_TYPE": "v6e-8", "TPU_VISIBLE_CHIPS": "3"}, 1, "v6e-1", "TPU_VISIBLE_CHIPS=3)"),
        ({"accel": 8}, {"TPU_ACCELERATOR_TYPE": "v6e-8", "TPU_CHIPS_PER_PROCESS_BOUNDS": "2,2,1"}, 4, "v6e-4", "BOUNDS=2,2,1"),
        # The topology is shown, not obeyed: the chips decide.
        ({"accel": 4}, {"TPU_ACCELERATOR_TYPE": "v5litepod-4", "TPU_TOPOLOGY": "2x4"}, 4, "v5e-4", "TPU_TOPOLOGY=2x4, not its 2x2"),
        # No device found, but libtpu's own variable names the chips this process may open.
        ({}, {"TPU_ACCELERATOR_TYPE": "v5litepod-4", "TPU_VISIBLE_CHIPS": "0"}, 1, "v5e-1", "no TPU device under /dev"),
    ],
)
def test_the_chips_this_process_sees_decide_the_slice_it_runs(
    tmp_path: Path, devices: dict[str, object], env: dict[str, str], chips: int, runs: str, says: str
) -> None:
    dev, sys = _machine(tmp_path, **devices)  # type: ignore[arg-type]
    host = probe_host_tpu(env, dev, sys, _no_metadata)
    assert (host.chips, host.accelerator_type, host.refusal) == (chips, runs, None)
    assert says in host.type_source
    assert host_accelerator_problem(runs, host) is None


@pytest.mark.parametrize(
    ("devices", "env", "says"),
    [
        ({"accel": 2}, {"TPU_ACCELERATOR_TYPE": "v6e-8"}, "no v6e slice has 2 chips on one VM (v6e-1, v6e-4, v6e-8)"),
        ({"vfio": _google_vfio(0)}, {"TPU_ACCELERATOR_TYPE": "v5p-8"}, "no v5p slice has 1 chip on one VM"),
        ({"accel": 4}, {"TPU_ACCELERATOR_TYPE": "v6e-16"}, "a slice of 4 VMs of which this machine is one"),
        (
            {"accel": 4},
            {"TPU_ACCELERATOR_TYPE": "v4-8"},
            "v4-8, not a TPU slice rljob knows; if this process can run one, set RLJOB_HOST_TPU",
        ),
        (
            {"accel": 4},
            {"TPU_ACCELERATOR_TYPE": "v6e-4", "TPU_VISIBLE_CHIPS": ""},
            "4 TPU devices under /dev, TPU_VISIBLE_CHIPS is empty), so it opens no TPU chip",
        ),
        # The host's bounds (2,2,1 on the lent machine) are no count of this process's chips: with no device, refused.
        ({}, LENT_V5E_ENV, "no TPU device under /dev (/dev/accel<N>, /dev/vfio/<N>)"),
    ],
)
def test_a_tpu_the_process_cannot_run_is_refused_with_its_reason(
    tmp_path: Path, devices: dict[str, object], env: dict[str, str], says: str
) -> None:
    dev, sys = _machine(tmp_path, **devices)  # type: ignore[arg-type]
    host = probe_host_tpu(env, dev, sys, _no_metadata)
    assert host.accelerator_type is None and host.refusal is not None and says in host.refusal
    problem = host_accelerator_problem("v6e-1", host)
    assert problem is not None and says in problem and "Kubernetes launcher" in problem


def test_a_laptop_has_no_tpu_and_never_asks_the_network(tmp_path: Path) -> None:
    dev, sys = _machine(tmp_path)
    (dev / "accel").mkdir()  # the kernel's accel subsystem directory (e.g. an NPU) is not a TPU chip
    assert probe_host_tpu({}, dev, sys, _no_metadata) == HostTpu(0, None)


def test_a_gpu_passed_through_vfio_is_not_a_tpu(tmp_path: Path) -> None:
    dev, sys = _machine(tmp_path, vfio={"12": "0x10de"})  # NVIDIA
    assert probe_host_tpu({}, dev, sys, _no_metadata).chips == 0


def test_an_accel_device_of_another_vendor_is_not_a_tpu(tmp_path: Path) -> None:
    dev, sys = _machine(tmp_path, accel=1, accel_vendor="0x8086")  # an Intel NPU
    assert probe_host_tpu({}, dev, sys, _no_metadata).chips == 0


def test_a_vfio_tpu_vm_with_its_type_in_the_metadata(tmp_path: Path) -> None:
    dev, sys = _machine(tmp_path, vfio=_google_vfio(0, 1, 2, 3))
    host = probe_host_tpu({}, dev, sys, lambda: "v5p-8")
    assert host.chips == 4 and host.accelerator_type == "v5p-8" and "the GCE metadata attribute accelerator-type says" in host.type_source
    from_metadata = probe_host_tpu({}, dev, sys, lambda: "v5litepod-4")
    assert from_metadata.accelerator_type == "v5e-4" and "says v5litepod-4 (a v5e-4 host)" in from_metadata.type_source


def test_chips_without_a_type_stay_unknown(tmp_path: Path) -> None:
    dev, sys = _machine(tmp_path, accel=4)
    host = probe_host_tpu({}, dev, sys, lambda: None)
    assert (host.chips, host.accelerator_type, host.refusal) == (4, None, None)
    assert "RLJOB_HOST_TPU=v6e-4" in (host_accelerator_problem("v6e-4", host) or "")


def test_the_operators_setting_names_the_slice_whatever_the_machine_shows(tmp_path: Path) -> None:
    dev, sys = _machine(tmp_path)  # nothing to count
    host = probe_host_tpu({}, dev, sys, _no_metadata, override="v5e-1")
    assert (host.chips, host.accelerator_type, host.job_chips) == (1, "v5e-1", 1)
    assert host.type_source.startswith("RLJOB_HOST_TPU=v5e-1, the operator's setting (the probe alone: no TPU")
    none = probe_host_tpu({"TPU_ACCELERATOR_TYPE": "v6e-8"}, *_machine(tmp_path / "vm", accel=8), _no_metadata, override="cpu")
    assert none.accelerator_type is None and "RLJOB_HOST_TPU=cpu" in (host_accelerator_problem("v6e-8", none) or "")
    with pytest.raises(ValueError, match="must be cpu or one of"):
        probe_host_tpu({}, dev, sys, _no_metadata, override="v6e-16")


@pytest.mark.parametrize(("value", "says"), [("v6e-16", "a slice of one VM"), ("v5litepod-1", "Google's v5litepod-N is v5e-N")])
def test_rljob_host_tpu_must_be_a_slice_of_one_vm(monkeypatch: pytest.MonkeyPatch, value: str, says: str) -> None:
    monkeypatch.setenv("RLJOB_HOST_TPU", value)
    with pytest.raises(SettingsInvalid) as refused:
        from service.config import load_settings

        load_settings()
    assert "RLJOB_HOST_TPU" in str(refused.value) and says in str(refused.value)


def test_the_service_builds_its_launcher_with_rljob_host_tpu(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state", host_tpu="v5e-1")
    launcher = build_launcher(settings)
    body = spec_body(tmp_path, hardware={"accelerator": "v5e-1", "chips_per_vm": 1, "rollout_engine": "jax"})
    launcher.check_submittable(JobSpec.model_validate(body))  # this laptop has no chip: only the setting admits it
    with pytest.raises(InvalidRequest, match="RLJOB_HOST_TPU=v5e-1, the operator's setting"):
        launcher.check_submittable(JobSpec.model_validate({**body, "hardware": {**body["hardware"], "accelerator": "v6e-1"}}))


def test_the_launcher_says_once_at_start_what_it_found(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from service.adapters.local import LocalProcessLauncher

    calls: list[int] = []

    def probe() -> HostTpu:
        calls.append(1)
        return HostTpu(1, "v5e-1", "TPU_ACCELERATOR_TYPE says v5litepod-4 (a v5e-4 host), this process sees 1 chip")

    launcher = LocalProcessLauncher(tmp_path / "jobs", ["true"], probe_tpu=probe)
    with caplog.at_level(logging.INFO, logger="service.adapters.local.launcher"):
        launcher.start(Recorder())
    try:
        assert "this process sees 1 chip: it runs v5e-1 jobs, one at a time" in caplog.text
        launcher.check_submittable(JobSpec.model_validate(spec_body(tmp_path, hardware={"accelerator": "v5e-1", "chips_per_vm": 1})))
        assert calls == [1]
    finally:
        launcher.stop()


V6E8_VM = HostTpu(8, "v6e-8", "TPU_ACCELERATOR_TYPE says v6e-8, this process sees 8 chips")


@pytest.mark.parametrize(
    ("accelerator", "host", "says"),
    [
        ("cpu", HostTpu(0, None), None),
        ("cpu", V6E8_VM, None),
        ("v6e-8", V6E8_VM, None),  # Google's tutorial: MaxText directly on a v6e-8 VM
        ("v6e-8", HostTpu(0, None), "this machine has none"),
        ("v5e-8", V6E8_VM, "this machine runs v6e-8 jobs (TPU_ACCELERATOR_TYPE says v6e-8, this process sees 8 chips)"),
        ("v6e-16", V6E8_VM, "spans 4 VMs"),
        ("v6e-8", HostTpu(8, None), "RLJOB_HOST_TPU=v6e-8"),
    ],
)
def test_why_a_job_cannot_run_here(accelerator: str, host: HostTpu, says: str | None) -> None:
    problem = host_accelerator_problem(accelerator, host)
    if says is None:
        assert problem is None
    else:
        assert problem is not None and says in problem and accelerator in problem
