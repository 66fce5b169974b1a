"""Running the vendors' GPU tools for the probe: one deadline for all calls, failures as a reason."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nightly_assets.process import CommandError, cause, run_command


class ToolError(Exception):
    """A GPU tool that failed, ran out of time or printed what we cannot read; says which call."""


def command_line(program: str, args: Sequence[str]) -> str:
    return " ".join([Path(program).name, *args])


def run_tool(program: str, args: Sequence[str], deadline: float) -> str:
    """`program args`' output (stdout and stderr); ToolError naming the call when it fails."""
    shown = command_line(program, args)
    left = deadline - time.monotonic()
    if left <= 0:
        raise ToolError(f"`{shown}` was not run: the probe's time was spent by the calls before it")
    try:
        result = run_command([program, *args], timeout_s=left, check=False)
    except CommandError as exc:  # could not start, or timed out
        raise ToolError(f"`{shown}` failed: {exc}") from None
    if result.returncode != 0:
        raise ToolError(f"`{shown}` exited with {result.returncode}: {cause(result.output)}")
    return result.output


def json_output(output: str, shown: str) -> Any:
    """The JSON document in a tool's output; warnings it printed around it (stderr is mixed in)
    are skipped."""
    starts = [i for i in (output.find("{"), output.find("[")) if i >= 0]
    if starts:
        try:
            document, _ = json.JSONDecoder().raw_decode(output, min(starts))
            return document
        except json.JSONDecodeError:
            pass
    raise ToolError(f"`{shown}` printed no JSON document: {output.strip()[:300]!r}")
