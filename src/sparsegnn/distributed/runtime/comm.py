"""Process groups and the collectives the algorithms use, with byte accounting.

Every collective goes through :class:`Communicator`, which counts what this rank sends
and receives per *phase* (forward SpMM, backward SpMM, gradient all-reduce, metrics,
setup) and per collective. The counts are the payload model of each collective, stated
here once and used unchanged by :mod:`sparsegnn.distributed.planning.comm_model`:

* ``broadcast`` of b bytes in a group of g: the root sends ``b * (g - 1)`` (one copy per
  receiver), every other member receives ``b``.
* ``all_gather`` (uneven pieces, built from one broadcast per member): each rank sends
  its piece to the g - 1 others and receives every other piece.
* ``all_reduce`` (sum): an all-gather of the g equal contributions followed by a local sum
  in rank order, so each rank sends and receives ``b * (g - 1)``. Summing the same
  gathered values in the same order is what keeps replicas bit-identical (a ring
  all-reduce may round differently on different ranks); for the g = 2 groups of 1.5D and
  3D it moves exactly what a ring all-reduce moves.

Groups of one rank communicate nothing, and empty tensors are never sent (every rank
knows every size, so all members skip the same calls).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from sparsegnn.distributed.layout.grid import GridError, GridShape
from sparsegnn.sparse import CSRMatrix

Counts = dict[str, dict[str, int]]


@dataclass(frozen=True)
class ByteCounts:
    """What one rank sent and received, by phase (``{phase: {"sent": bytes, "recv": bytes,
    "<collective>_sent": ...}}``): the record every multi-rank result carries."""

    phases: Counts

    @property
    def sent(self) -> int:
        return sum(c.get("sent", 0) for c in self.phases.values())

    @property
    def recv(self) -> int:
        return sum(c.get("recv", 0) for c in self.phases.values())

    def totals(self) -> ByteCounts:
        """Only each phase's ``sent``/``recv`` totals: what the comm model predicts."""
        return ByteCounts({p: {"sent": c.get("sent", 0), "recv": c.get("recv", 0)}
                           for p, c in self.phases.items()})

    def __add__(self, other: ByteCounts) -> ByteCounts:
        """Both records' bytes, phase by phase and key by key (two communicators' counts)."""
        phases = self.to_dict()
        for phase, counts in other.phases.items():
            into = phases.setdefault(phase, {})
            for key, n in counts.items():
                into[key] = into.get(key, 0) + n
        return ByteCounts(phases)

    def to_dict(self) -> Counts:
        return {p: dict(c) for p, c in self.phases.items()}


@dataclass(frozen=True)
class Group:
    """A process group: its members' global ranks in group order and this rank's index."""

    ranks: tuple[int, ...]
    me: int
    handle: Any = None
    # Further process groups of the same members (lane 0 is ``handle``): gloo runs one
    # group's collectives in order on two worker threads, so broadcasts from different
    # roots on one group take turns, while on groups of their own they share the links.
    lanes: tuple[Any, ...] = ()

    @property
    def size(self) -> int:
        return len(self.ranks)

    def lane(self, n: int) -> Group:
        """This group with lane ``n`` (mod the lanes it has) as its handle."""
        return replace(self, handle=self.lanes[n % len(self.lanes)]) if self.lanes else self


