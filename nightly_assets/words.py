"""Words a person reads in summaries, alerts and stage details: counts with their noun."""

from __future__ import annotations


def plural(count: int, noun: str, many: str | None = None) -> str:
    """ "1 night", "2 nights", "0 nights"; `many` for a noun that does not take an s ("1 GPU is
    free" is the caller's; "2 pieces of evidence" is `plural(2, "piece of evidence", "pieces of
    evidence")`)."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"
