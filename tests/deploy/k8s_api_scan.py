"""Derive the RBAC rules a package needs from its kubernetes-client calls (static, AST-based).

Each `kubernetes.client` API method is mapped to its HTTP method and path by reading the client's own
generated `_<method>_serialize` functions (e.g. list_namespaced_job -> GET /apis/batch/v1/namespaces/
{namespace}/jobs), and the path to an RBAC (apiGroup, resource, verb): GET on a collection = list,
GET on an item = get, POST = create, PUT = update, PATCH = patch, DELETE = delete or deletecollection.
CustomObjectsApi calls take group and plural from their arguments, resolved from string literals or
module/class-level constants (also through `**SOME_DICT`). `watch` is added for a list method that is
passed to `Watch().stream(...)` or called with `watch=True`; when `stream` receives a variable (a helper
that watches whatever list function it is given), every list method referenced without being called
counts as watched.

A raw `ApiClient.call_api` (for an aggregated API no typed class covers, such as Kueue's visibility API)
counts when the same function builds its request with `param_serialize(method=..., resource_path=...)`
from string literals or constants: the rule is derived from that path as for a generated method.

What it cannot see (reported as problems so the test fails instead of guessing): custom-object group or
plural it cannot resolve, cluster-wide calls (`*_for_all_namespaces`, cluster-scoped kinds: a Role cannot
grant them), the dynamic client and a `call_api` whose request it cannot resolve.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

VERB_BY_HTTP = {"POST": "create", "PUT": "update", "PATCH": "patch"}
_CUSTOM_ARG_ORDER = ("group", "version", "namespace", "plural", "name")


@dataclass(frozen=True)
class ApiMethod:
    api_class: str
    name: str
    http_method: str
    path: str


@dataclass
class ScanResult:
    grants: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    evidence: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def rules(self) -> set[tuple[str, str, str]]:
        return {(g, r, v) for (g, r), verbs in self.grants.items() for v in verbs}


@cache
def client_method_table() -> dict[str, tuple[ApiMethod, ...]]:
    """method name -> every (API class, HTTP method, path) that defines it, from the installed client."""
    import importlib.util

    # Located, not imported: importing kubernetes.client costs a second and is not needed to read it.
    spec = importlib.util.find_spec("kubernetes")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the kubernetes client is not installed")
    api_dir = Path(next(iter(spec.submodule_search_locations))) / "client" / "api"
    table: dict[str, list[ApiMethod]] = defaultdict(list)
    for py in sorted(api_dir.glob("*_api.py")):
        text = py.read_text()
        cls = re.search(r"^class (\w+)\b", text, re.M)
        if not cls:
            continue
        for m in re.finditer(r"def _(\w+)_serialize\(", text):
            body = text[m.end() : m.end() + 20000]
            nxt = body.find("\n    def ")
            body = body if nxt < 0 else body[:nxt]
            hm = re.search(r"method='(\w+)',\s*resource_path='([^']+)'", body)
            if hm:
                table[m.group(1)].append(ApiMethod(cls.group(1), m.group(1), hm.group(1), hm.group(2)))
    return {k: tuple(v) for k, v in table.items()}


def rbac_of(method: ApiMethod) -> tuple[str | None, str | None, str, bool]:
    """(group, resource, verb, namespaced) for a method's path; group/resource None for custom objects."""
    parts = method.path.strip("/").split("/")
    if parts[0] == "api":  # /api/v1/...
        group, rest = "", parts[2:]
    else:  # /apis/{group}/{version}/...
        group, rest = parts[1], parts[3:]
    if group == "{group}":
        group = None
    namespaced = len(rest) >= 2 and rest[0] == "namespaces" and rest[1] == "{namespace}"
    if namespaced:
        rest = rest[2:]
    resource = rest[0] if rest else "namespaces"
    if resource == "{plural}":
        resource = None
    has_name = len(rest) >= 2
    sub = rest[2] if len(rest) >= 3 else None
    if sub is not None and resource is not None:
        resource = f"{resource}/{sub}"
    if method.http_method == "GET":
        verb = "get" if has_name else "list"
    elif method.http_method == "DELETE":
        verb = "delete" if has_name else "deletecollection"
    else:
        verb = VERB_BY_HTTP.get(method.http_method, method.http_method.lower())
    return group, resource, verb, namespaced


def _custom_subresource(method_name: str) -> str | None:
    for sub in ("status", "scale"):
        if method_name.endswith("_custom_object_" + sub):
            return sub
    return None


