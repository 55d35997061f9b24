"""The value checks shared by every config reader: one definition of "a whole number" (an int, never a bool, which
Python counts as an int) and of "a number". Each caller keeps its own error class and message, which names the
file or key, the value and the fix."""

from __future__ import annotations

import math
from typing import Any, TypeGuard


def is_whole(value: Any, minimum: int | None = None) -> TypeGuard[int]:
    """``value`` is an int (not a bool) and, when ``minimum`` is given, at least ``minimum``."""
    return isinstance(value, int) and not isinstance(value, bool) and (minimum is None or value >= minimum)


def is_number(value: Any, finite: bool = False) -> bool:
    """``value`` is an int or a float (not a bool); with ``finite``, neither inf nor nan."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return ok and (not finite or math.isfinite(value))
