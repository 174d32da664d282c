"""The spec's `hardware` section: the accelerator, its capacity and the rollout's layout, checked against the TPU table."""

from __future__ import annotations

import typing
from typing import Annotated, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from trainer.contract.accelerators.tpu import (
    ACCELERATOR_NAMES,
    CPU_ACCELERATOR,
    MAX_CHIPS_PER_VM,
    rollout_devices,
    rollout_share_problem,
    rollout_split_problem,
    tpu_slice,
)
from trainer.contract.spec import rl_settings as rl
from trainer.contract.spec.base import MAX_ROLLOUT_PARALLELISM, _Strict
from trainer.contract.spec.dns_label import DnsLabel

CapacityKind = Literal["on-demand", "spot", "flex-start", "reservation"]
CAPACITY_KINDS: tuple[CapacityKind, ...] = typing.get_args(CapacityKind)


def capacity_text(capacities: tuple[str, ...]) -> str:
    """A capacity set as people read it: `spot`, or `[spot, on-demand]`."""
    return capacities[0] if len(capacities) == 1 else f"[{', '.join(capacities)}]"


class HardwareSpec(_Strict):
    """Checked against the TPU table (tpu.py) whatever launches the job; whether this host has the
    accelerator is the local launcher's question, asked at submit."""

    hashed_always: ClassVar[frozenset[str]] = frozenset(
        {
            "accelerator",
            "chips_per_vm",
            "capacity",
            "reservation",
            "rollout_engine",
            "rollout_data_parallelism",
            "rollout_tensor_parallelism",
        }
    )  # spec_hash.py

    accelerator: str = Field(
        default="v6e-8",
        description="a TPU slice such as v6e-8, or cpu",
        json_schema_extra={"enum": list(ACCELERATOR_NAMES)},
    )
    # validate_default: a default must fit the accelerator too (v6e-16 with the default 8 chips per VM).
    chips_per_vm: int = Field(
        default=8,
        ge=1,
        le=MAX_CHIPS_PER_VM,
        validate_default=True,
        description="TPU chips on each VM: the slice's own (v6e-8: 8, v6e-16: 4)",
    )
    capacity: CapacityKind | Annotated[list[CapacityKind], Field(max_length=len(CAPACITY_KINDS))] = Field(
        default="on-demand",
        description="how the TPU VMs are obtained on GKE: on-demand, spot (preemptible, 30 s notice), "
        "flex-start (Dynamic Workload Scheduler, at most 7 days) or a reservation (name it in `reservation`); "
        "or an ordered list of them (e.g. [spot, on-demand]): the job may run on any of them, and which one "
        "is the pool's choice (Kueue tries its ClusterQueue's flavors in order)",
    )
    reservation: DnsLabel | None = Field(default=None, description="with capacity: reservation, the reservation's name")
    rollout_engine: Literal["vllm", "jax"] = Field(
        default="vllm", description="vllm (TPU; train_rl as shipped) or jax (CPU: Tunix's sampler over MaxText's weights)"
    )
    rollout_data_parallelism: int = Field(
        default=1,
        ge=-1,
        le=MAX_ROLLOUT_PARALLELISM,
        validate_default=True,
        description="rollout replicas; -1 lets MaxText derive it",
    )
    rollout_tensor_parallelism: int = Field(
        default=-1,
        ge=-1,
        le=MAX_ROLLOUT_PARALLELISM,
        validate_default=True,
        description="chips per rollout replica; -1 lets MaxText derive it",
    )
    # Issue 67 §1 (trainer/sizing/layer_activations.py); at its default, out of the spec's hash.
    layer_activations: Literal["auto", "hbm", "offload"] = Field(
        default="auto",
        description="where the update keeps each layer's input and q/k/v for the backward pass on TPU: hbm (faster; "
        "counted by the fit estimate), offload (to host memory, as MaxText's rl.yml does) or auto (hbm where the "
        "estimate says it fits with room, else offload)",
    )
    # An rl.yml setting of issue 39 (rl_settings.py); at its default, out of the spec's hash.
    reshard_chunk_size: int | None = Field(default=None, ge=1, le=rl.MAX_RESHARD_CHUNK_SIZE, description=rl.RESHARD_DESCRIPTION)

    @field_validator("accelerator")
    @classmethod
    def _accel(cls, v: str) -> str:
        if v not in ACCELERATOR_NAMES:
            raise ValueError(f"{v[:40]!r} is not an accelerator rljob knows; use one of {', '.join(ACCELERATOR_NAMES)}")
        return v

    @field_validator("chips_per_vm")
    @classmethod
    def _chips(cls, v: int, info: ValidationInfo) -> int:
        tpu = tpu_slice(info.data.get("accelerator", CPU_ACCELERATOR))
        if tpu is not None and v != tpu.chips_per_vm:
            raise ValueError(f"{tpu.name}'s VMs have {tpu.chips_per_vm} chips each, not {v}; set chips_per_vm: {tpu.chips_per_vm}")
        return v

    @field_validator("rollout_data_parallelism", "rollout_tensor_parallelism")
    @classmethod
    def _parallel(cls, v: int, info: ValidationInfo) -> int:
        if v == 0:
            raise ValueError("must be a positive count or -1 (auto)")
        if "accelerator" not in info.data:
            return v  # the accelerator is already reported
        devices = rollout_devices(info.data["accelerator"])
        problem = rollout_share_problem(v, devices)
        data = info.data.get("rollout_data_parallelism")  # validated first; absent when already reported
        if problem is None and info.field_name == "rollout_tensor_parallelism" and data is not None:
            problem = rollout_split_problem(data, v, devices)
        if problem:
            raise ValueError(f"{problem} ({info.data['accelerator']})")
        return v

    @field_validator("reshard_chunk_size")
    @classmethod
    def _reshard(cls, v: int | None, info: ValidationInfo) -> int | None:
        if v is not None and info.data.get("rollout_engine") == "jax":
            raise ValueError("applies to the vllm rollout's weight sync; the jax rollout syncs in one piece: leave it null")
        return v

    @model_validator(mode="after")
    def _engine_fits(self) -> HardwareSpec:
        if self.accelerator == CPU_ACCELERATOR and self.rollout_engine == "vllm":
            raise ValueError("the vllm rollout engine needs a TPU; use rollout_engine: jax on cpu")
        return self

    @field_validator("capacity")
    @classmethod
    def _capacity_set(cls, v: str | list[str]) -> str | list[str]:
        if isinstance(v, str):
            return v
        if not v:
            raise ValueError("an empty list offers no capacity: name one kind, or several in order")
        repeated = sorted({c for c in v if v.count(c) > 1})
        if repeated:
            raise ValueError(f"{', '.join(repeated)} listed more than once: name each kind once")
        # One kind in a list means the same as the kind alone: stored alone, so the spec's hash does not depend on it.
        return v[0] if len(v) == 1 else v

    @property
    def capacities(self) -> tuple[CapacityKind, ...]:
        """The kinds of capacity the job may run on, in the order given (one, for a single value)."""
        return (self.capacity,) if isinstance(self.capacity, str) else tuple(self.capacity)

    @model_validator(mode="after")
    def _reservation_named(self) -> HardwareSpec:
        if "reservation" in self.capacities and self.reservation is None:
            raise ValueError("capacity: reservation needs the reservation's name in hardware.reservation")
        if "reservation" not in self.capacities and self.reservation is not None:
            raise ValueError(f"hardware.reservation is only read with capacity: reservation, not {capacity_text(self.capacities)}")
        return self
