"""Which CPUs each local rank runs on.

:func:`~sparsegnn.distributed.runtime.launch.spawn` binds the ranks it starts, and
:func:`~sparsegnn.distributed.runtime.session.init_session` binds a torchrun worker that nothing
else has bound, both by :func:`rank_cpus` (docs/distributed.md, "Where local ranks run").
"""

from __future__ import annotations

import os
from pathlib import Path

# Set to 0 to leave local ranks unbound (for a launcher that binds them itself).
BIND_ENV = "SPARSEGNN_BIND_RANKS"


def rank_cpus(nprocs: int, allowed: set[int] | None = None) -> list[set[int]] | None:
    """The CPUs each of ``nprocs`` local ranks is bound to, or ``None`` to leave them be.

    Why bind: left to the scheduler, ranks migrate between CPUs mid-epoch and lose their
    caches, and which ranks happen to share a CPU changes from run to run. Measured on
    this project's 2-vCPU machine (GCN, R-MAT with 16,384 vertices, 1D sparse): 4 ranks
    took 37-40 ms per epoch unbound and 28-29 ms bound, 8 ranks 74-77 ms and 54 ms, and
    a run's median epoch scattered half as much (as MPI launchers bind by default). With
    more ranks than CPUs, rank r gets CPU r mod n; with fewer, each an equal disjoint
    share, of whole cores where hyperthreads share one. ``allowed`` (default: this
    process's own CPUs) is respected, so an outer ``taskset`` or batch system's binding
    still holds. Off with ``SPARSEGNN_BIND_RANKS=0`` or where the platform cannot bind; a
    single rank keeps every CPU."""
    if nprocs < 2 or os.environ.get(BIND_ENV, "1") == "0":
        return None
    if allowed is None:
        if not hasattr(os, "sched_getaffinity"):
            return None
        allowed = os.sched_getaffinity(0)
    if len(allowed) < 2:
        return None
    # Hyperthread siblings share a core's caches: a share of several CPUs is whole cores
    # (siblings side by side); one CPU per rank fills every core's first thread first.
    cores = {c: _core_of(c) for c in allowed}
    share = len(allowed) // nprocs
    if share <= 1:
        siblings: dict[tuple[int, int], list[int]] = {}
        for c in sorted(allowed):
            siblings.setdefault(cores[c], []).append(c)
        thread = {c: i for group in siblings.values() for i, c in enumerate(group)}
        spread = sorted(allowed, key=lambda c: (thread[c], cores[c], c))
        return [{spread[r % len(spread)]} for r in range(nprocs)]
    packed = sorted(allowed, key=lambda c: (cores[c], c))
    return [set(packed[r * share:(r + 1) * share]) for r in range(nprocs)]


def _core_of(cpu: int) -> tuple[int, int]:
    """(package, core) of a logical CPU from Linux sysfs; the CPU itself where unknown."""
    topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
    try:
        return (int((topology / "physical_package_id").read_text()),
                int((topology / "core_id").read_text()))
    except (OSError, ValueError):
        return (0, cpu)


def bind_torchrun_worker(local_rank: int, local_world: int) -> None:
    """Bind this torchrun worker as :func:`rank_cpus` binds local rank ``local_rank`` of
    ``local_world`` on its host, unless it is already bound to fewer than all the host's
    CPUs (by ``taskset``, a batch system, or :func:`~sparsegnn.distributed.runtime.launch.spawn`),
    whose choice stands."""
    if not hasattr(os, "sched_getaffinity"):
        return
    allowed = os.sched_getaffinity(0)
    if len(allowed) != os.cpu_count():
        return
    cpus = rank_cpus(local_world, allowed)
    if cpus is not None:
        os.sched_setaffinity(0, cpus[local_rank % local_world])
