"""`nightly tests ...`: the warehouse's test history questions from a shell. Which tests pass
less than always (`rates`), which failed tonight after passing the night before (`new`), one
test's record night by night (`history`), a night's flaky and broken tests as its test_health
stage judged them (`flaky`), and the benchmark changes confirmed (`regressions`); each prints a
table, or JSON with `--json`."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nightly_assets.catalog.cadence import split_cell

if TYPE_CHECKING:  # `nightly --help` builds this parser: what answers a question is imported by `run`
    from nightly_assets.catalog.models import Pipeline
    from nightly_assets.catalog.outline import PipelineOutline
    from nightly_assets.results import NightKey
    from nightly_assets.warehouse.history import PassRate, TestRun
    from nightly_assets.warehouse.rows import Regression, TestVerdict
    from nightly_assets.warehouse.store import Warehouse


class TargetError(ValueError):
    """A target the pipeline does not have, or none named where the pipeline has several."""


def add_parser(sub: Any) -> None:
    tests = sub.add_parser("tests", help="test history: pass rates, newly failing tests, one test's record")
    actions = tests.add_subparsers(dest="action", required=True)
    rates = actions.add_parser("rates", help="per test, passed / runs over the last nights (lowest first)")
    rates.add_argument("pipeline")
    rates.add_argument("--target", help="default: the pipeline's only target")
    rates.add_argument("--nights", type=_positive, default=30, help="nights with results (default 30)")
    rates.add_argument("--below", type=float, default=1.0, help="only tests under this rate (default 1.0)")
    rates.add_argument("--all", action="store_true", help="every test that ran, whatever its rate")
    new = actions.add_parser("new", help="tests that failed on a night and passed the night before")
    new.add_argument("pipeline")
    new.add_argument("--night", required=True, help="YYYY-MM-DD")
    new.add_argument("--target", help="default: the pipeline's only target")
    history = actions.add_parser("history", help="one test on its newest nights, every target")
    history.add_argument("pipeline")
    history.add_argument("suite", help="the suite (stage) the test runs in, e.g. tests_unit")
    history.add_argument(
        "test_id", help="classname::name as in the summary, e.g. tests.test_reduce::test_mean"
    )
    history.add_argument("--limit", type=_positive, default=30)
    flaky = actions.add_parser("flaky", help="a night's flaky, broken and too-new tests (test_health)")
    flaky.add_argument("pipeline")
    flaky.add_argument("--night", required=True, help="YYYY-MM-DD")
    flaky.add_argument("--target", help="default: the pipeline's only target")
    regressions = actions.add_parser("regressions", help="benchmark changes confirmed, newest first")
    regressions.add_argument("pipeline")
    regressions.add_argument("--target", help="default: every target")
    for parser in (rates, new, history, flaky, regressions):
        parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(
    store: Warehouse,
    pipeline: Pipeline | PipelineOutline,
    args: argparse.Namespace,
    night: Callable[[Pipeline | PipelineOutline, str], dt.date],
) -> int:
    """Answer `args.action` from the warehouse `store`; `night` parses a --night value."""
    from nightly_assets.results import NightKey

    if args.action == "rates":
        target = target_of(pipeline, args.target)
        below = None if args.all else args.below
        rates = store.pass_rates(pipeline.name, target, args.nights, below=below)
        _print_rates(pipeline.name, target, args.nights, below, rates, args.json)
    elif args.action == "new":
        key = NightKey(pipeline.name, night(pipeline, args.night), target_of(pipeline, args.target))
        _print_runs(f"{key}: newly failing (passed the previous night)", store.newly_failing(key), args.json)
    elif args.action == "history":
        runs = store.test_history(pipeline.name, args.suite, args.test_id, limit=args.limit)
        _print_runs(f"{pipeline.name} {args.suite} {args.test_id}: newest first", runs, args.json)
    elif args.action == "flaky":
        key = NightKey(pipeline.name, night(pipeline, args.night), target_of(pipeline, args.target))
        _print_verdicts(key, store.verdicts(key), args.json)
    else:
        only = None if args.target is None else target_of(pipeline, args.target)
        _print_regressions(pipeline.name, store.regressions(pipeline.name, target=only), args.json)
    return 0


def target_of(pipeline: Pipeline | PipelineOutline, name: str | None) -> str:
    """The --target given, else the pipeline's only one; TargetError naming the choices."""
    names = [t.name for t in pipeline.targets]
    if name is None and len(names) == 1:
        return names[0]
    if name is None or split_cell(name)[0] not in names:  # a slot's cell (`cpu@06`) names its target
        expected = "one of" if name else "--target, one of"
        raise TargetError(
            f"pipeline '{pipeline.name}': {name or 'no target'}: expected {expected} {', '.join(names)}"
        )
    return name


