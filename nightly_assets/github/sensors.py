"""The PR label sensor: a pull request labelled by someone trusted runs the PR tier once per head commit.

An idle tick costs one API call: the open pull requests are asked for with the ETag of the last
answer, and GitHub answers 304 when nothing changed. Only a changed list costs more: per new head
commit of a labelled PR, who applied the label and, unless they are on the catalog's allow-list,
their permission on the repository.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import dagster as dg

from nightly_assets.catalog.models import Pipeline
from nightly_assets.github.client import GitHubClient, PullRequest
from nightly_assets.github.resources import GitHubResource

WRITE_ROLES = frozenset({"admin", "maintain", "write"})


@dataclass
class LabelCursor:
    """What the sensor remembers between ticks (JSON in the sensor's cursor)."""

    etag: str | None = None
    # PR number -> {"sha": head decided on, "updated_at": the PR then, "ran": started a run}
    decided: dict[str, dict[str, object]] = field(default_factory=dict)

    @classmethod
    def load(cls, raw: str | None) -> LabelCursor:
        if not raw:
            return cls()
        try:
            data = json.loads(raw)
            return cls(etag=data.get("etag"), decided=dict(data.get("decided", {})))
        except (ValueError, AttributeError):
            return cls()  # an unreadable cursor costs one full listing, nothing else

    def dump(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def pr_label_sensor_name(pipeline: str) -> str:
    return f"{pipeline}_pr_label"


def build_pr_label_sensor(
    pipeline: Pipeline, job: dg.JobDefinition, op_name: str, running: bool
) -> dg.SensorDefinition:
    """`op_name`: the job's op, whose config takes the PR number, head commit and labeler."""
    assert pipeline.github is not None and pipeline.github.pr_label is not None
    settings = pipeline.github
    label = settings.pr_label
    assert label is not None

    @dg.sensor(
        name=pr_label_sensor_name(pipeline.name),
        job=job,
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.RUNNING if running else dg.DefaultSensorStatus.STOPPED,
        description=(
            f"Runs {job.name} once per head commit of each open PR of {settings.repo} labelled "
            f"'{label}' by someone with write access or on the catalog's allow-list."
        ),
    )
    def _pr_label(context: dg.SensorEvaluationContext, github: GitHubResource) -> dg.SensorResult:
        cursor = LabelCursor.load(context.cursor)
        with github.client(settings.repo) as client:
            pulls, etag = client.open_pulls(cursor.etag)
            if pulls is None:
                return dg.SensorResult(skip_reason=f"no change on {settings.repo} (1 call, 304)")
            requests = _decide(context, client, pulls, cursor, label, settings.allow, op_name)
            calls = client.calls
        cursor.etag = etag
        open_numbers = {str(p.number) for p in pulls}
        cursor.decided = {n: d for n, d in cursor.decided.items() if n in open_numbers}
        context.log.info(f"{settings.repo}: {len(pulls)} open PR(s), {len(requests)} to run, {calls} call(s)")
        return dg.SensorResult(run_requests=requests, cursor=cursor.dump())

    return _pr_label


def _decide(
    context: dg.SensorEvaluationContext,
    client: GitHubClient,
    pulls: list[PullRequest],
    cursor: LabelCursor,
    label: str,
    allow: list[str],
    op_name: str,
) -> list[dg.RunRequest]:
    requests = []
    for pull in pulls:
        if label not in pull.labels:
            continue
        seen = cursor.decided.get(str(pull.number), {})
        if seen.get("sha") == pull.head_sha and (
            seen.get("ran") or seen.get("updated_at") == pull.updated_at
        ):
            continue  # this commit ran already, or nothing changed since it was refused
        actor = client.label_actor(pull.number, label)
        trusted = actor is not None and (actor in allow or client.permission(actor) in WRITE_ROLES)
        cursor.decided[str(pull.number)] = {
            "sha": pull.head_sha,
            "updated_at": pull.updated_at,
            "ran": trusted,
        }
        if not trusted:
            context.log.warning(
                f"PR #{pull.number}: '{label}' applied by {actor or 'nobody'}, who has no write access "
                "and is not on the allow-list; not running"
            )
            continue
        requests.append(
            dg.RunRequest(
                run_key=f"pr-{pull.number}-{pull.head_sha}",  # Dagster also refuses a second run of a key
                run_config={
                    "ops": {
                        op_name: {"config": {"pr": pull.number, "sha": pull.head_sha, "labeled_by": actor}}
                    }
                },
                tags={
                    "nightly/pr": str(pull.number),
                    "nightly/head_sha": pull.head_sha,
                    "nightly/labeled_by": actor or "",
                },
            )
        )
    return requests
