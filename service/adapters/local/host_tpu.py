"""Which TPU slice this process can run, so the local launcher refuses at submit a job it could never run.

Running a v6e-8 job with the local launcher is right on a v6e-8 TPU VM (Google's tutorial runs MaxText there
directly) and wrong on a laptop, where it would fail after launch. Two facts decide, and the chips win:

- The chips this process can open. A TPU VM shows its chips as `/dev/accel<N>` (v4, v5e, v6e) or as numbered
  `/dev/vfio/<N>` groups (v5p, v6e with the vfio driver, and the gVisor sandbox of the v5e machine lent to this
  project: /dev/vfio/3 only, its IOMMU group 3 one Google device). A device counts only when sysfs does not name
  another vendor than Google (PCI 0x1ae0), so a GPU passed through vfio is not a TPU. `TPU_VISIBLE_CHIPS` and
  `TPU_CHIPS_PER_PROCESS_BOUNDS` narrow them: libtpu opens only those (JAX's test_multiprocess.py and Ray's TPU
  accelerator manager give each process its share that way). Not `/sys/bus/pci`, which JAX reads to tell whether it
  is on a TPU at all: in the lent sandbox it lists the host's four chips, and `TPU_CHIPS_PER_HOST_BOUNDS` (2,2,1
  there) is the host's too.
- The host's slice, from `TPU_ACCELERATOR_TYPE` (GKE TPU pods, the lent machine) or the GCE metadata attribute
  `accelerator-type` (Cloud TPU VMs), where Ray's and vLLM's TPU support read it; `TPU_TOPOLOGY` is shown beside it.
  A process shown fewer chips than its host's VM has (GKE gives a pod asking google.com/tpu: 1 on a 4-chip v5e node
  one chip, and says v5litepod-4) runs the single-VM slice of that generation with the chips it sees (v5e-1), or no
  TPU job when there is none (no v6e-2).

`RLJOB_HOST_TPU` (service/config.py) names the slice outright, for a machine whose devices cannot be counted. The
metadata server is asked only when chips are present, with a short timeout, so a machine without TPUs never waits on
the network.
"""

from __future__ import annotations

import os
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from trainer.contract.accelerators.tpu import CPU_ACCELERATOR, TPU_SLICES, TpuSlice, tpu_slice
from trainer.contract.accelerators.tpu_generations import TPU_GENERATIONS

GOOGLE_PCI_VENDOR = "0x1ae0"
TPU_TYPE_ENV = "TPU_ACCELERATOR_TYPE"
TPU_TOPOLOGY_ENV = "TPU_TOPOLOGY"
HOST_TPU_SETTING = "RLJOB_HOST_TPU"
# What libtpu reads to open only some of the chips a process could see (a list of chip ids; chips along each axis).
VISIBLE_CHIPS_ENV = "TPU_VISIBLE_CHIPS"
PROCESS_BOUNDS_ENV = "TPU_CHIPS_PER_PROCESS_BOUNDS"
# Variables that name a TPU environment (GKE's, the lent machine's, JAX's multi-process ones): with no device found,
# they turn "no TPU here" into a refusal that says what to set.
TPU_ENV_MARKERS = (
    TPU_TYPE_ENV,
    TPU_TOPOLOGY_ENV,
    "TPU_WORKER_ID",
    "TPU_WORKER_HOSTNAMES",
    "TPU_SKIP_MDS_QUERY",
    "TPU_CHIPS_PER_HOST_BOUNDS",
    "TPU_PROCESS_BOUNDS",
    VISIBLE_CHIPS_ENV,
    PROCESS_BOUNDS_ENV,
)
# Google's API names v5e slices v5litepod-N (Cloud TPU's "TPU v5e" page: AcceleratorType v5litepod-1, -4, -8), and so
# does a v5e VM's TPU_ACCELERATOR_TYPE (v5litepod-4 on the v5e machine lent to this project); rljob's table says v5e-N.
GOOGLE_TYPE_PREFIXES = {g.google_api_prefix: f"{name}-" for name, g in TPU_GENERATIONS.items() if g.google_api_prefix}
GCE_ACCELERATOR_TYPE_URL = "http://metadata.google.internal/computeMetadata/v1/instance/attributes/accelerator-type"
METADATA_TIMEOUT_S = 1.0
SINGLE_VM_SLICES = tuple(name for name, tpu in TPU_SLICES.items() if not tpu.multi_host)
SLICE_CHOICES = ", ".join(SINGLE_VM_SLICES)


