"""How `nightly run` executes a night's stages: independent stages at once, each step in a thread of
this process, so that a night takes its critical path, not the sum of its stages.

The daemon's runs use Dagster's multiprocess executor (a process per step, forked from a preloaded
server); the command line runs the night in its own process, where a process per step would import
the code location again for each (seconds of CPU a stage). Threads share what is loaded: a stage's
work is processes, containers and machines it waits on. The step loop is the multiprocess
executor's (Dagster's ActiveExecution: dependencies, retries, skipped steps and the instance's
concurrency pools, as under the daemon); each step runs as Dagster runs a step in a child.

Ctrl-C or SIGTERM: Dagster's run loop captures it; every running step is interrupted (the commands
this process started are ended, and the step's thread is raised DagsterExecutionInterruptedError,
so it cleans up as an interrupted in-process step does), and the run ends interrupted.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import dagster as dg
from dagster._core.definitions.job_base import InMemoryJob
from dagster._core.errors import DagsterExecutionInterruptedError
from dagster._core.events import DagsterEvent, EngineEventData
from dagster._core.execution.api import create_execution_plan, execute_plan_iterator
from dagster._core.execution.context.system import PlanOrchestrationContext
from dagster._core.execution.execute_in_process import core_execute_in_process, merge_run_tags
from dagster._core.execution.plan.active import ActiveExecution
from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext
from dagster._core.execution.plan.plan import ExecutionPlan
from dagster._core.execution.retries import RetryMode
from dagster._core.execution.step_dependency_config import StepDependencyConfig
from dagster._core.executor.base import Executor
from dagster._core.storage.compute_log_manager import CapturedLogContext
from dagster._utils.error import SerializableErrorInfo, serializable_error_info_from_exc_info

from nightly_assets.interrupts import deferring_threads, interrupt_thread
from nightly_assets.process import end_running_commands

# Stages at once. A stage's work is mostly waiting (on pytest processes, containers, other
# machines); the runners it shares with other nights are bounded by Dagster's pools, not by this.
# Eight is more than any catalog pipeline's widest level (five suites), so a night is its critical path.
STAGES_AT_ONCE = 8
_POLL_S = 0.05  # how long the loop waits for a step's event before looking for new work and interrupts


class _StepEnded:
    """A step thread's last message: its error, if it raised outside Dagster's step handling."""

    def __init__(self, error: SerializableErrorInfo | None) -> None:
        self.error = error


class ThreadedExecutor(Executor):
    """Dagster's step loop with each ready step in a thread of this process."""

    def __init__(self, max_concurrent: int = STAGES_AT_ONCE) -> None:
        self._max_concurrent = max_concurrent

    @property
    def retries(self) -> RetryMode:
        return RetryMode.ENABLED

    @property
    def step_dependency_config(self) -> StepDependencyConfig:
        return StepDependencyConfig.default()

    def execute(
        self, plan_context: PlanOrchestrationContext, execution_plan: ExecutionPlan
    ) -> Iterator[DagsterEvent]:
        yield DagsterEvent.engine_event(
            plan_context,
            f"Executing steps in threads of this process (pid: {os.getpid()}), "
            f"at most {self._max_concurrent} at once",
            event_specific_data=EngineEventData.in_process(os.getpid(), execution_plan.step_keys_to_execute),
        )
        events: queue.Queue[tuple[str, DagsterEvent | _StepEnded]] = queue.Queue()
        threads: dict[str, threading.Thread] = {}
        stopping = False
        with (
            InstanceConcurrencyContext(plan_context.instance, plan_context.dagster_run) as concurrency,
            ActiveExecution(
                execution_plan,
                retry_mode=self.retries,
                max_concurrent=self._max_concurrent,
                instance_concurrency_context=concurrency,
                step_dependency_config=self.step_dependency_config,
            ) as active,
        ):
            try:
                while (not stopping and not active.is_complete) or threads:
                    if not stopping and active.check_for_interrupts():
                        stopping = True
                        active.mark_interrupted()
                        yield DagsterEvent.engine_event(
                            plan_context,
                            "Interrupted: ending the running stages",
                            EngineEventData.interrupted(list(threads)),
                        )
                        _interrupt(threads)
                    while not stopping:
                        steps = active.get_steps_to_execute(limit=self._max_concurrent - len(threads))
                        yield from active.concurrency_event_iterator(plan_context)
                        if not steps:
                            break
                        for step in steps:
                            thread = threading.Thread(
                                target=_run_step,
                                args=(plan_context, step.key, active.get_known_state(), self.retries, events),
                                name=f"step-{step.key}",
                                daemon=True,
                            )
                            threads[step.key] = thread
                            thread.start()
                    try:
                        key, message = events.get(timeout=_POLL_S)
                    except queue.Empty:
                        # A thread interrupted before it could say it ended has ended all the same.
                        for gone in [k for k, t in threads.items() if stopping and not t.is_alive()]:
                            threads.pop(gone)
                            active.verify_complete(plan_context, gone)
                        yield from active.plan_events_iterator(plan_context)
                        continue
                    if isinstance(message, DagsterEvent):
                        yield message
                        active.handle_event(message)
                    elif key in threads:
                        threads.pop(key).join()
                        # Raised outside the step's own handling (an interrupted step has said so).
                        if message.error is not None and not stopping:
                            step_context = plan_context.for_step(active.get_step_by_key(key))
                            failure = self.log_failure_or_retry_event_after_error(
                                step_context, message.error, active.get_known_state()
                            )
                            yield failure
                            active.handle_event(failure)
                        active.verify_complete(plan_context, key)
                    yield from active.plan_events_iterator(plan_context)
            except BaseException:
                _interrupt(threads)
                raise
        if stopping:
            raise DagsterExecutionInterruptedError()


