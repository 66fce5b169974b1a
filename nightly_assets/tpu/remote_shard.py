"""A pytest plugin that runs ON a TPU VM (uploaded beside remote_suite.py): it keeps the tests of
one shard of the night's plan and deselects the rest.

Standard library and pytest only, Python 3.8+. The plan is the orchestrator's shard-plan.json
(`{"shards": [{"index": 1, "units": [...]}, ...]}`), made from the tests recorded on earlier
nights; a unit is a node id or a whole file (`path/test_x.py`). A test collected tonight is kept
where the plan put it (its node id, else its file); a test the plan does not know (new tonight)
goes to exactly one shard by a stable hash of its node id, so the shards agree without talking.
A planned test that no longer exists is simply never collected. The node ids this shard kept are
written to --nightly-shard-selected, so the orchestrator can tell a removed test from one that
did not run.
"""

import json
import zlib

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("nightly-shard", "one shard of the night's plan (TPU VMs)")
    group.addoption("--nightly-shard-plan", default=None, help="the shard plan JSON")
    group.addoption("--nightly-shard-index", type=int, default=None, help="this shard, from 1")
    group.addoption("--nightly-shard-selected", default=None, help="write the node ids kept here")


def load_plan(path):
    """{unit: shard index} and the shard count of a plan file; ValueError naming what is wrong."""
    with open(path) as handle:
        document = json.load(handle)
    shards = document.get("shards") if isinstance(document, dict) else None
    if not isinstance(shards, list) or not shards:
        raise ValueError(f"{path}: expected a non-empty 'shards' list")
    owner = {}
    for shard in shards:
        index, units = shard.get("index"), shard.get("units")
        if not isinstance(index, int) or not isinstance(units, list):
            raise ValueError(f"{path}: each shard needs an integer 'index' and a 'units' list")
        for unit in units:
            owner[str(unit)] = index
    return owner, len(shards)


def shard_of(node_id, owner, count):
    """The shard (from 1) that runs `node_id`: where the plan put it or its file, else by a hash
    (crc32, not Python's salted hash(): every VM must compute the same)."""
    if node_id in owner:
        return owner[node_id]
    path = node_id.split("::", 1)[0]
    if path in owner:
        return owner[path]
    return zlib.crc32(node_id.encode("utf-8")) % count + 1


@pytest.hookimpl(trylast=True)  # after -m and -k deselected theirs: what is kept here really runs
def pytest_collection_modifyitems(session, config, items):
    plan = config.getoption("nightly_shard_plan")
    if plan is None:
        return
    index = config.getoption("nightly_shard_index")
    owner, count = load_plan(plan)
    if index is None or not 1 <= index <= count:
        raise pytest.UsageError(f"--nightly-shard-index {index!r}: expected 1 to {count}")
    kept, dropped = [], []
    for item in items:
        (kept if shard_of(item.nodeid, owner, count) == index else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = kept
    selected = config.getoption("nightly_shard_selected")
    if selected:
        with open(selected, "w") as handle:
            json.dump([item.nodeid for item in kept], handle)
