"""Which TPU this machine has, so the local launcher refuses at submit a job it could never run.

Running a v6e-8 job with the local launcher is right on a v6e-8 TPU VM (Google's tutorial runs
MaxText there directly) and wrong on a laptop, where it would fail after launch. A TPU VM shows its
chips as `/dev/accel<N>` (v4, v5e, v6e) or as numbered `/dev/vfio/<N>` groups (v5p, and v6e with the
vfio driver), and names its slice in `TPU_ACCELERATOR_TYPE` (GKE TPU pods) or in the GCE metadata
attribute `accelerator-type` (Cloud TPU VMs); Ray's and vLLM's TPU support read the same places.
A device counts only when sysfs does not name another vendor than Google (PCI 0x1ae0), so a GPU
passed through vfio is not a TPU. The metadata server is asked only when TPU chips are present, with
a short timeout, so a machine without TPUs never waits on the network.
"""

from __future__ import annotations

import os
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from trainer.contract.tpu import CPU_ACCELERATOR, tpu_slice

GOOGLE_PCI_VENDOR = "0x1ae0"
TPU_TYPE_ENV = "TPU_ACCELERATOR_TYPE"
# Google's API names v5e slices v5litepod-N (Cloud TPU's "TPU v5e" page: AcceleratorType v5litepod-1, -4, -8), and so
# does a v5e VM's TPU_ACCELERATOR_TYPE (v5litepod-4 on the v5e machine lent to this project); rljob's table says v5e-N.
GOOGLE_TYPE_PREFIXES = {"v5litepod-": "v5e-"}
GCE_ACCELERATOR_TYPE_URL = "http://metadata.google.internal/computeMetadata/v1/instance/attributes/accelerator-type"
METADATA_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class HostTpu:
    chips: int  # TPU chips this machine shows
    accelerator_type: str | None  # its slice, e.g. v6e-8; None when nothing says
    type_source: str = ""  # where accelerator_type came from, for messages


def read_gce_accelerator_type(timeout_s: float = METADATA_TIMEOUT_S) -> str | None:
    request = urllib.request.Request(GCE_ACCELERATOR_TYPE_URL, headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.read(64).decode("ascii", "replace").strip() or None
    except (OSError, urllib.error.URLError, ValueError):
        return None


def _vendor_is_not_google(vendor_file: Path) -> bool:
    try:
        return vendor_file.read_text().strip().lower() != GOOGLE_PCI_VENDOR
    except OSError:
        return False  # sysfs says nothing: count the device, as Ray and vLLM do


def count_tpu_chips(dev_dir: Path = Path("/dev"), sys_dir: Path = Path("/sys")) -> int:
    accel = [p for p in dev_dir.glob("accel*") if re.fullmatch(r"accel[0-9]+", p.name)]
    accel = [p for p in accel if not _vendor_is_not_google(sys_dir / "class" / "accel" / p.name / "device" / "vendor")]
    if accel:
        return len(accel)
    groups = [p.name for p in (dev_dir / "vfio").glob("*") if p.name.isdigit()]
    google = 0
    for group in groups:
        vendors = list((sys_dir / "kernel" / "iommu_groups" / group / "devices").glob("*/vendor"))
        if not any(_vendor_is_not_google(v) for v in vendors):
            google += 1
    return google


def _named(google_type: str, source: str) -> tuple[str, str]:
    """The slice's name in rljob's table and where it came from (naming Google's spelling when it differs)."""
    for google, ours in GOOGLE_TYPE_PREFIXES.items():
        if google_type.startswith(google):
            return ours + google_type.removeprefix(google), f"{source}: {google_type}"
    return google_type, source


def probe_host_tpu(
    env: Mapping[str, str] = os.environ,
    dev_dir: Path = Path("/dev"),
    sys_dir: Path = Path("/sys"),
    read_metadata: Callable[[], str | None] = read_gce_accelerator_type,
) -> HostTpu:
    chips = count_tpu_chips(dev_dir, sys_dir)
    if chips == 0:
        return HostTpu(0, None)
    if env.get(TPU_TYPE_ENV):
        return HostTpu(chips, *_named(env[TPU_TYPE_ENV].strip(), TPU_TYPE_ENV))
    found = read_metadata()
    return HostTpu(chips, *_named(found, "the GCE metadata attribute accelerator-type")) if found else HostTpu(chips, None)


def host_accelerator_problem(accelerator: str, host: HostTpu) -> str | None:
    """Why a job asking for `accelerator` cannot run on this machine, or None when it can."""
    if accelerator == CPU_ACCELERATOR:
        return None
    tpu = tpu_slice(accelerator)
    if tpu is None:
        return f"{accelerator!r} is not a TPU slice rljob knows"
    elsewhere = f"submit {accelerator} jobs to an rljob service on a {accelerator} TPU VM, or to one using the Kubernetes launcher"
    if tpu.multi_host:
        return (
            f"hardware.accelerator {accelerator} spans {tpu.vms_per_slice} VMs, and the local launcher runs the "
            f"trainer as one process on this machine; {elsewhere}"
        )
    if host.chips == 0:
        return (
            f"hardware.accelerator {accelerator} needs a TPU, and this machine has none (no /dev/accel* or "
            f"/dev/vfio TPU devices); the local launcher runs cpu jobs here; {elsewhere}"
        )
    if host.accelerator_type is None:
        return (
            f"this machine shows {host.chips} TPU chip(s) but not which TPU ({TPU_TYPE_ENV} is unset and the GCE "
            f"metadata has no accelerator-type); if it is a {accelerator}, start the service with "
            f"{TPU_TYPE_ENV}={accelerator}"
        )
    if host.accelerator_type != accelerator:
        return (
            f"hardware.accelerator is {accelerator}, but this machine is a {host.accelerator_type} TPU VM "
            f"({host.type_source}); ask for {host.accelerator_type} here, or {elsewhere}"
        )
    if host.chips < tpu.chips_per_vm:
        return (
            f"a {accelerator} job needs {tpu.chips_per_vm} TPU chips and this machine shows only {host.chips}; "
            "another process or container may hold the rest"
        )
    return None
