import pytest
from nightlysample.collectives import all_reduce
from nightlysample.devices import ENV_VAR, visible_devices

from nightlysample.reduce import mean

pytestmark = pytest.mark.integration


def test_sharded_mean_matches_mean(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "2")
    xs = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    shards = [xs[d::2] for d in range(visible_devices())]
    totals = all_reduce([[sum(shard), float(len(shard))] for shard in shards])[0]
    assert totals[0] / totals[1] == mean(xs) == 3.5
