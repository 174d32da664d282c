"""README passages of the learning task's benches: the arithmetic difficulty sweep (bench/learning/arith_difficulty.py)."""

from __future__ import annotations

from typing import Any

from bench.readme_render.common import where

_OPERATORS = {"+": "sums", "+-": "sums and differences", "-": "differences", "*": "products"}


_WORDS = {1: "one", 2: "two", 3: "three", 4: "four"}


def _kind(setting: dict[str, Any]) -> str:
    digits = _WORDS.get(setting["digits"], str(setting["digits"]))
    if setting["operands"] == 2:
        return f"{digits}-digit {_OPERATORS.get(setting['operators'], setting['operators'])}"
    if setting["operators"] == "+":
        return f"{_WORDS.get(setting['operands'], setting['operands'])} {digits}-digit addends"
    return f"{setting['operands']} {digits}-digit operands ({setting['operators']})"


def render_arith_difficulty(result: dict[str, Any]) -> str:
    low, high = result["target_pass_at_1"]
    settings, choice, sampling = result["settings"], result["choice"], result["sampling"]
    inside = [s for s in settings if low <= s["pass_at_1"] <= high]
    kinds_inside = sorted({_kind(s) for s in inside})
    pairs = all(s["operands"] == 2 and s["digits"] == 1 for s in inside)
    named = f"one-digit pairs ({', '.join(k.removeprefix('one-digit ') for k in kinds_inside)})" if pairs else " or ".join(kinds_inside)
    outside: dict[str, float] = {}
    for s in settings:
        if _kind(s) not in kinds_inside:
            outside[_kind(s)] = max(outside.get(_kind(s), 0.0), s["pass_at_1"])
    temperatures = ", ".join(f"{t:g}" for t in sorted({s["temperature"] for s in settings}, reverse=True))
    best_outside = ", ".join(f"{kind} at most {p:.2f}" for kind, p in sorted(outside.items(), key=lambda item: -item[1]))
    chosen = choice["setting"] | {"temperature": choice["temperature"]}
    return (
        f"The difficulty was chosen before any training (`bench/learning/arith_difficulty.py`, "
        f"`bench/results/arith_difficulty.json`, {where(result.get('machine'))}): SmolLM2-135M sampled on "
        f"{settings[0]['prompts']} train prompts x {sampling['generations']} completions per setting with train_rl's own "
        f"prompts and the training reward, at temperatures {temperatures}. {len(inside)} of {len(settings)} settings reach "
        f"pass@1 in [{low:g}, {high:g}], all of them {named}; the others' best pass@1: {best_outside}; "
        f"the default is {_kind(chosen)} at temperature {choice['temperature']:g}: pass@1 {choice['pass_at_1']:.2f}, "
        f"pass@8 {choice['pass_at_8']:.2f}, {choice['mixed_groups']:.0%} of groups of {sampling['generations']} mixed."
    )