def _run_step(
    plan_context: PlanOrchestrationContext,
    key: str,
    known_state: Any,
    retries: RetryMode,
    events: queue.Queue[tuple[str, DagsterEvent | _StepEnded]],
) -> None:
    """One step, as Dagster runs a step in a child process: a plan of it alone, executed."""
    error = None
    try:
        plan = create_execution_plan(
            plan_context.job,
            run_config=plan_context.run_config,
            step_keys_to_execute=[key],
            known_state=known_state,
            instance_ref=plan_context.instance.get_ref() if plan_context.instance.is_persistent else None,
        )
        for event in execute_plan_iterator(
            plan,
            plan_context.job,
            plan_context.dagster_run,
            instance=plan_context.instance,
            run_config=plan_context.run_config,
            retry_mode=retries.for_inner_plan(),
        ):
            events.put((key, event))
    except BaseException:  # the step's own failures are events; this is the machinery breaking
        error = serializable_error_info_from_exc_info(sys.exc_info())
    finally:
        events.put((key, _StepEnded(error)))


def _interrupt(threads: dict[str, threading.Thread]) -> None:
    """End the commands this process runs and raise DagsterExecutionInterruptedError in each step
    thread (delivered when it next runs Python: at once for a thread whose command was ended; after
    its cleanup for a thread deleting a rented machine, interrupts.deferred_interrupts)."""
    end_running_commands(sparing=deferring_threads())
    for thread in threads.values():
        interrupt_thread(thread)


@dg.executor(name="threaded", config_schema={"max_concurrent": dg.Field(int, default_value=STAGES_AT_ONCE)})
def threaded_executor(init_context: dg.InitExecutorContext) -> Executor:
    """Independent stages at once, each step in a thread of the run's process (`nightly run`)."""
    return ThreadedExecutor(int(str(init_context.executor_config["max_concurrent"])))


def _python_log_handlers_once(instance: dg.DagsterInstance) -> None:
    """Dagster builds each step's log manager with the instance's dagster.yaml `python_logs`
    handlers, configuring Python logging afresh for it (logging.config.dictConfig, which shuts down
    every handler of the process), even where none are configured. Steps in threads would do so
    while other steps log, and logging's module lock and a handler's lock are then taken in both
    orders: a deadlock. The handlers are made once, here, and each step gets those."""
    handlers = list(instance.get_yaml_python_handlers())
    instance.get_yaml_python_handlers = lambda: handlers  # type: ignore[method-assign]


def _logs_captured_by_the_run_only(instance: dg.DagsterInstance) -> None:
    """Dagster captures a step's stdout and stderr by pointing the process's descriptors 1 and 2
    at files for as long as it runs: right for a process per step, wrong for steps in threads,
    which would swap them under each other (and leave this command's own output in a step's
    file). Steps in threads write where the command writes; their structured logs, and their
    commands' logs (artefacts), are where they always are."""
    manager = instance.compute_log_manager
    capture = manager.capture_logs

    @contextlib.contextmanager
    def capture_logs(log_key: Sequence[str]) -> Iterator[CapturedLogContext]:
        if threading.current_thread() is threading.main_thread():
            with capture(log_key) as captured:
                yield captured
        else:
            yield CapturedLogContext(log_key)

    manager.capture_logs = capture_logs  # type: ignore[method-assign]


def execute_in_threads(
    job_def: dg.JobDefinition,
    instance: dg.DagsterInstance,
    *,
    partition_key: str,
    run_id: str,
    run_config: dict[str, Any],
    tags: dict[str, str],
    asset_selection: list[dg.AssetKey] | None = None,
) -> bool:
    """`job_def.execute_in_process(...)` with the threaded executor in place of Dagster's in-process
    one (which runs steps one after another); whether the run succeeded."""
    job = job_def.get_subset(asset_selection=frozenset(asset_selection)) if asset_selection else job_def
    job = job.with_executor_def(threaded_executor)
    _python_log_handlers_once(instance)
    _logs_captured_by_the_run_only(instance)
    result = core_execute_in_process(
        job=InMemoryJob(job_def=job),
        run_config=run_config,
        instance=instance,
        output_capturing_enabled=False,
        raise_on_error=False,
        run_tags=merge_run_tags(
            job_def=job_def,
            partition_key=partition_key,
            tags=tags,
            asset_selection=asset_selection,
            instance=instance,
            run_config=run_config,
        ),
        run_id=run_id,
        asset_selection=frozenset(asset_selection or ()),
    )
    return result.success
