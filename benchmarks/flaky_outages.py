"""The flaky-detection benchmark's failure messages and its scenarios beside the default (issue #40):

* a shared resource (a database, a licence server, a GPU node's collective library) down for part
  of a suite, OUTAGE_SHARE of its tests failing with the resource's message on `outage_chance` of
  the suite-nights, still down for the confirmation and night re-runs or back for them;
* a fifth of the tests (across every suite) failing 30-60 % of their attempts, the others never flaky;
* week-long bursts: BURST_SHARE of the flaky tests fail BURST_RATE of their attempts for
  BURST_NIGHTS nights once (a flaky test that goes bad for a week);
* a host that fails what runs on it: a suite's runner host goes bad for one to three nights
  (HOST_CHANCE a suite-night to start), and the HOST_SHARE of the suite that runs on it fails
  with a host's message (an illegal memory access, a lost device, NCCL); the night's later run
  lands on it again, but the confirmation re-runs go to another host of the pool, where the tests
  pass or fail as their own; when SUSPECT_HOST_MIN or more that failed with one telling signature
  passed there, the host is the suspect and those passes are plain passes (confirm.py).

Infra events found are scored against the simulated outages (resource down, bad host)."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass

from nightly_assets.testing.signatures import signature

OUTAGE_SHARE = 0.3  # of a suite's tests that ran: those that use the resource


BURST_SHARE, BURST_RATE, BURST_NIGHTS = 0.1, 0.9, 7
HOST_CHANCE, HOST_SHARE, HOST_NIGHTS = 0.01, 0.25, (1, 3)  # a start a suite-night; one host of four


@dataclass(frozen=True)
class Scenario:
    name: str
    key: str = ""  # the prefix of its ratios ("": the default's)
    outage_chance: float = 0.0  # of a suite-night (never on a crash night)
    back_for_reruns: bool = False  # the resource is back for the confirmation and night re-runs
    # (share of the tests, lowest rate, highest rate): the flaky tests instead of the default's
    flaky: tuple[float, float, float] | None = None
    bursts: bool = False  # BURST_SHARE of the flaky tests have a week-long burst
    host: bool = False  # bad runner hosts (HOST_CHANCE) instead of a resource down

    @property
    def outages(self) -> bool:
        return bool(self.outage_chance) or self.host


SCENARIOS = (
    Scenario("default"),
    Scenario("resource down, still down for the re-runs", "down", 0.02),
    Scenario("resource down, back for the re-runs", "back", 0.02, back_for_reruns=True),
    Scenario("a fifth of the tests flaky at 30-60 % (every suite)", "fifth", flaky=(0.2, 0.3, 0.6)),
    Scenario("week-long bursts (a tenth of the flaky tests at 90 % for 7 nights)", "bursts", bursts=True),
    Scenario("a host that fails what runs on it (re-runs on another host)", "host", host=True),
)

# A test's own failure: an assertion on something of its own (a vocabulary of 1,800 checks, so two
# tests share one now and then), or a bare comparison of values a fifth of the time.
_SUBJECTS = [
    "out",
    "grad",
    "loss",
    "logits",
    "weights",
    "cache",
    "shape",
    "dtype",
    "stride",
    "mask",
    "bias",
    "scale",
    "offset",
    "index",
    "rows",
]
_CHECKS = [
    "mismatch",
    "not_close",
    "too_large",
    "too_small",
    "missing",
    "unexpected",
    "nan",
    "inf",
    "ordered",
    "empty",
]
_WHERE = [
    "forward",
    "backward",
    "compile",
    "export",
    "load",
    "save",
    "reduce",
    "gather",
    "scatter",
    "fuse",
    "lower",
    "plan",
]
GENERIC_SHARE = 0.2


def own_signature(rng: random.Random) -> str | None:
    """The signature of a test's own failure (a breakage, or its flakes)."""
    a, b = rng.randrange(1, 99), rng.randrange(1, 99)
    if rng.random() < GENERIC_SHARE:
        return signature(f"AssertionError: assert {a} == {b}")
    subject, check, where = rng.choice(_SUBJECTS), rng.choice(_CHECKS), rng.choice(_WHERE)
    return signature(f"AssertionError: {subject} {check} after {where}: {a}.{b} vs {b}.{a}")


def crash_message(night: int) -> str:
    """What a crashed runner leaves its tests with (a wholesale failure)."""
    return f"RuntimeError: worker {night % 7} exited unexpectedly with code {137 + night % 3}"


# The resources, each message with what varies from test to test (ports, ranks, source lines).
_RESOURCES = (
    "ConnectionRefusedError: [Errno 111] Connection refused to 127.0.0.1:{port}",
    'psycopg.OperationalError: connection to server at "10.0.3.{host}", port 5432 failed: Connection refused',
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"
    ":{line}, unhandled system error, NCCL version 2.20.5; rank {rank}",
    # no known infrastructure words: a cluster by its size alone
    "LicenseError: license server lic-{host}.corp:27000 has no free seat for feature vcs_sim",
)


def resource_message(kind: int, test: int) -> str:
    """The message resource `kind` (any int) fails test `test` with."""
    template = _RESOURCES[kind % len(_RESOURCES)]
    return template.format(port=40000 + test % 999, host=kind % 200, line=1900 + test % 97, rank=test % 8)


_HOST_MESSAGES = (  # what the tests on a bad GPU host fail with, each test one of them
    "RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
    "asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
    "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: device lost: GPU {gpu} (PCI 0000:{bus}:00.0)",
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"
    ":{line}, unhandled cuda error, NCCL version 2.20.5; rank {gpu}",
)


def host_message(test: int) -> str:
    """The message a bad host fails test `test` with."""
    template = _HOST_MESSAGES[test % len(_HOST_MESSAGES)]
    return template.format(gpu=test % 8, bus=10 + test % 80, line=1900 + test % 97)


def events_score(events: Iterable[tuple[str, int, str]], outages: set[tuple[str, int]]) -> dict[str, float]:
    """Infra events (suite, night, signature) against the simulated outages (suite, night)."""
    found = list(events)
    true = sum((suite, night) in outages for suite, night, _ in found)
    seen = {(suite, night) for suite, night, _ in found} & outages
    return {
        "infra events": len(found),
        "outages": len(outages),
        "infra_event_precision": true / len(found) if found else 1.0,
        "infra_event_recall": len(seen) / len(outages) if outages else 1.0,
    }
