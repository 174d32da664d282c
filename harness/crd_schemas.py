"""CRD schemas as the tests check objects against them: closed like `kubernetes-validate --strict` closes
built-in kinds. Shared by tests/deploy (our Kueue and JobSet objects) and harness/podrun (the Kueue emulator's
Workloads)."""

from __future__ import annotations

from typing import Any


def strict_crd_schema(schema: Any) -> Any:
    """CRD schemas are open by default (the API server prunes unknown fields); reject them instead. Objects
    that preserve unknown fields stay open. Go's RE2 takes a flag group anywhere, Python's re only at the
    start: an inline `^(?i)` (AdmissionCheck's kind pattern) is moved there."""
    if isinstance(schema, dict):
        out = {k: strict_crd_schema(v) for k, v in schema.items()}
        if isinstance(out.get("pattern"), str) and out["pattern"].startswith("^(?i)"):
            out["pattern"] = "(?i)^" + out["pattern"][len("^(?i)") :]
        if "properties" in out and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict_crd_schema(v) for v in schema]
    return schema
