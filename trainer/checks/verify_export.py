"""`python -m trainer.checks.verify_export [--wait] DIR`: the export loads with transformers and gives finite logits.

Prints one JSON line with what was checked; exits 1 when the export does not load or is not finite.

With --wait it imports torch and transformers first, then waits for a line on stdin before it reads DIR:
the pipeline starts it that way when the export stage starts, so those imports (most of the check's
time) overlap to_huggingface instead of following it. End of input without a line checks nothing and
exits 2, never 0.
"""

from __future__ import annotations

import json
import sys
from typing import Any

USAGE = "usage: python -m trainer.checks.verify_export [--wait] EXPORT_DIR"


def import_loaders() -> None:
    """What every check imports whatever the export holds: torch, and transformers' model and fast
    tokenizer bases (transformers imports them lazily, on the first from_pretrained)."""
    import torch  # noqa: F401
    import transformers.modeling_utils
    import transformers.tokenization_utils_tokenizers  # noqa: F401
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401


def verify_export(export_dir: str) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(export_dir)
    model = AutoModelForCausalLM.from_pretrained(export_dir, dtype=torch.float32)
    model.eval()
    inputs = tokenizer(["Natalia sold clips to 48 of her friends. How many clips did she sell?"], return_tensors="pt")
    with torch.no_grad():
        logits = model(**inputs).logits
    return {
        "export_dir": export_dir,
        "architecture": type(model).__name__,
        "num_parameters": int(sum(p.numel() for p in model.parameters())),
        "logits_shape": list(logits.shape),
        "finite": bool(torch.isfinite(logits).all()),
    }


def main(argv: list[str]) -> int:
    wait = argv[:1] == ["--wait"]
    args = argv[1:] if wait else argv
    if len(args) != 1 or args[0].startswith("-"):
        print(USAGE, file=sys.stderr)
        return 2
    if wait:
        import_loaders()
        if not sys.stdin.readline():
            print("verify_export: stdin ended before the go line; nothing was checked", file=sys.stderr)
            return 2
    result = verify_export(args[0])
    print(json.dumps(result))
    return 0 if result["finite"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
