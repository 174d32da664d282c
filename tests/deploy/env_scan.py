"""Which environment variables the code reads, found statically (AST, nothing imported).

Two ways in: pydantic-settings classes (env_prefix + field name, upper-cased) and direct reads:
`os.environ[NAME]`, `os.environ.get(NAME)`, `os.getenv(NAME)` and typer/click `envvar=NAME`, where NAME is
a string literal or a module-level string constant. Writes (`os.environ[...] = `, `setdefault`) are not
reads. Names built at run time (a spec file's `${VAR}`) cannot be found and are not claimed.
"""

from __future__ import annotations

import ast
from pathlib import Path


def _module_strings(tree: ast.Module) -> dict[str, str]:
    out = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = stmt.value.value
    return out


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and getattr(node.value, "id", None) == "os"


def settings_env_names(package_dir: Path) -> dict[str, str]:
    """RLJOB_* names of every pydantic-settings field under package_dir -> where it is declared."""
    names: dict[str, str] = {}
    for py in sorted(package_dir.rglob("*.py")):
        tree = ast.parse(py.read_text())
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            if not any(getattr(b, "id", getattr(b, "attr", None)) == "BaseSettings" for b in cls.bases):
                continue
            prefix = ""
            for stmt in cls.body:
                if isinstance(stmt, ast.Assign) and getattr(stmt.targets[0], "id", None) == "model_config":
                    for kw in getattr(stmt.value, "keywords", []):
                        if kw.arg == "env_prefix" and isinstance(kw.value, ast.Constant):
                            prefix = kw.value.value
            for stmt in cls.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    names[(prefix + stmt.target.id).upper()] = f"{py}:{stmt.lineno}"
    return names


def direct_env_reads(package_dir: Path) -> dict[str, str]:
    """Names read through os.environ/os.getenv/envvar= under package_dir -> where (first read)."""
    reads: dict[str, str] = {}
    for py in sorted(package_dir.rglob("*.py")):
        tree = ast.parse(py.read_text())
        consts = _module_strings(tree)

        def name_of(node: ast.AST | None, consts: dict[str, str] = consts) -> str | None:
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                return node.value
            if isinstance(node, ast.Name):
                return consts.get(node.id)
            return None

        for node in ast.walk(tree):
            found = None
            if isinstance(node, ast.Subscript) and _is_environ(node.value) and isinstance(node.ctx, ast.Load):
                found = name_of(node.slice)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr == "get" and _is_environ(node.func.value) and node.args:
                    found = name_of(node.args[0])
                elif node.func.attr == "getenv" and getattr(node.func.value, "id", None) == "os" and node.args:
                    found = name_of(node.args[0])
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    if kw.arg == "envvar":
                        found = name_of(kw.value) or found
            if found:
                reads.setdefault(found, f"{py}:{getattr(node, 'lineno', '?')}")
    return reads
