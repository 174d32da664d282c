"""Kubernetes quantities ("500m", "16Gi", 4) as Decimals: the client's parser, typed once here."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any, cast

from kubernetes.utils.quantity import parse_quantity as _parse_quantity

# The kubernetes client ships no annotations; its parser takes a string or a number and returns a Decimal.
parse_quantity = cast(Callable[[Any], Decimal], _parse_quantity)
