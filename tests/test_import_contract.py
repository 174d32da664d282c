"""The layering, held by a check rather than by prose (STYLE.md, "The shape").

Read from the source with `ast`, so a rule breaks here the moment someone writes the import, whether or not
a test happens to execute that line. Imports under `if TYPE_CHECKING:` count too: a type-only import is still a
dependency a reader has to understand, and it is how cycles hide.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("service", "trainer", "harness")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(path: Path) -> Iterator[tuple[str, int]]:
    """Every module `path` imports (for `from x import y`, both x and x.y: y may be a submodule)."""
    module = _module_name(path)
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, path.name == "__init__.py", node)
            yield target, node.lineno
            for alias in node.names:
                yield f"{target}.{alias.name}", node.lineno


def source_files(*packages: str) -> list[Path]:
    return sorted(p for pkg in packages for p in (ROOT / pkg).rglob("*.py"))


def _under(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def violations(files: list[Path], forbidden: tuple[str, ...], allowed: tuple[str, ...] = ()) -> list[str]:
    found = set()
    for path in files:
        for name, line in imports_of(path):
            if _under(name, *forbidden) and not _under(name, *allowed):
                found.add(f"{path.relative_to(ROOT)}:{line} imports {name}")
    return sorted(found)


def test_the_domain_imports_no_framework_and_no_adapter():
    files = source_files("service/domain")
    assert files
    assert (
        violations(
            files,
            (
                "fastapi",
                "starlette",
                "sqlalchemy",
                "alembic",
                "kubernetes",
                "typer",
                "httpx",
                "service.adapters",
                "service.api",
                "service.cli",
                "service.app",
                "service.dashboard",
            ),
        )
        == []
    )


def test_the_service_takes_only_the_contract_sizing_and_storage_from_the_trainer():
    # sizing: the fit estimate, made at submit (service/domain/submission.py) and by the CLI before it sends a spec.
    allowed = ("trainer.contract", "trainer.sizing", "trainer.storage")
    assert violations(source_files("service"), ("trainer",), allowed=allowed) == []


def test_the_contract_imports_no_other_trainer_package():
    # The wire contract is the bottom layer: sizing reads JobSpec and the TPU slice table from it, never the
    # other way round, so the spec's validation cannot come to depend on an estimate.
    assert violations(source_files("trainer/contract"), ("trainer",), allowed=("trainer.contract",)) == []


def test_sizing_takes_only_the_contract_from_the_rest_of_the_trainer():
    assert violations(source_files("trainer/sizing"), ("trainer",), allowed=("trainer.contract", "trainer.sizing")) == []


def test_no_job_code_imports_the_offline_builders():
    # trainer/offline builds the tiny model, SmolLM2 and data sets for `make-tiny|make-model|make-data` (cli.py),
    # tests and benches; a job's stages must run on what its spec names, not on these.
    files = [p for p in source_files("trainer") if not _under(_module_name(p), "trainer.offline", "trainer.cli")]
    assert violations(files, ("trainer.offline",)) == []


def test_the_trainer_never_imports_the_service():
    assert violations(source_files("trainer"), ("service",)) == []


def test_the_shipped_packages_never_import_the_test_harness():
    # harness/, tests/ and bench/ are in no image and not in the wheel: such an import fails in production.
    assert violations(source_files("service", "trainer"), ("harness", "tests", "bench")) == []


def test_the_harness_imports_no_test():
    # The harness is what tests and benches stand on (emulators, stand-in trainers); it may use service and
    # trainer, but an import of a test module or fixture would make bench/ depend on tests/.
    assert violations(source_files("harness"), ("tests", "bench")) == []


def test_the_emulated_clusters_parts_import_only_the_parts_below_them():
    # harness/podrun/__init__.py's order: pods, then the API server's side, then the controllers, then Kueue.
    floors = ["pods", "api", "controllers", "kueue"]
    for i, part in enumerate(floors):
        above = tuple(f"harness.podrun.{p}" for p in floors[i + 1 :]) + ("harness.podrun.cluster", "harness.podrun.manifests")
        assert violations(source_files(f"harness/podrun/{part}"), above) == [], part


def test_the_contracts_parts_import_only_the_parts_below_them():
    # trainer/contract/__init__.py's order: the accelerators' facts, then the spec checked against them, then what a
    # run writes and reports about a spec. The package's root re-exports names and is imported by none of its parts.
    floors = ["accelerators", "spec", "run"]
    for i, part in enumerate(floors):
        above = tuple(f"trainer.contract.{p}" for p in floors[i + 1 :])
        files = source_files(f"trainer/contract/{part}")
        assert files, part
        assert violations(files, above) == [], part
        assert [f"{path}:{line}" for path in files for name, line in imports_of(path) if name == "trainer.contract"] == [], part


def test_the_benches_take_their_emulators_from_the_harness_not_the_tests():
    assert violations(source_files("bench"), ("tests",)) == []


# The runtime is the service's domain side: what it and the modules it wires import may not reach the HTTP
# side (service/api), which builds its serving parts over a runtime (service/api/serving.py), not the reverse.
RUNTIME_SIDE = (
    "service/runtime.py",
    "service/supervisor.py",
    "service/leadership.py",
    "service/background_loop.py",
    "service/fault_log.py",
    "service/leader_rounds.py",
    "service/change_notifier.py",
    "service/config.py",
)


def test_the_runtime_imports_nothing_from_the_api():
    files = [ROOT / f for f in RUNTIME_SIDE] + source_files("service/adapters")
    assert all(f.is_file() for f in files)
    assert violations(files, ("service.api", "service.app", "service.dashboard", "fastapi", "starlette")) == []


def test_routes_get_narrow_dependencies_not_the_runtime_or_the_serving_whole():
    # service/api/deps.py hands each route one piece of ApiServing; a route that took the runtime or all of
    # ApiServing could reach anything, and the dependency list would stop saying what it reads.
    assert violations(source_files("service/api/routes"), ("service.runtime", "service.api.serving", "service.app")) == []


# The CLI's job commands talk HTTP only; the operator side (serve, token, render, demo, doctor) may reach further.
CLI_CLIENT_SIDE = (
    "client",
    "service_address",
    "job_commands",
    "follow",
    "output",
    "samples",
    "usage",
    "goodput_text",
    "storage_text",
    "export_commands",
    "mlflow_export",
    "run_compare",
)


def test_the_cli_job_commands_import_no_adapter_settings_or_operator_code():
    files = [ROOT / "service" / "cli" / f"{name}.py" for name in CLI_CLIENT_SIDE]
    assert all(f.is_file() for f in files)
    assert (
        violations(
            files,
            (
                "service.adapters",
                "service.api",
                "service.app",
                "service.config",
                "service.dashboard",
                "sqlalchemy",
                "alembic",
                "kubernetes",
                "fastapi",
                "service.cli.operator_commands",
                "service.cli.manifests",
                "service.cli.doctor",
                "service.cli.demo",
            ),
        )
        == []
    )


def test_the_packages_the_service_imports_pull_in_no_ml_framework():
    # JAX, MaxText or torch in any of these would put them in the service image.
    files = source_files("trainer/contract", "trainer/sizing", "trainer/storage")
    assert (
        violations(
            files,
            (
                "jax",
                "jaxlib",
                "flax",
                "maxtext",
                "tunix",
                "torch",
                "transformers",
                "orbax",
                "vllm",
                "trainer.maxtext_entry",
                "trainer.rollout",
                "trainer.stages",
                "trainer.pipeline",
            ),
        )
        == []
    )


def _graph() -> dict[str, set[str]]:
    files = source_files(*PACKAGES)
    ours = {_module_name(p) for p in files}
    graph: dict[str, set[str]] = {m: set() for m in ours}
    for path in files:
        src = _module_name(path)
        for name, _ in imports_of(path):
            if name in ours and name != src and not src.startswith(name + "."):
                graph[src].add(name)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(cycles)


def test_the_cycle_finder_finds_a_cycle():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles_between_our_modules():
    # A package's __init__ re-exporting its submodules is not a cycle worth breaking; only module <-> module.
    cycles = [
        c
        for c in import_cycles(_graph())
        if not all(any(o.startswith(m + ".") for o in c) or any(m.startswith(o + ".") for o in c) for m in c)
    ]
    assert cycles == []


@pytest.mark.parametrize("rule", ["domain", "trainer"])
def test_the_checks_catch_a_forbidden_import(tmp_path, rule, monkeypatch):
    # The contract must be able to fail: plant a forbidden import in a copy of the tree layout.
    pkg = tmp_path / ("service/domain" if rule == "domain" else "trainer")
    pkg.mkdir(parents=True)
    (pkg / "bad.py").write_text("from fastapi import FastAPI\n" if rule == "domain" else "import service.app\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", tmp_path)
    forbidden = ("fastapi",) if rule == "domain" else ("service",)
    assert violations(source_files(str(pkg.relative_to(tmp_path))), forbidden)