def _print_rates(
    pipeline: str, target: str, nights: int, below: float | None, rates: list[PassRate], as_json: bool
) -> None:
    if as_json:
        print(json.dumps([{**vars(r), "rate": round(r.rate, 4)} for r in rates], indent=2))
        return
    which = ("test" if len(rates) == 1 else "tests") + ("" if below is None else f" below {below:.0%}")
    window = "the last night" if nights == 1 else f"the last {nights} nights"
    print(f"{pipeline} {target}: {len(rates)} {which} over {window} with results")
    if rates:
        print(f"  {'rate':>6}  {'passed/runs':<11}  {'suite':<20}  test")
    for r in rates:
        print(f"  {r.rate:6.1%}  {f'{r.passed}/{r.runs}':<11}  {r.suite:<20}  {r.test_id}")


def _print_runs(title: str, runs: list[TestRun], as_json: bool) -> None:
    rows = [
        {
            "night": r.night.isoformat(),
            "target": r.target,
            "suite": r.suite,
            "test": r.test_id,
            "outcome": r.case.outcome,
            "duration_s": r.case.duration_s,
            "message": r.case.message,
        }
        for r in runs
    ]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{title}: {len(rows)}")
    for row in rows:
        first_line = str(row["message"] or "").strip().splitlines()[:1]
        print(
            f"  {row['night']}  {row['target']:<14}  {row['outcome']:<7}  {row['suite']:<20}  {row['test']}"
            + (f"  {first_line[0][:120]}" if first_line else "")
        )


def _print_verdicts(key: NightKey, verdicts: list[TestVerdict], as_json: bool) -> None:
    from nightly_assets.sources.suspects import suspect_text

    if as_json:
        print(json.dumps([_plain(vars(v)) for v in verdicts], indent=2))
        return
    noun = "test" if len(verdicts) == 1 else "tests"
    print(f"{key}: {len(verdicts)} {noun} flaky, broken or too new to tell")
    for v in verdicts:
        state = v.state + (" (quarantined)" if v.quarantined else "")
        print(f"  {state:<20}  {v.suite:<20}  {v.test_id}  {v.reason}")
        for repo, span in v.suspects.items():
            print(f"    suspects: {suspect_text(repo, span)}")


def _print_regressions(pipeline: str, found: list[Regression], as_json: bool) -> None:
    from nightly_assets.sources.suspects import suspect_text

    if as_json:
        print(json.dumps([_plain(vars(r)) for r in found], indent=2))
        return
    print(f"{pipeline}: {len(found)} benchmark changes confirmed")
    for r in found:
        change = (r.after - r.before) / abs(r.before) if r.before else float("inf")
        word = "regressed" if r.worse else "improved"
        print(
            f"  {r.night}  {r.target:<14}  {r.name:<24}  {word} {abs(change):.1%} from {r.first_bad} "
            f"(last good {r.last_good}; {r.before:.4g} → {r.after:.4g} {r.unit})"
        )
        for repo, span in r.commits.items():
            print(f"    suspects: {suspect_text(repo, span)}")


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """Dates as ISO strings, for JSON."""
    return {k: v.isoformat() if isinstance(v, dt.date) else v for k, v in row.items()}


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: expected a whole number of at least 1")
    return value