class _Constants:
    """String and dict constants assigned at module or class level anywhere in the package."""

    def __init__(self, trees: dict[Path, ast.Module]):
        self.strings: dict[str, set[str]] = defaultdict(set)
        self.dicts: dict[str, list[ast.Dict | ast.Call]] = defaultdict(list)
        for tree in trees.values():
            bodies = [tree.body] + [n.body for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
            for body in bodies:
                for stmt in body:
                    targets, value = [], None
                    if isinstance(stmt, ast.Assign):
                        targets, value = stmt.targets, stmt.value
                    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                        targets, value = [stmt.target], stmt.value
                    for t in targets:
                        if isinstance(t, ast.Tuple) and isinstance(value, ast.Tuple):  # A, B = "a", "b"
                            for name_node, item in zip(t.elts, value.elts, strict=False):
                                if isinstance(name_node, ast.Name) and isinstance(item, ast.Constant) and isinstance(item.value, str):
                                    self.strings[name_node.id].add(item.value)
                        if isinstance(t, ast.Name):
                            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                                self.strings[t.id].add(value.value)
                            elif isinstance(value, ast.Dict) or (
                                isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "dict"
                            ):
                                self.dicts[t.id].append(value)

    def resolve(self, node: ast.AST | None) -> str | None:
        if node is None:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        values = self.strings.get(name or "", set())
        return next(iter(values)) if len(values) == 1 else None

    def dict_entries(self, node: ast.AST) -> dict[str, ast.AST]:
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        out: dict[str, ast.AST] = {}
        for d in self.dicts.get(name or "", []):
            if isinstance(d, ast.Dict):
                for k, v in zip(d.keys, d.values, strict=True):
                    if isinstance(k, ast.Constant) and isinstance(k.value, str):
                        out[k.value] = v
            else:
                out.update({kw.arg: kw.value for kw in d.keywords if kw.arg})
        return out


def _call_args(call: ast.Call, skip: int, consts: _Constants) -> dict[str, ast.AST]:
    """Custom-object arguments of a call: keywords, `**dict` constants, positionals after `skip`."""
    args: dict[str, ast.AST] = {}
    for i, a in enumerate(call.args[skip:]):
        if i < len(_CUSTOM_ARG_ORDER):
            args[_CUSTOM_ARG_ORDER[i]] = a
    for kw in call.keywords:
        if kw.arg:
            args[kw.arg] = kw.value
        else:
            args.update({k: v for k, v in consts.dict_entries(kw.value).items() if k not in args})
    return args


def _positional_group_plural(func: ast.AST, consts: _Constants) -> tuple[str | None, str | None]:
    """Fallback for a custom-object method whose arguments travel separately from it (`fn = api.m;
    args = (GROUP, VERSION, ns, PLURAL)`, or a tuple handed on beside it): the first tuple or call in
    the same function holding a resolvable (group, version, namespace, plural) run."""
    for node in ast.walk(func):
        seq = node.elts if isinstance(node, ast.Tuple) else node.args if isinstance(node, ast.Call) else None
        if not seq:
            continue
        for i in range(len(seq) - 3):
            group, plural = consts.resolve(seq[i]), consts.resolve(seq[i + 3])
            if group and "." in group and plural and re.fullmatch(r"[a-z0-9]+", plural):
                return group, plural
    return None, None


def _raw_request(func: ast.AST | None, consts: _Constants) -> ApiMethod | None:
    """The (HTTP method, path) of the `param_serialize(...)` call in `func`, when both resolve."""
    for node in ast.walk(func) if func is not None else ():
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "param_serialize":
            kwargs = {kw.arg: kw.value for kw in node.keywords if kw.arg}
            method, path = consts.resolve(kwargs.get("method")), consts.resolve(kwargs.get("resource_path"))
            if method and path and path.startswith("/api"):
                return ApiMethod("ApiClient", "call_api", method, path)
    return None


def scan_package(package_dir: Path) -> ScanResult:
    trees = {p: ast.parse(p.read_text(), filename=str(p)) for p in sorted(package_dir.rglob("*.py"))}
    return scan_trees(trees, root=package_dir)


def scan_source(source: str, name: str = "<sample>") -> ScanResult:
    return scan_trees({Path(name): ast.parse(source)}, root=None)


def scan_trees(trees: dict[Path, ast.Module], root: Path | None) -> ScanResult:
    table = client_method_table()
    consts = _Constants(trees)
    result = ScanResult()
    all_source = "\n".join(ast.unparse(t) for t in trees.values())
    referenced_classes = set(re.findall(r"\b(\w+Api)\b", all_source))

    # (method name, where, call carrying its arguments or None, positionals to skip, called?, watched?,
    #  enclosing function, name of the callee it is handed to)
    uses: list[tuple[str, str, ast.Call | None, int, bool, bool, ast.AST | None, str | None]] = []
    # Names of the classes/functions that call Watch().stream(<a variable>, ...): a list method handed
    # to one of them (ResourceWatch("jobs", api.list_namespaced_job, ...)) is watched.
    stream_owners: set[str] = set()
    raw_calls: list[tuple[str, ApiMethod]] = []
    for path, tree in trees.items():
        rel = str(path.relative_to(root)) if root else str(path)
        parents: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                parents[child] = node

        def enclosing(node: ast.AST, kinds: tuple[type, ...], parents: dict[ast.AST, ast.AST] = parents) -> ast.AST | None:
            node = parents.get(node)
            while node is not None and not isinstance(node, kinds):
                node = parents.get(node)
            return node

        for node in ast.walk(tree):
            where = f"{rel}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Attribute) and node.attr == "call_api":
                raw = _raw_request(enclosing(node, (ast.FunctionDef, ast.AsyncFunctionDef)), consts)
                if raw is None:
                    result.problems.append(
                        f"{where}: call_api without a resolvable param_serialize(method=, "
                        "resource_path=) in the same function; the scan cannot derive verbs"
                    )
                else:
                    raw_calls.append((where, raw))
            if isinstance(node, ast.Attribute) and node.attr == "DynamicClient":
                result.problems.append(f"{where}: {node.attr} bypasses the typed client; the scan cannot derive verbs")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "stream":
                first = node.args[0] if node.args else None
                if not (isinstance(first, ast.Attribute) and first.attr in table):
                    for owner in (enclosing(node, (ast.ClassDef,)), enclosing(node, (ast.FunctionDef,))):
                        if owner is not None:
                            stream_owners.add(owner.name)
            name = None
            if isinstance(node, ast.Attribute) and node.attr in table:
                name = node.attr
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in table:
                name = node.value  # getattr(api, "list_namespaced_job") style wrappers
            if name is None:
                continue
            parent = parents.get(node)
            called = isinstance(parent, ast.Call) and parent.func is node
            if called:
                carrier, skip = parent, 0
            elif isinstance(parent, ast.Call) and node in parent.args:
                carrier, skip = parent, parent.args.index(node) + 1  # f(api.method, group, ...) wrappers
            else:
                carrier, skip = None, 0
            watched = False
            if called and any(
                kw.arg == "watch" and isinstance(kw.value, ast.Constant) and kw.value.value is True for kw in parent.keywords
            ):
                watched = True
            if (
                not called
                and isinstance(parent, ast.Call)
                and isinstance(parent.func, ast.Attribute)
                and parent.func.attr == "stream"
                and parent.args
                and parent.args[0] is node
            ):
                watched = True
            callee = None
            if not called and isinstance(parent, ast.Call):
                f = parent.func
                callee = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            func = enclosing(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            uses.append((name, where, carrier, skip, called, watched, func, callee))

    for where, method in raw_calls:
        group, resource, verb, namespaced = rbac_of(method)
        if not namespaced or group is None or resource is None:
            result.problems.append(f"{where}: call_api to {method.path}: not a namespaced resource a Role can grant")
            continue
        result.grants[(group, resource)].add(verb)
        result.evidence.append(f"{where}: call_api {method.http_method} {method.path} -> {group or 'core'}/{resource} {verb}")
    for name, where, carrier, skip, _called, watched, func, callee in uses:
        candidates = table[name]
        if len(candidates) > 1:
            chosen = [c for c in candidates if c.api_class in referenced_classes]
            if len(chosen) != 1:
                result.problems.append(
                    f"{where}: {name} exists on {', '.join(c.api_class for c in candidates)}; "
                    "name the API class in the package so the scan can tell which API group it uses"
                )
                continue
            candidates = tuple(chosen)
        method = candidates[0]
        group, resource, verb, namespaced = rbac_of(method)
        if not namespaced:
            result.problems.append(f"{where}: {name} is cluster-scoped ({method.path}); a namespaced Role cannot grant it")
            continue
        if method.api_class == "CustomObjectsApi":
            args = _call_args(carrier, skip, consts) if carrier is not None else {}
            group = consts.resolve(args.get("group"))
            plural = consts.resolve(args.get("plural"))
            if (group is None or plural is None) and func is not None:
                group, plural = _positional_group_plural(func, consts)
            if group is None or plural is None:
                result.problems.append(f"{where}: {name}: cannot resolve group/plural; pass string constants")
                continue
            sub = _custom_subresource(name)
            resource = plural if sub is None else f"{plural}/{sub}"
        result.grants[(group, resource)].add(verb)
        result.evidence.append(f"{where}: {name} -> {group or 'core'}/{resource} {verb}")
        if verb == "list" and (watched or (callee is not None and callee in stream_owners)):
            result.grants[(group, resource)].add("watch")
            result.evidence.append(f"{where}: {name} streamed by a Watch -> {group or 'core'}/{resource} watch")
    return result


def role_rules(role: dict) -> set[tuple[str, str, str]]:
    out = set()
    for rule in role.get("rules", []):
        for g in rule.get("apiGroups", []):
            for r in rule.get("resources", []):
                for v in rule.get("verbs", []):
                    out.add((g, r, v))
    return out
