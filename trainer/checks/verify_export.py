"""`python -m trainer.checks.verify_export DIR`: the export loads with transformers and gives finite logits.

Prints one JSON line with what was checked; exits 1 when the export does not load or is not finite.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def verify_export(export_dir: str) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(export_dir)
    model = AutoModelForCausalLM.from_pretrained(export_dir, torch_dtype=torch.float32)
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
    if len(argv) != 1:
        print("usage: python -m trainer.checks.verify_export EXPORT_DIR", file=sys.stderr)
        return 2
    result = verify_export(argv[0])
    print(json.dumps(result))
    return 0 if result["finite"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
