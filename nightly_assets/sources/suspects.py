"""How a suspect commit range reads in a check and an alert (ranges come from
`GitSourcesResource.suspects`): `repo good..bad [sha author: subject, ...]`."""

from __future__ import annotations

from typing import Any

SpanKey = tuple[str, str | None, str | None]  # (repo, good sha, bad sha)


def suspect_text(repo: str, span: dict[str, Any], shown: int = 3) -> str:
    good, bad = (span["good"] or "")[:10], (span["bad"] or "removed")[:10]
    listed = span.get("commits") or []
    named = ", ".join(f"{c['sha'][:10]} {c['author']}: {c['subject'][:80]}" for c in listed[:shown])
    more = f" (+{len(listed) - shown} more)" if len(listed) > shown else ""
    return f"{repo} {good}..{bad}" + (f" [{named}{more}]" if named else "")