@dataclass(frozen=True)
class ProcessGrid:
    """A :class:`GridShape` plus this rank's groups, all created once at start-up.

    ``row``: same row and layer (A tiles in SUMMA, the column all-gather, the 1.5D
    replicas). ``col``: same col and layer (H blocks; it holds one replica of every vertex
    block, which is why losses and weight gradients are reduced over it). ``fiber``: same
    row and col (the 3D reduction). Group member k is grid coordinate k along that axis.
    """

    shape: GridShape
    rank: int
    row: Group
    col: Group
    fiber: Group

    @property
    def coords(self) -> tuple[int, int, int]:
        return self.shape.coords(self.rank)

    @classmethod
    def create(cls, shape: GridShape, members: Sequence[int] | None = None,
               col_lanes: int = 1) -> ProcessGrid | None:
        """Create every group on every rank of the job, in the same order (torch requires it).

        ``members`` are the global ranks that form the grid, grid rank r being
        ``members[r]`` (default: the whole job, which must then have ``shape.size`` ranks).
        A grid smaller than the job lets one launch run several grids, as the benchmark
        and the tests do; ranks outside it get ``None``. ``col_lanes`` > 1 gives each
        column group that many process groups (:meth:`Group.lane`), for an overlapped
        product's broadcasts from several roots at once.
        """
        me = dist.get_rank() if dist.is_initialized() else 0
        world = dist.get_world_size() if dist.is_initialized() else 1
        members = tuple(range(world)) if members is None else tuple(members)
        if len(members) != shape.size or len(set(members)) != len(members) or (
            members and (min(members) < 0 or max(members) >= world)
        ):
            raise GridError(
                f"{shape.describe()} needs {shape.size} distinct ranks of the {world} in this "
                f"job, got {list(members)}"
            )
        axes = {
            "row": [[shape.rank_of(i, j, k) for j in range(shape.cols)]
                    for i in range(shape.rows) for k in range(shape.layers)],
            "col": [[shape.rank_of(i, j, k) for i in range(shape.rows)]
                    for j in range(shape.cols) for k in range(shape.layers)],
            "fiber": [[shape.rank_of(i, j, k) for k in range(shape.layers)]
                      for i in range(shape.rows) for j in range(shape.cols)],
        }
        global_axes = {name: [[members[r] for r in g] for g in gs] for name, gs in axes.items()}
        groups = {name: _groups(gs, me) for name, gs in global_axes.items()}
        col = groups["col"]
        if col_lanes > 1 and shape.rows > 1:  # every rank of the job creates them
            extra = [[_group_handle(tuple(g), lane) for g in global_axes["col"]]
                     for lane in range(1, col_lanes)]
            if me in members:
                mine = global_axes["col"].index(list(col.ranks))
                col = replace(col, lanes=(col.handle, *(handles[mine] for handles in extra)))
        if me not in members:
            return None
        return cls(shape, members.index(me), groups["row"], col, groups["fiber"])


# Process groups by member list, shared by every grid of the job: creating a group costs
# a rendezvous of the whole job, and grids created in the same order on every rank hit
# the cache identically. Cleared when the job's default group changes.
_GROUP_CACHE: dict[tuple[tuple[int, ...], int], Any] = {}
_CACHE_OWNER: list[Any] = [None]


# The collective timeout of the job, for groups created after joining it: a group made
# without one waits gloo's default 30 minutes on a lost peer instead of ``--timeout``.
_TIMEOUT = [timedelta(seconds=60.0)]


def set_group_timeout(seconds: float) -> None:
    _TIMEOUT[0] = timedelta(seconds=seconds)


def new_group(ranks: list[int]) -> Any:
    """A process group of ``ranks`` (collective over the job) with the job's timeout."""
    return dist.new_group(ranks, timeout=_TIMEOUT[0])


def _group_handle(ranks: tuple[int, ...], lane: int = 0) -> Any:
    default = dist.group.WORLD
    if _CACHE_OWNER[0] is not default:
        _GROUP_CACHE.clear()
        _CACHE_OWNER[0] = default
    if (ranks, lane) not in _GROUP_CACHE:
        _GROUP_CACHE[ranks, lane] = new_group(list(ranks))
    return _GROUP_CACHE[ranks, lane]


def _groups(members: list[list[int]], me: int) -> Group:
    """Create all groups of one axis; return the one holding ``me``."""
    mine = Group((me,), 0)
    for ranks in members:
        handle = _group_handle(tuple(ranks)) if len(ranks) > 1 else None
        if me in ranks:
            mine = Group(tuple(ranks), ranks.index(me), handle)
    return mine


