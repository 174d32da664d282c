"""Reads the trace hook's records: the modules each process loaded, mapped to the distributions that hold them.

A module maps through importlib.metadata.packages_distributions() (top-level name -> distributions); where several
distributions share a top-level name (google, jaraco, ...), through the files each lists. What maps to none is the
standard library, this checkout (trainer, service, ...), or a module made at run time (a reward file loaded by path).

The torch rule: torch and what only torch brings are left out. A distribution is kept when a process of the run
without torch loaded it, or when it is not torch's (its requirements' closure), or when something that is not
torch's asked for one of its modules (transformers for jinja2, say): the processes that need torch (a cpu job's
export check and evaluation sampler, make-tiny) fail early without torch, so what they load after torch is read from
the run with torch.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .host_requirements import canonical

# The trainer's stage modules, by the stage that runs them (trainer/stages/).
STAGE_MODULES = {
    "trainer.maxtext_entry.to_maxtext_entry": "convert",
    "trainer.maxtext_entry.train_rl_jax_entry": "train",
    "trainer.maxtext_entry.train_rl_entry": "train",
    "trainer.maxtext_entry.to_huggingface_entry": "export",
    "trainer.checks.verify_export": "export check",
}
SCRIPTS = {"worker.py": "reward worker"}
CLI_MODULES = {"trainer": "trainer", "service.cli.main": "rljob"}
TORCH = "torch"
# Interpreter options that take a value (python -X dev -W error -m ...).
OPTIONS_WITH_VALUE = {"-X", "-W", "--check-hash-based-pycs"}


@dataclass
class Process:
    label: str
    modules: dict[str, str] = field(default_factory=dict)  # module name -> the module that asked for it


def label(argv: list[str], step: str) -> str:
    """What a process was, by its command line: a stage, the trainer's or rljob's subcommand, a script."""
    args = argv[1:]
    while args and args[0].startswith("-") and args[0] not in ("-m", "-c"):
        args = args[2:] if args[0] in OPTIONS_WITH_VALUE else args[1:]
    if len(args) >= 2 and args[0] == "-m":
        module, rest = args[1], [a for a in args[2:] if not a.startswith("-")]
        if module in STAGE_MODULES:
            return STAGE_MODULES[module]
        if module in CLI_MODULES:
            return f"{CLI_MODULES[module]} {rest[0]}" if rest else CLI_MODULES[module]
        return module
    if args and args[0] == "-c":
        return f"{step}: python -c" if step else "python -c"
    script = Path(args[0]).name if args else "python"
    return SCRIPTS.get(script, script)


def read_records(folder: Path) -> list[Process]:
    processes = []
    for path in sorted(folder.glob("*.trace")):
        lines = path.read_text(errors="replace").splitlines()
        if not lines:
            continue
        header = json.loads(lines[0])
        process = Process(label(header["argv"], header.get("step", "")))
        for line in lines[1:]:
            name, _, by = line.partition("\t")
            process.modules.setdefault(name, by)
        processes.append(process)
    return processes


class DistributionIndex:
    """Module name -> the installed distribution that holds it (canonical name), for this interpreter's paths."""

    def __init__(self, local: Iterable[str]) -> None:
        self.top = {top: sorted({canonical(d) for d in dists}) for top, dists in importlib.metadata.packages_distributions().items()}
        self.local = set(local)
        self._by_file: dict[str, str] | None = None

    def _files(self) -> dict[str, str]:
        """Dotted module names of the files of every distribution that shares a top-level name with another."""
        if self._by_file is None:
            shared = {d for dists in self.top.values() if len(dists) > 1 for d in dists}
            self._by_file = {}
            for dist in importlib.metadata.distributions():
                name = canonical(dist.metadata["Name"])
                if name not in shared:
                    continue
                for file in dist.files or []:
                    parts = Path(str(file)).parts
                    if not parts or not parts[-1].endswith((".py", ".so", ".pyd")):
                        continue
                    stem = parts[-1].split(".")[0]
                    dotted = ".".join(parts[:-1] if stem == "__init__" else (*parts[:-1], stem))
                    self._by_file.setdefault(dotted, name)
        return self._by_file

    def kind(self, module: str) -> str:
        """A distribution's name, or 'stdlib', 'local' or 'unmapped'."""
        top = module.split(".")[0]
        if top in sys.stdlib_module_names or top in sys.builtin_module_names:
            return "stdlib"
        if top in self.local or top in ("__main__", "__mp_main__"):  # the program itself
            return "local"
        dists = self.top.get(top, [])
        if len(dists) == 1:
            return dists[0]
        if dists:
            parts = module.split(".")
            for n in range(len(parts), 0, -1):
                found = self._files().get(".".join(parts[:n]))
                if found:
                    return found
            return "namespace"  # a namespace package's own name (google): its children say which distribution
        return "unmapped"


@dataclass
class RunDistributions:
    used_by: dict[str, set[str]] = field(default_factory=dict)  # distribution -> the labels of the processes that loaded it
    asked_by: dict[str, set[str]] = field(default_factory=dict)  # distribution -> what asked for its modules (kinds)
    unmapped: set[str] = field(default_factory=set)  # top-level names that map to nothing installed


def distributions_of(processes: list[Process], index: DistributionIndex) -> RunDistributions:
    run = RunDistributions()
    for process in processes:
        for module, by in process.modules.items():
            kind = index.kind(module)
            if kind == "unmapped":
                run.unmapped.add(module.split(".")[0])
            if kind in ("stdlib", "local", "unmapped", "namespace"):
                continue
            run.used_by.setdefault(kind, set()).add(process.label)
            asker = index.kind(by) if by != "?" else "?"
            if asker != kind:
                run.asked_by.setdefault(kind, set()).add(asker)
    return run


def keep(with_torch: RunDistributions, without_torch: RunDistributions, torch_closure: set[str]) -> dict[str, str]:
    """Each distribution a TPU host needs, with why: the processes that load it."""
    kept = {}
    for dist, labels in sorted(with_torch.used_by.items()):
        if dist in without_torch.used_by:
            kept[dist] = ", ".join(sorted(without_torch.used_by[dist] | labels))
            continue
        if dist == TORCH:
            continue
        # Only a distribution or this checkout asking says who needs it (the standard library's importers do not).
        askers = with_torch.asked_by.get(dist, set()) - {"?", "stdlib", "unmapped", "namespace"}
        if dist not in torch_closure or any(a not in torch_closure for a in askers):
            kept[dist] = "only with torch importable: " + ", ".join(sorted(labels))
    for dist, labels in sorted(without_torch.used_by.items()):
        kept.setdefault(dist, ", ".join(sorted(labels)))
    return kept
