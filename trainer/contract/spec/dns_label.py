"""The DNS-1123 label rule, in one place: job names, label keys, teams, job ids on the trainer's command
line, Kubernetes namespaces and object names all follow it (Kubernetes refuses anything else, and a
team or job name ends up in label values and object names)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

DNS_LABEL_MAX_LENGTH = 63
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
DNS_LABEL_RULE = "at most 63 lowercase letters, digits or '-', starting and ending with a letter or digit"
_DNS_LABEL = re.compile(DNS_LABEL_PATTERN)


def is_dns_label(value: str, *, max_length: int = DNS_LABEL_MAX_LENGTH) -> bool:
    """`max_length` may be lower than 63 where a name gets suffixes (a JobSet's pods)."""
    # fullmatch: with match, the pattern's `$` would also accept a trailing newline.
    return len(value) <= max_length and _DNS_LABEL.fullmatch(value) is not None


def check_dns_label(value: str) -> str:
    if not is_dns_label(value):
        raise ValueError(f"{value!r} must be a DNS-1123 label: {DNS_LABEL_RULE}")
    return value


DnsLabel = Annotated[
    str,
    Field(max_length=DNS_LABEL_MAX_LENGTH, json_schema_extra={"pattern": DNS_LABEL_PATTERN}),
    AfterValidator(check_dns_label),
]
