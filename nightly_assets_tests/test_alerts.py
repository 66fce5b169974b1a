"""Alert text: long reasons keep their first line and their end, where the cause is."""

from nightly_assets.reporting.alerts import MAX_REASON_CHARS, MAX_REASON_LINES, brief


def test_a_short_reason_is_kept_whole():
    text = "tests_unit: 9 passed, 1 failed of 10:\n  tests.test_x::test_y: assert 1 == 2"
    assert brief(text) == text


def test_a_long_build_log_keeps_its_first_line_and_its_cause():
    lines = ["pip wheel exited 1; last output:"] + [f"  compiling module {i}" for i in range(200)]
    lines.append("error: invalid version 'not a version' in pyproject.toml")
    short = brief("\n".join(lines))
    kept = short.splitlines()
    assert kept[0] == "pip wheel exited 1; last output:"
    assert kept[-1] == "error: invalid version 'not a version' in pyproject.toml"
    assert len(kept) == MAX_REASON_LINES and "lines …" in kept[2]


def test_one_enormous_line_keeps_both_ends():
    text = "start " + "x" * 10_000 + " the cause"
    short = brief(text)
    assert short.startswith("start ") and short.endswith(" the cause")
    assert len(short) <= MAX_REASON_CHARS + 3


def test_a_run_failure_is_the_resources_own_error_without_dagsters_wrapper_or_stack_trace():
    """A resource that fails to start fails the run, not a step: its error is the cause of
    Dagster's DagsterResourceFunctionError, whose traceback stays in the run's logs."""
    import dagster as dg

    from nightly_assets.reporting.night_runs import stage_error

    class Unreachable(dg.ConfigurableResource):
        def setup_for_execution(self, context: dg.InitResourceContext) -> None:
            raise RuntimeError("warehouse db/nightly: connection refused")

    @dg.asset
    def needs_it(warehouse: Unreachable) -> None: ...

    defs = dg.Definitions(assets=[needs_it], resources={"warehouse": Unreachable()})
    with dg.instance_for_test() as instance:
        run = defs.resolve_implicit_global_asset_job_def().execute_in_process(
            instance=instance, raise_on_error=False
        )
        [failure] = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE).records
    error = failure.event_log_entry.dagster_event.event_specific_data.error  # type: ignore[union-attr]
    assert "DagsterResourceFunctionError" in error.message and "Stack Trace" in error.to_string()
    assert stage_error(error, None) == "RuntimeError: warehouse db/nightly: connection refused"


def test_an_error_from_the_code_server_keeps_its_useful_line_not_the_trace():
    """A DagsterUserCodeProcessError's message is a whole SerializableErrorInfo.to_string():
    the error, Dagster's stack trace, then each cause with its own."""
    from dagster._utils.error import SerializableErrorInfo

    from nightly_assets.reporting.night_runs import stage_error

    cause = SerializableErrorInfo("OSError: no space left on device\n", ["  File x.py, line 1\n"], "OSError")
    inner = SerializableErrorInfo(
        "dagster._core.errors.DagsterExecutionStepExecutionError: Error occurred while executing op\n",
        ['  File "dagster/_core/execution/plan/utils.py", line 57\n'],
        "DagsterExecutionStepExecutionError",
        cause,
    )
    wrapped = SerializableErrorInfo(
        f"dagster._core.errors.DagsterUserCodeProcessError: {inner.to_string()}",
        ['  File "dagster/_grpc/client.py", line 9\n'],
        "DagsterUserCodeProcessError",
    )
    assert stage_error(wrapped, None) == "OSError: no space left on device"
    plain = SerializableErrorInfo(
        "DagsterUserCodeProcessError: ValueError: bad pin\n\nStack Trace:\n  File a.py\n",
        [],
        "DagsterUserCodeProcessError",
    )
    assert stage_error(plain, None) == "ValueError: bad pin"
    lines = SerializableErrorInfo("tests_unit: 1 failed of 10:\n  test_x: assert 1 == 2\n", [], "Failure")
    assert stage_error(lines, None) == "tests_unit: 1 failed of 10:\n  test_x: assert 1 == 2"
