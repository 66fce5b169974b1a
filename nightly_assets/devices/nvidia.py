"""NVIDIA GPUs through nvidia-smi, narrowed the way CUDA reads CUDA_VISIBLE_DEVICES.

Two calls on most hosts: the CSV query (which also says which GPUs run MIG) and the plain table
(its header has the CUDA version, its MIG devices table each slice's memory); a third, `-L`, only
where MIG is on, for the slices' UUIDs."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from nightly_assets.devices.gpus import Gpu, HostGpus
from nightly_assets.devices.tools import ToolError, run_tool
from nightly_assets.devices.visibility import hides_every_device, leading_index, pick_visible

QUERY = (
    "--query-gpu=index,uuid,name,memory.total,driver_version,mig.mode.current",
    "--format=csv,noheader,nounits",
)
TABLE: tuple[str, ...] = ()
LIST = ("-L",)

_CUDA_VERSION = re.compile(r"CUDA Version:\s*(\S+)")
# A row of the MIG devices table: "|  0    1   0   0  |     13MiB / 20096MiB | ..." (GPU, GI, CI, MIG dev)
_MIG_ROW = re.compile(r"^\|\s*(\d+)\s+\d+\s+\d+\s+(\d+)\s+\|\s*\d+MiB\s*/\s*(\d+)MiB")
_LIST_GPU = re.compile(r"^GPU (\d+): .+ \(UUID: (GPU-[^)]+)\)$")
_LIST_MIG = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[^)]+)\)$")


@dataclass(frozen=True)
class Board:
    """A physical GPU as nvidia-smi lists it; with MIG on, its slices are the devices."""

    index: int
    uuid: str
    name: str
    memory_mib: int
    mig_enabled: bool
    slices: tuple[Gpu, ...] = ()

    def devices(self) -> tuple[Gpu, ...]:
        if self.mig_enabled:
            return self.slices
        return (
            Gpu(id=str(self.index), uuid=self.uuid, name=self.name, memory_mib=self.memory_mib, mig=False),
        )


def probe_nvidia(smi: str, env: Mapping[str, str], deadline: float) -> HostGpus:
    try:
        boards, driver = parse_query(run_tool(smi, QUERY, deadline))
        table = run_tool(smi, TABLE, deadline)
        runtime = cuda_version(table)
        if any(board.mig_enabled for board in boards):
            boards = with_slices(boards, run_tool(smi, LIST, deadline), table)
    except ToolError as exc:
        return HostGpus("nvidia", (), "", "", problem=str(exc))
    devices = [device for board in boards for device in board.devices()]
    visible = pick_visible(devices, env.get("CUDA_VISIBLE_DEVICES"), lambda entry: resolve(boards, entry))
    problem = "" if visible else hides_every_device(len(devices), env, ["CUDA_VISIBLE_DEVICES"])
    return HostGpus("nvidia", visible, driver, runtime, problem=problem)


def parse_query(output: str) -> tuple[list[Board], str]:
    boards, drivers = [], []
    for line in output.splitlines():
        if not line.strip():
            continue
        fields = [field.strip() for field in line.split(",")]
        if (
            len(fields) != 6
            or not fields[0].isdigit()
            or not fields[1].startswith("GPU-")
            or not fields[3].isdigit()
        ):
            raise ToolError(
                f"`nvidia-smi {QUERY[0]}` printed {line!r}, not "
                "'index, GPU-uuid, name, MiB, driver, MIG mode'"
            )
        index, uuid, name, memory, driver, mig = fields
        boards.append(Board(int(index), uuid, name, int(memory), mig_enabled=mig == "Enabled"))
        drivers.append(driver)
    return boards, drivers[0] if drivers else ""


def cuda_version(table: str) -> str:
    match = _CUDA_VERSION.search(table)
    if match is None:
        first = table.strip().splitlines()[:3]
        raise ToolError(f"`nvidia-smi` printed no 'CUDA Version:' in its header: {first!r}")
    return "" if match.group(1) == "N/A" else f"CUDA {match.group(1)}"


def with_slices(boards: list[Board], listing: str, table: str) -> list[Board]:
    """`boards` with the MIG slices of those that run MIG: UUIDs and profiles from `nvidia-smi -L`,
    memory from the plain table's MIG devices rows."""
    memory = {
        (int(row.group(1)), int(row.group(2))): int(row.group(3))
        for row in map(_MIG_ROW.match, table.splitlines())
        if row
    }
    slices: dict[int, list[Gpu]] = {}
    names = {board.index: board.name for board in boards}
    board_index = None
    for line in listing.splitlines():
        if gpu_line := _LIST_GPU.match(line):
            board_index = int(gpu_line.group(1))
            continue
        mig_line = _LIST_MIG.match(line)
        if mig_line is None or board_index is None:
            if line.strip():
                raise ToolError(f"`nvidia-smi -L` printed {line!r}, neither a GPU nor a MIG device line")
            continue
        profile, device, uuid = mig_line.group(1), int(mig_line.group(2)), mig_line.group(3)
        if (board_index, device) not in memory:
            raise ToolError(
                f"`nvidia-smi` lists no memory for MIG device {device} of GPU {board_index} "
                "in its MIG devices table"
            )
        name = f"{names.get(board_index, f'GPU {board_index}')} MIG {profile}"
        slices.setdefault(board_index, []).append(
            Gpu(id=uuid, uuid=uuid, name=name, memory_mib=memory[(board_index, device)], mig=True)
        )
    return [
        Board(b.index, b.uuid, b.name, b.memory_mib, b.mig_enabled, tuple(slices.get(b.index, [])))
        for b in boards
    ]


def resolve(boards: list[Board], entry: str) -> tuple[Gpu, ...] | None:
    """The devices one CUDA_VISIBLE_DEVICES entry names: an index or a GPU-… UUID (or a prefix of
    one) names a GPU, all of its slices where it runs MIG; MIG-… names a slice. None: no device."""
    if entry.startswith("MIG-"):
        named = [s for b in boards for s in b.slices if s.uuid.startswith(entry)]
        if named:
            return (named[0],) if len(named) == 1 else None
        # Seen with CUDA 13 on an H100 without MIG: MIG-<the GPU's UUID> selects that GPU.
        entry = "GPU-" + entry.removeprefix("MIG-")
    if entry.startswith("GPU-"):
        matching = [board for board in boards if board.uuid.startswith(entry)]
        return matching[0].devices() if len(matching) == 1 else None  # an ambiguous prefix names none
    index = leading_index(entry)
    board = next((b for b in boards if b.index == index), None)
    return board.devices() if board else None