class Communicator:
    """The collectives of the algorithms, each counting bytes under the current phase."""

    def __init__(self) -> None:
        self._counts: defaultdict[str, defaultdict[str, int]] = defaultdict(
            lambda: defaultdict(int)
        )
        self._phase = "setup"
        # Seconds this rank spent blocked on communication, by phase: inside blocking
        # collectives, and waiting on asynchronous ones (the part of their time that
        # computation did not hide). Overlapped and plain runs thus compare phase by phase.
        self._waited: defaultdict[str, float] = defaultdict(float)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Attribute the collectives inside the block to ``name``."""
        previous, self._phase = self._phase, name
        try:
            yield
        finally:
            self._phase = previous

    def counts(self) -> ByteCounts:
        """A copy of what was counted so far, by phase."""
        return ByteCounts({p: dict(c) for p, c in self._counts.items()})

    def waited_seconds(self) -> dict[str, float]:
        """Seconds blocked in collectives and in :meth:`wait`, by phase."""
        return dict(self._waited)

    @contextmanager
    def blocked(self) -> Iterator[None]:
        """Time the block as communication this rank waited for (a blocking call)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self._waited[self._phase] += time.perf_counter() - start

    def _count(self, collective: str, sent: int, recv: int) -> None:
        c = self._counts[self._phase]
        c["sent"] += sent
        c["recv"] += recv
        c[f"{collective}_sent"] += sent
        c[f"{collective}_recv"] += recv

    # ------------------------------------------------------------------ collectives
    def broadcast(self, tensor: torch.Tensor, root: int, group: Group) -> torch.Tensor:
        """Fill ``tensor`` on every member with the values of member ``root``."""
        if group.size == 1 or tensor.numel() == 0:
            return tensor
        nbytes = tensor.numel() * tensor.element_size()
        with self.blocked():
            dist.broadcast(tensor, src=group.ranks[root], group=group.handle)
        if group.me == root:
            self._count("broadcast", nbytes * (group.size - 1), 0)
        else:
            self._count("broadcast", 0, nbytes)
        return tensor

    def broadcast_async(self, tensor: torch.Tensor, root: int, group: Group) -> Any:
        """Start filling ``tensor`` from member ``root``; :meth:`wait` on the handle before
        reading it. Counted now, like :meth:`broadcast`; ``None`` when nothing moves."""
        if group.size == 1 or tensor.numel() == 0:
            return None
        nbytes = tensor.numel() * tensor.element_size()
        work = dist.broadcast(tensor, src=group.ranks[root], group=group.handle, async_op=True)
        if group.me == root:
            self._count("broadcast", nbytes * (group.size - 1), 0)
        else:
            self._count("broadcast", 0, nbytes)
        return work

    def wait(self, work: Any) -> None:
        """Block until an asynchronous collective is done, timing what was not hidden."""
        if work is None:
            return
        with self.blocked():
            work.wait()

    def broadcast_sparse(
        self, tile: CSRMatrix | None, shape: tuple[int, int], nnz: int, root: int,
        group: Group, dtype: torch.dtype, device: torch.device,
    ) -> CSRMatrix:
        """Broadcast a CSR tile: int64 ``crow`` + ``col`` in one message, values in another.

        Indices never pass through a float tensor, so ids beyond 2**24 stay exact.
        """
        if tile is not None:
            index = torch.cat([tile.crow, tile.col])
            val = tile.val.contiguous()
        else:
            index = torch.empty(shape[0] + 1 + nnz, dtype=torch.long, device=device)
            val = torch.empty(nnz, dtype=dtype, device=device)
        self.broadcast(index, root, group)
        self.broadcast(val, root, group)
        if tile is not None:
            return tile
        crow, col = index[: shape[0] + 1], index[shape[0] + 1:]
        return CSRMatrix(crow, col, val, shape)

    def all_gather(
        self, piece: torch.Tensor, shapes: list[tuple[int, ...]], group: Group
    ) -> list[torch.Tensor]:
        """Every member's piece (shapes known to all), one broadcast per member."""
        out = []
        for k, shape in enumerate(shapes):
            buf = piece if k == group.me else piece.new_empty(shape)
            out.append(self.broadcast(buf, k, group))
        return out

    def all_reduce(self, tensor: torch.Tensor, group: Group) -> torch.Tensor:
        """Sum over the group, identical on every member (gather, then sum in rank order)."""
        return self.all_reduce_async(tensor, group)()

    def all_reduce_async(self, tensor: torch.Tensor, group: Group
                         ) -> Callable[[], torch.Tensor]:
        """:meth:`all_reduce` started; the returned function waits (timing what was not
        hidden) and returns the sum. Counted now. Because every member sums the gathered
        parts itself in rank order, each element's sum is the same whether the tensor is
        reduced whole or in column slices, which lets an overlapped product reduce each
        slice as soon as it is done."""
        if group.size == 1 or tensor.numel() == 0:
            return lambda: tensor
        flat = tensor.contiguous().reshape(-1)
        parts = [torch.empty_like(flat) for _ in range(group.size)]
        work = dist.all_gather(parts, flat, group=group.handle, async_op=True)
        nbytes = flat.numel() * flat.element_size() * (group.size - 1)
        self._count("all_reduce", nbytes, nbytes)

        def finish() -> torch.Tensor:
            self.wait(work)
            total = parts[0]  # a buffer of our own: summing into it keeps one copy fewer
            for part in parts[1:]:
                total += part
            return total.reshape(tensor.shape)
        return finish

    def gather_ints(self, values: list[int], group: Group) -> list[list[int]]:
        """Small setup metadata (tile nnz) from every member, in group order."""
        t = torch.tensor(values, dtype=torch.long)
        if group.size == 1:
            return [values]
        backend_device = _collective_device(group)
        t = t.to(backend_device)
        parts = [torch.empty_like(t) for _ in range(group.size)]
        dist.all_gather(parts, t, group=group.handle)
        nbytes = t.numel() * t.element_size() * (group.size - 1)
        self._count("all_gather", nbytes, nbytes)
        return [p.cpu().tolist() for p in parts]


def _collective_device(group: Group) -> torch.device:
    """NCCL only moves CUDA tensors; gloo takes CPU tensors."""
    backend = dist.get_backend(group.handle)
    if backend == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
