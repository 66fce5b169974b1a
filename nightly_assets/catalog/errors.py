"""Validation errors as a catalog author reads them: the field's place, what is wrong, the value."""

from __future__ import annotations

import re
from typing import Any


def error_parts(error: Any) -> tuple[str, str]:
    """A pydantic error as a catalog author reads it: the message, and ` (got <value>)` for a
    plain value (nothing for a mapping or a list)."""
    got = error.get("input")
    shown = "" if isinstance(got, dict | list) or got is None else f" (got {got!r})"
    return error["msg"].removeprefix("Value error, "), shown


def params_error(error: Any) -> str:
    """One error of a params model as `params.<field>: <what is wrong> (got <value>)`; a check of the
    whole block names its field first (`bazel: ...`)."""
    place = ".".join(str(p) for p in error["loc"] if "[" not in str(p))  # skip validator wrappers
    message, shown = error_parts(error)
    if not place and re.match(r"^[a-z_]+: ", message):
        return f"params.{message}"
    return f"params{'.' + place if place else ''}: {message}{shown}"
