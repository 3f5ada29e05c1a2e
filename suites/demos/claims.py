"""Demo claims that are listed, never judged: each not-applicable claim is reported with its reason."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NoReturn

import pytest

__all__ = ["NotApplicable", "not_applicable"]

#: claim key -> (the claim's words, why AGN routing cannot judge it)
NotApplicable = Mapping[str, tuple[str, str]]


def not_applicable(table: NotApplicable, claim: str) -> NoReturn:
    """Report `claim` as not applicable, quoting its words and the reason: never silently dropped."""
    words, reason = table[claim]
    pytest.skip(f"not applicable: \"{words}\": {reason}")
