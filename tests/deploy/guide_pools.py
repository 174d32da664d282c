"""docs/deploy-gke.md's TPU and eval node-pool commands, read as a shell would: used by tests/deploy/test_deploy_docs.py (each
pool against what its pods select) and tests/k8s/test_reservation_pool_from_guide.py (an emulated node built from the
reservation pool's command). Every function takes the guide's text, so a test can hand it a drifted copy."""

from __future__ import annotations

import re

from tests.deploy.deploy_support import ROOT

GUIDE = ROOT / "docs" / "deploy-gke.md"


def commands(doc: str, prefix: str) -> list[str]:
    """Every command of the guide's bash blocks that starts with `prefix`, continuation lines joined."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", doc, re.S):
        for cmd in block.replace("\\\n", " ").splitlines():
            if cmd.strip().startswith(prefix):
                out.append(" ".join(cmd.split()))
    return out


def flags(cmd: str) -> dict[str, str]:
    return {m[0]: m[1] for m in re.findall(r"(--[\w-]+)(?:=(\"[^\"]*\"|\S+))?", cmd)}


def doc_var(doc: str, name: str) -> str:
    """The value the guide assigns to a shell variable (`NAME=value` alone on a line of a bash block)."""
    (value,) = re.findall(rf"^{name}=(\S+)$", doc, re.M)
    return value


def expand(doc: str, value: str) -> str:
    """`value` with the guide's variables ($NAME, ${NAME}, "$NAME") replaced by what the guide sets them to."""
    return re.sub(r'"?\$\{?(\w+)\}?"?', lambda m: doc_var(doc, m[1]), value)


def node_labels(doc: str, pool_flags: dict[str, str]) -> dict[str, str]:
    """The Kubernetes labels a pool command's --node-labels puts on each of its nodes, variables expanded."""
    raw = expand(doc, pool_flags.get("--node-labels", ""))
    return dict(kv.split("=", 1) for kv in raw.split(",") if kv)


def pool_name(cmd: str) -> str:
    """The pool's name: the first word after `gcloud container node-pools create`."""
    return cmd.split("gcloud container node-pools create", 1)[1].split()[0]


def tpu_machine_types(doc: str) -> set[str]:
    """The machine types of the guide's TPU node-pool commands (TPU: a ct* machine type)."""
    found = {flags(cmd).get("--machine-type", "") for cmd in commands(doc, "gcloud container node-pools create")}
    return {m for m in found if m.startswith("ct")}


def tpu_pools(doc: str, machine_type: str = "ct6e-standard-8t") -> dict[str, tuple[str, dict[str, str]]]:
    """capacity -> (command, flags) of the guide's node-pool command for it of `machine_type` (by default the
    tutorial's v6e-8 VM, the one shape the guide gives every kind of capacity)."""
    from service.adapters.k8s.capacity import CAPACITY_LABEL

    pools: dict[str, tuple[str, dict[str, str]]] = {}
    for cmd in commands(doc, "gcloud container node-pools create"):
        pool_flags = flags(cmd)
        if pool_flags.get("--machine-type") != machine_type:
            continue
        labels = node_labels(doc, pool_flags)
        assert CAPACITY_LABEL in labels, f"a TPU pool without --node-labels={CAPACITY_LABEL}=...: {cmd}"
        capacity = labels[CAPACITY_LABEL]
        assert capacity not in pools, f"two {machine_type} pool commands for {capacity}"
        pools[capacity] = (cmd, pool_flags)
    return pools


def node_taints(pool_flags: dict[str, str]) -> list[dict[str, str]]:
    """The taints a pool command's --node-taints (KEY=VALUE:EFFECT,...) puts on each of its nodes."""
    out = []
    for taint in filter(None, pool_flags.get("--node-taints", "").split(",")):
        key_value, effect = taint.rsplit(":", 1)
        key, value = key_value.split("=", 1)
        out.append({"key": key, "value": value, "effect": effect})
    return out


def eval_pool(doc: str) -> tuple[str, dict[str, str]]:
    """The (command, flags) of the guide's one pool for eval jobs: the pool labelled rljob.dev/capacity=cpu-eval."""
    from service.adapters.k8s.capacity import CAPACITY_LABEL, EVAL_POOL

    found = [
        (cmd, pool_flags)
        for cmd in commands(doc, "gcloud container node-pools create")
        if node_labels(doc, pool_flags := flags(cmd)).get(CAPACITY_LABEL) == EVAL_POOL
    ]
    assert len(found) == 1, f"the guide has {len(found)} pool commands labelled {CAPACITY_LABEL}={EVAL_POOL}, not one"
    return found[0]