@dataclass(frozen=True)
class HostTpu:
    chips: int  # TPU chips this process can open
    accelerator_type: str | None  # the slice a TPU job may ask for here, in rljob's names; None: no TPU job runs here
    type_source: str = ""  # the facts that chose accelerator_type and where each came from, for messages and the log
    refusal: str | None = None  # why no TPU job runs here although something names a TPU

    @property
    def job_chips(self) -> int:
        """The chips TPU jobs share here: one slice's. libtpu lets one process at a time hold the chips a process
        sees, so a job of this slice takes them all and the next one waits, however many chips the host has."""
        tpu = tpu_slice(self.accelerator_type) if self.accelerator_type else None
        return tpu.chips if tpu else self.chips

    def summary(self) -> str:
        if self.accelerator_type:
            return f"{self.type_source}: it runs {self.accelerator_type} jobs, one at a time"
        if self.refusal:
            return f"no TPU jobs: {self.refusal}"
        if self.chips:
            return f"no TPU jobs: this process sees {self.chips} TPU chip(s) but nothing says which TPU ({TPU_TYPE_ENV}, metadata)"
        return "no TPU (no /dev/accel* or /dev/vfio TPU devices): cpu jobs only"


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


def env_chip_limit(env: Mapping[str, str]) -> tuple[int, str] | None:
    """The chips libtpu would let this process open by its environment, and which variable says so (the smaller when
    both do); None when neither does. A value libtpu could not read either is ignored."""
    found: list[tuple[int, str]] = []
    if VISIBLE_CHIPS_ENV in env:
        ids = [part for part in env[VISIBLE_CHIPS_ENV].split(",") if part.strip()]
        found.append((len(ids), f"{VISIBLE_CHIPS_ENV}={env[VISIBLE_CHIPS_ENV]}" if ids else f"{VISIBLE_CHIPS_ENV} is empty"))
    bounds = env.get(PROCESS_BOUNDS_ENV, "")
    if re.fullmatch(r"\d+(,\d+)*", bounds.replace(" ", "")):
        product = 1
        for axis in bounds.split(","):
            product *= int(axis)
        found.append((product, f"{PROCESS_BOUNDS_ENV}={bounds}"))
    return min(found) if found else None


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _visible_chips(devices: int, limit: tuple[int, str] | None) -> tuple[int, str]:
    """How many chips this process can open, and the facts behind the number."""
    found = _count(devices, "TPU device") + " under /dev"
    if limit is None:
        return devices, f"this process sees {_count(devices, 'chip')} ({found})"
    if devices == 0:
        return limit[0], f"this process may open {_count(limit[0], 'chip')} ({limit[1]}; no TPU device under /dev)"
    chips = min(devices, limit[0])
    return chips, f"this process sees {_count(chips, 'chip')} ({found}, {limit[1]})"


def _host_type(env: Mapping[str, str], read_metadata: Callable[[], str | None]) -> tuple[str, str] | None:
    """The host's slice as Google spells it, and where it came from."""
    if env.get(TPU_TYPE_ENV, "").strip():
        return env[TPU_TYPE_ENV].strip(), TPU_TYPE_ENV
    found = read_metadata()
    return (found, "the GCE metadata attribute accelerator-type") if found else None


def _rljob_name(google_type: str) -> str:
    for google, ours in GOOGLE_TYPE_PREFIXES.items():
        if google_type.startswith(google):
            return ours + google_type.removeprefix(google)
    return google_type


def _smaller_slice(host: TpuSlice, chips: int) -> TpuSlice | None:
    """The single-VM slice of the host's generation with exactly `chips` chips on its VM."""
    return next((t for t in TPU_SLICES.values() if t.generation == host.generation and t.chips_per_vm == chips and not t.multi_host), None)


def _runnable(chips: int, seen: str, google_type: str, source: str, topology: str | None) -> HostTpu:
    """What a process seeing `chips` chips on a host of `google_type` runs: the chips decide."""
    ours = _rljob_name(google_type)
    host = tpu_slice(ours)
    notes = [f"a {ours} host"] if ours != google_type else []
    if topology:
        notes.append(f"{TPU_TOPOLOGY_ENV}={topology}" + ("" if host is None or host.topology == topology else f", not its {host.topology}"))
    said = f"{source} says {google_type}" + (f" ({'; '.join(notes)})" if notes else "")
    if host is None:
        refusal = f"{said}, not a TPU slice rljob knows; if this process can run one, set {HOST_TPU_SETTING} to it ({SLICE_CHOICES})"
        return HostTpu(chips, None, f"{said}, {seen}", refusal)
    if host.multi_host:
        refusal = (
            f"{said}, a slice of {host.vms_per_slice} VMs of which this machine is one, and the local launcher runs a job "
            "as one process on one machine"
        )
        return HostTpu(chips, None, f"{said}, {seen}", refusal)
    runs = host if chips >= host.chips_per_vm else _smaller_slice(host, chips)
    if runs is None:
        same_generation = ", ".join(t.name for t in TPU_SLICES.values() if t.generation == host.generation and not t.multi_host)
        refusal = (
            f"{said}, {seen}, and no {host.generation} slice has {_count(chips, 'chip')} on one VM ({same_generation}); another "
            "process or container may hold the rest of the host's chips"
        )
        return HostTpu(chips, None, f"{said}, {seen}", refusal)
    return HostTpu(chips, runs.name, f"{said}, {seen}")


