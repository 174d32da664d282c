"""The local launcher's view of this machine's TPU: devices, type, and why a job cannot run here."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.adapters.local.host_tpu import GOOGLE_PCI_VENDOR, HostTpu, host_accelerator_problem, probe_host_tpu


def _machine(tmp_path: Path, accel: int = 0, vfio: dict[str, str] | None = None, accel_vendor: str | None = None) -> tuple[Path, Path]:
    dev, sys = tmp_path / "dev", tmp_path / "sys"
    dev.mkdir()
    for i in range(accel):
        (dev / f"accel{i}").touch()
        if accel_vendor:
            vendor = sys / "class" / "accel" / f"accel{i}" / "device" / "vendor"
            vendor.parent.mkdir(parents=True)
            vendor.write_text(accel_vendor + "\n")
    if vfio is not None:
        (dev / "vfio").mkdir()
        (dev / "vfio" / "vfio").touch()  # the container node every vfio host has
        for group, vendor in vfio.items():
            (dev / "vfio" / group).touch()
            device = sys / "kernel" / "iommu_groups" / group / "devices" / "0000:00:04.0"
            device.mkdir(parents=True)
            (device / "vendor").write_text(vendor + "\n")
    return dev, sys


def _no_metadata() -> str | None:
    raise AssertionError("a machine without TPU chips must not ask the metadata server")


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


def test_a_v6e_8_vm_with_its_type_in_the_environment(tmp_path: Path) -> None:
    dev, sys = _machine(tmp_path, accel=8)
    host = probe_host_tpu({"TPU_ACCELERATOR_TYPE": "v6e-8"}, dev, sys, _no_metadata)
    assert host == HostTpu(8, "v6e-8", "TPU_ACCELERATOR_TYPE")


def test_a_vfio_tpu_vm_with_its_type_in_the_metadata(tmp_path: Path) -> None:
    dev, sys = _machine(tmp_path, vfio={str(i): GOOGLE_PCI_VENDOR for i in range(4)})
    host = probe_host_tpu({}, dev, sys, lambda: "v5p-8")
    assert host.chips == 4 and host.accelerator_type == "v5p-8" and "metadata" in host.type_source


@pytest.mark.parametrize("chips", [1, 4])
def test_a_v5e_vm_says_v5litepod_and_runs_v5e_jobs(tmp_path: Path, chips: int) -> None:
    """Google spells a v5e slice v5litepod-N in TPU_ACCELERATOR_TYPE and the metadata; it is rljob's v5e-N."""
    dev, sys = _machine(tmp_path, vfio={str(i): GOOGLE_PCI_VENDOR for i in range(chips)})
    host = probe_host_tpu({"TPU_ACCELERATOR_TYPE": f"v5litepod-{chips}"}, dev, sys, _no_metadata)
    assert host == HostTpu(chips, f"v5e-{chips}", f"TPU_ACCELERATOR_TYPE: v5litepod-{chips}")
    assert host_accelerator_problem(f"v5e-{chips}", host) is None
    from_metadata = probe_host_tpu({}, dev, sys, lambda: f"v5litepod-{chips}")
    assert from_metadata.accelerator_type == f"v5e-{chips}" and f"v5litepod-{chips}" in from_metadata.type_source
    refused = host_accelerator_problem("v5e-8", host)
    assert refused is not None and f"this machine is a v5e-{chips} TPU VM (TPU_ACCELERATOR_TYPE: v5litepod-{chips})" in refused


def test_chips_without_a_type_stay_unknown(tmp_path: Path) -> None:
    dev, sys = _machine(tmp_path, accel=4)
    assert probe_host_tpu({}, dev, sys, lambda: None) == HostTpu(4, None)


V6E8_VM = HostTpu(8, "v6e-8", "TPU_ACCELERATOR_TYPE")


@pytest.mark.parametrize(
    ("accelerator", "host", "says"),
    [
        ("cpu", HostTpu(0, None), None),
        ("cpu", V6E8_VM, None),
        ("v6e-8", V6E8_VM, None),  # Google's tutorial: MaxText directly on a v6e-8 VM
        ("v6e-8", HostTpu(0, None), "this machine has none"),
        ("v5e-8", V6E8_VM, "this machine is a v6e-8 TPU VM"),
        ("v6e-16", V6E8_VM, "spans 4 VMs"),
        ("v6e-8", HostTpu(8, None), "TPU_ACCELERATOR_TYPE=v6e-8"),
        ("v6e-8", HostTpu(4, "v6e-8", "TPU_ACCELERATOR_TYPE"), "shows only 4"),
    ],
)
def test_why_a_job_cannot_run_here(accelerator: str, host: HostTpu, says: str | None) -> None:
    problem = host_accelerator_problem(accelerator, host)
    if says is None:
        assert problem is None
    else:
        assert problem is not None and says in problem and accelerator in problem
