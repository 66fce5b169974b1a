"""Test cases too many to hold: read again from their report files on each pass.

A 1 GB JUnit report holds about 2 M cases, some 400 MB as TestCase objects. Past
junit.STREAM_ABOVE_BYTES a report's `cases` are a `StreamedCases`: the first pass (made when the
report is built) keeps only the tally the stage reads (counts, failures, flaky cases: `ReportTally`)
and each later pass (the warehouse's batched write, the flakiness evidence) parses the files again.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import overload

from nightly_assets.results import ReportTally, TestCase


class StreamedCases(Sequence[TestCase]):
    """A report's cases, produced afresh by `source` on each pass (in the same order each time);
    the first pass is made here and its tally kept. Indexing and slicing work as on a tuple but
    cost a pass each: what iterates once is what this is for."""

    def __init__(self, source: Callable[[], Iterator[TestCase]]) -> None:
        self._source = source
        self.tally = ReportTally.of(source())

    def __iter__(self) -> Iterator[TestCase]:
        return self._source()

    def __len__(self) -> int:
        return self.tally.counts["total"]

    @overload
    def __getitem__(self, index: int) -> TestCase: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[TestCase, ...]: ...

    def __getitem__(self, index: int | slice) -> TestCase | tuple[TestCase, ...]:
        positions = range(len(self))[index]  # a tuple's bounds and slice arithmetic, IndexError included
        if isinstance(positions, int):
            return next(itertools.islice(self, positions, None))
        picked = {i: case for i, case in enumerate(self) if i in positions}
        return tuple(picked[i] for i in positions)

    def replaced(self, by_node_id: Mapping[str, TestCase]) -> StreamedCases:
        """These cases with those named in `by_node_id` (node id -> case) replaced, still streamed."""
        if not by_node_id:
            return self
        source = self._source
        return StreamedCases(lambda: (by_node_id.get(case.node_id, case) for case in source()))


def replaced_cases(cases: Sequence[TestCase], by_node_id: Mapping[str, TestCase]) -> Sequence[TestCase]:
    """`cases` with those named in `by_node_id` replaced: a tuple stays a tuple, streamed cases
    stay streamed."""
    if isinstance(cases, StreamedCases):
        return cases.replaced(by_node_id)
    return tuple(by_node_id.get(case.node_id, case) for case in cases)
