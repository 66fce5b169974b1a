"""One interface over jax and torch, so each test of the suite is written once.

Only the standard library is imported at module level; `load()` imports the framework. Run as a
script (`python _backends.py torch-worker RANK WORLD DIR`) it is one rank of the torch collectives.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GPU_PLATFORMS = ("gpu", "cuda", "rocm")
COLLECTIVE_TIMEOUT_S = 300


def rank_values(rank: int) -> list[float]:
    """What rank `rank` holds before the collectives: distinct, exact in float32."""
    return [rank + 1.0, 10.0 * (rank + 1)]


@dataclass(frozen=True)
class Collectives:
    """Per-rank results of one round of collectives; rank r starts with rank_values(r)."""

    transport: str  # "xla" for jax, the torch.distributed backend ("gloo", "nccl") for torch
    world_size: int
    all_reduce: list[list[float]]  # sum over ranks
    all_gather: list[list[float]]  # every rank's values, concatenated in rank order
    broadcast: list[list[float]]  # from the last rank
    ring_shift: list[list[float]]  # rank r receives rank r-1's values (ppermute / send-recv)


class Backend:
    """What the tests need from a framework; `xp` is its array namespace (jax.numpy or torch)."""

    name: str
    xp: Any

    def version(self) -> str:
        raise NotImplementedError

    def platform_name(self) -> str:
        raise NotImplementedError

    def platform(self) -> str:
        raw = self.platform_name()
        return "gpu" if raw in GPU_PLATFORMS else raw

    def devices(self) -> list[Any]:
        raise NotImplementedError

    def device_count(self) -> int:
        return len(self.devices())

    def describe(self) -> str:
        return f"{self.name} {self.version()} on {self.platform_name()}: {self.devices()}"

    def put(self, values: Any, dtype: str = "float32", device: int = 0) -> Any:
        raise NotImplementedError

    def full(self, n: int, value: float, dtype: str = "float32") -> Any:
        raise NotImplementedError

    def to_host(self, x: Any) -> Any:
        """Nested Python lists (or a Python scalar) of the values of x."""
        raise NotImplementedError

    def device_of(self, x: Any) -> Any:
        raise NotImplementedError

    def dtype_name(self, x: Any) -> str:
        return str(x.dtype).removeprefix("torch.")

    def supports(self, dtype: str) -> bool:
        return True

    def matmul(self, a: Any, b: Any) -> Any:
        return a @ b

    def jit(self, fn: Any) -> Any:
        return fn

    def collectives(self) -> Collectives:
        """Run once per session; a failure is kept too: a hung group costs one timeout, not one per test."""
        if not hasattr(self, "_collectives"):
            try:
                self._collectives: Collectives | Exception = self._run_collectives()
            except Exception as error:
                self._collectives = error
        if isinstance(self._collectives, Exception):
            raise self._collectives
        return self._collectives

    def _run_collectives(self) -> Collectives:
        raise NotImplementedError


class JaxBackend(Backend):
    name = "jax"

    def __init__(self) -> None:
        import jax
        import jax.numpy as jnp

        self.jax, self.xp = jax, jnp

    def version(self) -> str:
        return str(self.jax.__version__)

    def platform_name(self) -> str:
        return str(self.jax.default_backend())

    def devices(self) -> list[Any]:
        return list(self.jax.devices())

    def put(self, values: Any, dtype: str = "float32", device: int = 0) -> Any:
        return self.jax.device_put(
            self.xp.asarray(values, dtype=getattr(self.xp, dtype)), self.devices()[device]
        )

    def full(self, n: int, value: float, dtype: str = "float32") -> Any:
        return self.jax.device_put(self.xp.full((n,), value, getattr(self.xp, dtype)), self.devices()[0])

    def to_host(self, x: Any) -> Any:
        return self.jax.device_get(x).tolist()

    def device_of(self, x: Any) -> Any:
        (device,) = x.devices()
        return device

    def matmul(self, a: Any, b: Any) -> Any:  # full float32, not the TF32-like GPU default
        return self.xp.matmul(a, b, precision=self.jax.lax.Precision.HIGHEST)

    def jit(self, fn: Any) -> Any:
        return self.jax.jit(fn)

    def _run_collectives(self) -> Collectives:
        import numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        jax, jnp, lax = self.jax, self.xp, self.jax.lax
        if hasattr(jax, "shard_map"):
            shard_map = jax.shard_map
        else:  # jax < 0.6
            from jax.experimental.shard_map import shard_map
        n, last, spec = self.device_count(), self.device_count() - 1, PartitionSpec("d")
        mesh = Mesh(np.array(self.devices()), ("d",))
        rows = jnp.asarray([rank_values(r) for r in range(n)], dtype=jnp.float32)
        x = jax.device_put(rows, NamedSharding(mesh, spec))

        def body(x: Any) -> tuple[Any, ...]:  # x: this device's row, shape (1, 2)
            me = lax.axis_index("d")
            return (
                lax.psum(x, "d"),
                lax.all_gather(x, "d", tiled=True).reshape(1, -1),
                lax.psum(jnp.where(me == last, x, jnp.zeros_like(x)), "d"),
                lax.ppermute(x, "d", [(i, (i + 1) % n) for i in range(n)]),
            )

        f = jax.jit(shard_map(body, mesh=mesh, in_specs=spec, out_specs=(spec,) * 4))
        reduced, gathered, broadcast, shifted = (self.to_host(out) for out in f(x))
        return Collectives("xla", n, reduced, gathered, broadcast, shifted)


class TorchBackend(Backend):
    """On GPU one rank per device (nccl, RCCL on ROCm); on CPU `cpu_ranks` gloo processes."""

    name = "torch"

    def __init__(self, cpu_ranks: int) -> None:
        import torch

        self.xp, self.cpu_ranks = torch, cpu_ranks

    def version(self) -> str:
        return str(self.xp.__version__)

    def platform_name(self) -> str:
        if not self.xp.cuda.is_available():
            return "cpu"
        return "rocm" if getattr(self.xp.version, "hip", None) else "cuda"

    def devices(self) -> list[Any]:
        if self.platform() == "gpu":
            return [self.xp.device("cuda", i) for i in range(self.xp.cuda.device_count())]
        return [self.xp.device("cpu")]

    def device_count(self) -> int:
        """GPUs when there are any; on CPU, the ranks that joined one gloo process group."""
        return len(self.devices()) if self.platform() == "gpu" else self.collectives().world_size

    def put(self, values: Any, dtype: str = "float32", device: int = 0) -> Any:
        return self.xp.tensor(values, dtype=getattr(self.xp, dtype), device=self.devices()[device])

    def full(self, n: int, value: float, dtype: str = "float32") -> Any:
        return self.xp.full((n,), value, dtype=getattr(self.xp, dtype), device=self.devices()[0])

    def to_host(self, x: Any) -> Any:
        return x.detach().cpu().tolist()

    def device_of(self, x: Any) -> Any:
        return x.device

    def supports(self, dtype: str) -> bool:
        if dtype == "bfloat16" and self.platform() == "gpu":
            return bool(self.xp.cuda.is_bf16_supported())
        return True

    def _run_collectives(self) -> Collectives:
        gpu = self.platform() == "gpu"
        world = len(self.devices()) if gpu else self.cpu_ranks
        env = dict(os.environ)
        if not gpu:  # all ranks are local; works in a container without a network too
            env.setdefault("GLOO_SOCKET_IFNAME", "lo")
            env.setdefault("OMP_NUM_THREADS", "1")
        with tempfile.TemporaryDirectory(prefix="nightly-collectives-") as tmp:
            logs = [Path(tmp, f"rank{r}.log") for r in range(world)]
            procs = []
            for r, log in enumerate(logs):
                with log.open("w") as out:  # the child keeps its own copy of the descriptor
                    cmd = [sys.executable, __file__, "torch-worker", str(r), str(world), tmp]
                    procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env))
            deadline = time.monotonic() + COLLECTIVE_TIMEOUT_S
            codes: list[int | None] = []
            for p in procs:
                try:
                    codes.append(p.wait(timeout=max(1.0, deadline - time.monotonic())))
                except subprocess.TimeoutExpired:
                    codes.append(None)
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            if any(code != 0 for code in codes):
                tails = "\n".join(
                    f"--- rank {r} (exit {c}):\n{logs[r].read_text()[-3000:]}" for r, c in enumerate(codes)
                )
                raise RuntimeError(f"torch collectives over {world} ranks failed:\n{tails}")
            ranks = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(world)]
        return Collectives(
            ranks[0]["transport"],
            min(r["world_size"] for r in ranks),
            *([r[key] for r in ranks] for key in ("all_reduce", "all_gather", "broadcast", "ring_shift")),
        )


def load(framework: str, cpu_ranks: int) -> Backend:
    return JaxBackend() if framework == "jax" else TorchBackend(cpu_ranks)


def _torch_worker(rank: int, world: int, tmp: str) -> None:
    """One rank: every collective once, results to DIR/rank<r>.json."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    gpu = torch.cuda.is_available()
    device = torch.device("cuda", rank) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl" if gpu else "gloo",
        init_method=f"file://{tmp}/rendezvous",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S // 2),
    )
    x = torch.tensor(rank_values(rank), dtype=torch.float32, device=device)
    reduced = x.clone()
    dist.all_reduce(reduced, op=dist.ReduceOp.SUM)
    gathered = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(gathered, x)
    broadcast = x.clone()
    dist.broadcast(broadcast, src=world - 1)
    shifted = x.clone()
    if world > 1:
        ops = [
            dist.P2POp(dist.isend, x, (rank + 1) % world),
            dist.P2POp(dist.irecv, shifted, (rank - 1) % world),
        ]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
    result = {
        "transport": dist.get_backend(),
        "world_size": dist.get_world_size(),
        "all_reduce": reduced.cpu().tolist(),
        "all_gather": torch.cat(gathered).cpu().tolist(),
        "broadcast": broadcast.cpu().tolist(),
        "ring_shift": shifted.cpu().tolist(),
    }
    if gpu:
        dist.barrier(device_ids=[rank])
    else:
        dist.barrier()
    dist.destroy_process_group()
    Path(tmp, f"rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__" and sys.argv[1:2] == ["torch-worker"]:
    _torch_worker(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
