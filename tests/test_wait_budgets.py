"""No test waits longer than pytest-timeout lets it: a wait that outlives its test's timeout ends in
pytest-timeout's stack dump instead of the wait's own message (what was awaited, the job's logs).

Read from the source: in each test module, every test function and fixture adds up the waits written
as literals in its body (`timeout=` of subprocess run/communicate/wait/check_output, and any
`timeout_s=`, including `float(os.environ.get(..., "1500"))` defaults) plus those of the module's
own helpers it calls, one level deep, once per call; the sum must stay below the test's
`pytest.mark.timeout` (function, then module `pytestmark`, then pyproject's default).
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TIMEOUT_S = float(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["timeout"])
SECONDS_KEYWORD_CALLS = {"run", "communicate", "wait", "check_output", "check_call", "call"}  # subprocess's, in seconds


def _number(node: ast.expr) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return float(node.value)
    # float(os.environ.get("X", "1500")): the default is the wait unless someone sets X
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"float", "int"} and node.args:
        inner = node.args[0]
        if isinstance(inner, ast.Call) and len(inner.args) == 2 and isinstance(inner.args[1], ast.Constant):
            try:
                return float(inner.args[1].value)
            except (TypeError, ValueError):
                return None
        return _number(inner)
    return None


def _call_name(call: ast.Call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else call.func.id if isinstance(call.func, ast.Name) else ""


def _own_waits(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> float:
    total = 0.0
    for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
        for keyword in call.keywords:
            seconds = None
            if keyword.arg == "timeout_s" or (keyword.arg == "timeout" and _call_name(call) in SECONDS_KEYWORD_CALLS):
                seconds = _number(keyword.value)
            total += seconds or 0.0
    return total


def _timeout_mark(decorators: list[ast.expr]) -> float | None:
    for node in decorators:
        for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
            if isinstance(call.func, ast.Attribute) and call.func.attr == "timeout" and call.args:
                return _number(call.args[0])
    return None


def _module_timeout(tree: ast.Module) -> float:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            marked = _timeout_mark([node.value])
            if marked is not None:
                return marked
    return DEFAULT_TIMEOUT_S


def _is_fixture(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any("fixture" in ast.unparse(d) for d in fn.decorator_list)


def over_budget(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    own = {name: _own_waits(fn) for name, fn in functions.items()}
    module_timeout = _module_timeout(tree)
    found = []
    for name, fn in functions.items():
        if not (name.startswith("test") or _is_fixture(fn)):
            continue
        calls = [_call_name(c) for c in ast.walk(fn) if isinstance(c, ast.Call)]
        waits = own[name] + sum(own[c] for c in calls if c in own and c != name)
        limit = _timeout_mark(fn.decorator_list) or module_timeout
        if waits >= limit:
            where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            found.append(f"{where}::{name} waits up to {waits:.0f} s under a {limit:.0f} s pytest timeout")
    return found


def test_every_test_waits_less_than_its_timeout() -> None:
    found = [line for path in sorted((ROOT / "tests").rglob("test_*.py")) for line in over_budget(path)]
    assert not found, "raise the test's pytest.mark.timeout or shorten its waits:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "over"),
    [
        ("def test_a():\n    wait_for_phase(p, X, timeout_s=float(os.environ.get('T', '1500')))\n", True),
        ("import pytest\n@pytest.mark.timeout(1800)\ndef test_a():\n    wait_until(p, timeout_s=1500)\n", False),
        ("def _run():\n    subprocess.run(['x'], timeout=600)\ndef test_a():\n    _run()\n    _run()\n", True),
        (
            "pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]\ndef test_a():\n    _run()\n"
            "def _run():\n    subprocess.run(['x'], timeout=600)\n    p.wait(timeout=600)\n",
            False,
        ),
        ("def test_a():\n    expect(badge).to_have_text('X', timeout=20_000)\n", False),  # Playwright's are milliseconds
    ],
)
def test_the_budget_check_reads_waits_and_marks(tmp_path: Path, source: str, over: bool) -> None:
    planted = tmp_path / "test_planted.py"
    planted.write_text(source)
    assert bool(over_budget(planted)) is over
