"""docs/architecture.md's thread table against the code: every thread, loop, task and worker pool the service and
the trainer start is a row, every name in the table is started somewhere, and the class the row names is the one
that starts it. Read from the source (AST), so a thread added, renamed or moved without the page fails here."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "architecture.md"
ROOTS = ("service", "trainer")


@dataclass(frozen=True)
class Started:
    name: str  # the thread's or task's name as a regex; an f-string's fields match anything ("rljob-k8s-watch-.+")
    owner: str  # the class that starts it, or the module's path for module-level code
    where: str


def _name_pattern(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.escape(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(re.escape(v.value) if isinstance(v, ast.Constant) else ".+" for v in node.values)
    return None


def _call_name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _started_in(path: Path) -> list[Started]:
    tree = ast.parse(path.read_text(), str(path))
    rel = str(path.relative_to(REPO))
    found: list[Started] = []

    def visit(node: ast.AST, owner: str) -> None:
        if isinstance(node, ast.ClassDef):
            owner = node.name
        if isinstance(node, ast.Call):
            kind = _call_name(node)
            keywords = {k.arg: k.value for k in node.keywords}
            where = f"{rel}:{node.lineno}"
            # A leader round (service/leader_rounds.py) names its thread where it is made; RoundLoops starts it.
            if kind in ("BackgroundLoop", "RoundOf") and rel not in ("service/background_loop.py", "service/leader_rounds.py"):
                pattern = _name_pattern(node.args[0]) if node.args else None
                assert pattern, f"{where}: a BackgroundLoop whose name is not a literal cannot be checked against the page"
                found.append(Started(pattern, owner, where))
            elif kind == "Thread" and rel != "service/background_loop.py":
                pattern = _name_pattern(keywords["name"]) if "name" in keywords else None
                assert pattern, f"{where}: every thread gets a literal name= (the table and py-spy dumps show it)"
                found.append(Started(pattern, owner, where))
            elif kind == "create_task" and "name" in keywords:  # unnamed tasks are per-request, not background
                pattern = _name_pattern(keywords["name"])
                assert pattern, f"{where}: a background task's name must be a literal"
                found.append(Started(pattern, owner, where))
            elif kind == "ProcessPoolExecutor":
                found.append(Started("", owner, where))  # a worker process: its row names the owning class
        for child in ast.iter_child_nodes(node):
            visit(child, owner)

    visit(tree, rel)
    return found


def _started() -> list[Started]:
    return [s for root in ROOTS for path in sorted((REPO / root).rglob("*.py")) for s in _started_in(path)]


def _table() -> list[tuple[str, list[str]]]:
    """(the row's class column, the backticked names in its thread column) for each row of the thread table."""
    text = PAGE.read_text()
    section = text.split("## Threads and background tasks", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("what", "---") or set(cells[0]) <= {"-"}:
            continue
        rows.append((cells[1], re.findall(r"`([A-Za-z0-9_.{}-]+)`", cells[2])))
    assert rows, "the thread table was not found under '## Threads and background tasks'"
    return rows


def test_every_thread_task_and_worker_pool_in_the_code_is_a_row_that_names_its_owner():
    rows = _table()
    problems = []
    for started in _started():
        if not started.name:
            if not any(started.owner in owner for owner, _ in rows):
                problems.append(f"{started.where}: {started.owner} starts worker processes; no row names it")
            continue
        matching = [(owner, n) for owner, names in rows for n in names if re.fullmatch(started.name, n)]
        shown = started.name.replace("\\", "").replace(".+", "{...}")
        if not matching:
            problems.append(f"{started.where}: `{shown}` is started here but is not in the table")
        elif not any(started.owner in owner for owner, _ in matching):
            problems.append(f"{started.where}: `{shown}` is started by {started.owner}, but its row names {matching[0][0]}")
    assert not problems, "docs/architecture.md's thread table disagrees with the code:\n" + "\n".join(problems)


def test_every_name_in_the_table_is_started_somewhere():
    patterns = [s.name for s in _started() if s.name]
    stale = [n for _, names in _table() for n in names if "-" in n and not any(re.fullmatch(p, n) for p in patterns)]
    assert not stale, f"the thread table names threads or tasks no code starts: {stale}"