def probe_host_tpu(
    env: Mapping[str, str] = os.environ,
    dev_dir: Path = Path("/dev"),
    sys_dir: Path = Path("/sys"),
    read_metadata: Callable[[], str | None] = read_gce_accelerator_type,
    override: str | None = None,
) -> HostTpu:
    """What this process can run; `override` is RLJOB_HOST_TPU, which wins over everything the machine says."""
    probed = _probe(env, dev_dir, sys_dir, read_metadata)
    if override is None:
        return probed
    if override == CPU_ACCELERATOR:
        return HostTpu(0, None, refusal=f"{HOST_TPU_SETTING}=cpu: this service runs no TPU job (the probe alone: {probed.summary()})")
    tpu = tpu_slice(override)
    if tpu is None or tpu.multi_host:  # the settings refuse these at start; a direct caller gets the same rule
        raise ValueError(f"{HOST_TPU_SETTING} must be cpu or one of {SLICE_CHOICES}, not {override!r}")
    return HostTpu(
        tpu.chips_per_vm, override, f"{HOST_TPU_SETTING}={override}, the operator's setting (the probe alone: {probed.summary()})"
    )


def _probe(env: Mapping[str, str], dev_dir: Path, sys_dir: Path, read_metadata: Callable[[], str | None]) -> HostTpu:
    devices = count_tpu_chips(dev_dir, sys_dir)
    limit = env_chip_limit(env)
    if devices == 0 and limit is None:
        markers = [name for name in TPU_ENV_MARKERS if name in env]
        if not markers:
            return HostTpu(0, None)  # a laptop, a CPU server
        return HostTpu(
            0,
            None,
            refusal=(
                f"the environment names a TPU ({', '.join(markers)}), but this process finds no TPU device under /dev "
                f"(/dev/accel<N>, /dev/vfio/<N>) and neither {VISIBLE_CHIPS_ENV} nor {PROCESS_BOUNDS_ENV} says which "
                f"chips it may open; if it can run TPU jobs, start the service with {HOST_TPU_SETTING}=<slice> "
                f"({SLICE_CHOICES})"
            ),
        )
    chips, seen = _visible_chips(devices, limit)
    if chips == 0:
        return HostTpu(0, None, refusal=f"{seen}, so it opens no TPU chip")
    named = _host_type(env, read_metadata)
    if named is None:
        return HostTpu(chips, None, seen)
    return _runnable(chips, seen, *named, env.get(TPU_TOPOLOGY_ENV, "").strip() or None)


class HostTpuOnce:
    """The probe, run once for the launcher's life (hardware does not change) under its own lock: not the launcher's
    jobs lock, since the probe may ask the metadata server (bounded, once)."""

    def __init__(self, probe: Callable[[], HostTpu]) -> None:
        self._probe = probe
        self._host: HostTpu | None = None
        self._lock = threading.Lock()

    def get(self) -> HostTpu:
        with self._lock:
            if self._host is None:
                self._host = self._probe()
            return self._host


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
    if host.refusal:
        return f"hardware.accelerator {accelerator} cannot run here: {host.refusal}; {elsewhere}"
    if host.chips == 0:
        return (
            f"hardware.accelerator {accelerator} needs a TPU, and this machine has none (no /dev/accel* or "
            f"/dev/vfio TPU devices); the local launcher runs cpu jobs here; {elsewhere}"
        )
    if host.accelerator_type is None:
        return (
            f"this process sees {host.chips} TPU chip(s) but not which TPU ({TPU_TYPE_ENV} is unset and the GCE "
            f"metadata has no accelerator-type); if it can run {accelerator}, start the service with "
            f"{HOST_TPU_SETTING}={accelerator}"
        )
    if host.accelerator_type != accelerator:
        return (
            f"hardware.accelerator is {accelerator}, but this machine runs {host.accelerator_type} jobs "
            f"({host.type_source}); ask for {host.accelerator_type} here, or {elsewhere}"
        )
    return None
