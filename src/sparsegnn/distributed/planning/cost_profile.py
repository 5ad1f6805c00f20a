"""What a machine costs, as the cost model reads it: a :class:`Profile` and its file.

A :class:`Profile` says what this machine (or a cluster one plans for) costs: a local
SpMM per stored nonzero and feature column and per output row and column, a dense
matmul per multiply-add, an elementwise pass per value, per collective a latency and a
time per byte at the busiest rank (:class:`LinkCost`), the attention models' kernels
per value (:data:`ATTENTION_KERNELS`; a profile without them falls back on the SpMM
rate and says so), the overheads the calibration fits on real epochs, and a rank's base
memory (``sparsegnn calibrate`` measures them; a
profile can also be written by hand). It is apart from :mod:`sparsegnn.distributed.planning.cost`,
which prices an epoch at these rates, because it is the record both sides share: the
calibration writes it, the cost and memory models and the automatic choice read it, and
its JSON file (every field checked, a hand-written one being the usual case) is a format
of its own.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sparsegnn.errors import DataFormatError

COLLECTIVES = ("broadcast", "all_reduce", "all_gather", "all_to_all")
PROFILE_FORMAT = 1
# The attention models' kernels a profile prices (``Profile.attention_s``), each per
# value: the additive SDDMM, the edge softmax and the attention dropout (a Bernoulli
# mask drawn per edge and head) per edge and head, GATv2's LeakyReLU SDDMM and the
# multi-head SpMM with autograd values per edge, head and channel, and the ELU between
# the layers per value.
ATTENTION_KERNELS = ("sddmm_add", "sddmm_leaky", "edge_softmax", "heads_spmm",
                     "edge_dropout", "elu")
# Where a profile has no attention rates (written before `calibrate` measured them): a
# kernel's forward priced as one SpMM nonzero-column (the dropout as a dropout value, the
# ELU as an activation's), its forward and backward as three.
FALLBACK_TRAIN_FACTOR = 3.0


@dataclass(frozen=True)
class LinkCost:
    """One collective: seconds per call and seconds per byte at the busiest rank."""

    latency_s: float
    seconds_per_byte: float

    def time(self, calls: int, nbytes: float, latency_scale: float = 1.0) -> float:
        return calls * self.latency_s * latency_scale + nbytes * self.seconds_per_byte


@dataclass
class Profile:
    """What a machine costs (see the module docstring); JSON-serialisable, hand-writable.

    ``spmm_nnz_s`` maps a feature width to seconds per nonzero and column; widths in
    between are interpolated on a log scale, outside clamped to the nearest.
    """

    backend: str
    world_size: int
    spmm_nnz_s: dict[int, float]
    spmm_row_s: float
    gemm_s: float
    elementwise_s: float
    collectives: dict[str, LinkCost]
    notes: dict[str, Any] = field(default_factory=dict)
    # What a rank's resident set grows by beyond its data: communication buffers, kernel
    # workspaces, allocator slack (the calibration job's own growth).
    rank_overhead_bytes: int = 0
    # A rank's resident set before it holds any data (interpreter, torch, the backend's
    # buffers): part of every rank's peak, which a memory limit caps.
    rank_base_bytes: int = 0
    # Hosts the ranks are spread over (torchrun's WORLD_SIZE / LOCAL_WORLD_SIZE): how
    # many groups' broadcasts can use separate links at the same time.
    hosts: int = 1
    # Seconds per value of a dropout mask drawn and applied (random numbers cost far
    # more than an activation's pass: counted apart).
    dropout_s: float = 0.0
    # Broadcasts as the algorithms' stages make them, per group size: (bytes a call's
    # root sends, seconds per call) pairs (calibrate.measure_broadcast_rounds); empty
    # where not measured (one host: the collectives' straight lines price those).
    broadcast_rounds: dict[int, list[tuple[float, float]]] = field(default_factory=dict)
    # How many times longer a rank computes while every rank of its host computes than
    # alone (calibrate.measure_core_sharing; 1: a core per rank). The rates above are
    # measured with all ranks at once, so they are the shared speed.
    core_sharing: float = 1.0
    # What the terms above miss, fitted on real epochs: per epoch, per collective call
    # and per value of the busiest rank's rows (rows x the layers' output widths).
    epoch_overhead_s: float = 0.0
    call_overhead_s: float = 0.0
    row_overhead_s: float = 0.0
    # What they miss of an attention model's epoch beyond that, per call of its edge
    # protocol (kernels between autograd functions, the fetches' gathers and sums),
    # fitted on real GAT epochs (0 in profiles written before it was).
    edge_call_overhead_s: float = 0.0
    # What an R-GCN epoch costs per collective call of its relations' SpMMs, in place of
    # ``call_overhead_s`` (fitted on GCN epochs, whose calls come with a layer's Python
    # each; an R-GCN layer makes R products for one), fitted on real R-GCN epochs; None
    # in profiles written before it was (then ``call_overhead_s`` prices them).
    relation_call_overhead_s: float | None = None
    # Seconds per value of each attention kernel (:data:`ATTENTION_KERNELS`): points
    # ``(rows, forward, forward and backward)``, measured by `calibrate` on graphs of
    # ``rows`` vertices (a kernel gathering from rows that fit the caches costs a third
    # of one that misses them); empty in profiles written before it measured them (then
    # :meth:`kernel_time` falls back on the other rates).
    attention_s: dict[str, list[tuple[float, float, float]]] = field(default_factory=dict)

    @property
    def attention_rates_measured(self) -> bool:
        """Whether every attention kernel's rate was measured (else the fallback)."""
        return all(k in self.attention_s for k in ATTENTION_KERNELS)

    def attention_rates_source(self) -> str:
        """How the attention kernels are priced: measured, or the fallback and the way out."""
        if self.attention_rates_measured:
            return "measured"
        return ("estimated from the SpMM rate: this profile has no attention kernel rates "
                "(calibrated before `sparsegnn calibrate` measured them); run it again")

    def kernel_time(self, kernel: str, values: float, backward: bool,
                    rows: float = 0.0) -> float:
        """Seconds of attention kernel ``kernel`` over ``values`` values, its backward
        included where ``backward``, gathering from ``rows`` rows: the rate measured
        nearest, linear in log(rows) between measured sizes; from the other rates where
        the profile has no measured one (:data:`FALLBACK_TRAIN_FACTOR`)."""
        points = sorted(self.attention_s.get(kernel) or [])
        column = 2 if backward else 1
        if not points:
            forward = {"edge_dropout": self.dropout_s,
                       "elu": self.elementwise_s}.get(kernel, self._per_nnz(1))
            return values * forward * (FALLBACK_TRAIN_FACTOR if backward else 1.0)
        sizes = [math.log(max(p[0], 1.0)) for p in points]
        rate = np.interp(math.log(max(rows, 1.0)), sizes, [p[column] for p in points])
        return values * float(rate)

    def overhead(self, calls: int, row_values: int, edge_calls: int = 0) -> float:
        return (self.epoch_overhead_s + calls * self.call_overhead_s
                + row_values * self.row_overhead_s + edge_calls * self.edge_call_overhead_s)

    def spmm_time(self, nnz: float, rows: float, width: int, products: int = 1) -> float:
        """An SpMM of ``nnz`` nonzeros into ``rows`` output rows, made of ``products``
        tile products that each write all the rows and are added up (an elementwise
        pass each beyond the first)."""
        return (nnz * width * self._per_nnz(width)
                + products * rows * width * self.spmm_row_s
                + (products - 1) * rows * width * self.elementwise_s)

    def _per_nnz(self, width: int) -> float:
        widths = sorted(self.spmm_nnz_s)
        if width <= widths[0]:
            return self.spmm_nnz_s[widths[0]]
        if width >= widths[-1]:
            return self.spmm_nnz_s[widths[-1]]
        hi = next(w for w in widths if w >= width)
        lo = widths[widths.index(hi) - 1]
        t = (math.log(width) - math.log(lo)) / (math.log(hi) - math.log(lo))
        return (1 - t) * self.spmm_nnz_s[lo] + t * self.spmm_nnz_s[hi]

    def link(self, collective: str) -> LinkCost:
        return self.collectives.get(collective) or self.collectives["broadcast"]

    def broadcast_call_s(self, group: int, nbytes: float) -> float | None:
        """Seconds of one stage broadcast in a group of ``group`` ranks whose root sends
        ``nbytes``, from the measured rounds (None: none for that group size). Linear
        between measured sizes, the smallest's time below them (latency-bound), the last
        segment's slope beyond them."""
        points = sorted(self.broadcast_rounds.get(group) or [])
        if not points:
            return None
        sizes = [b for b, _ in points]
        # A larger message never costs less: noise in the small, latency-bound sizes
        # (a 16 KiB round measured slower than a 64 KiB one) is not a price.
        times = np.maximum.accumulate([t for _, t in points]).tolist()
        if nbytes <= sizes[-1] or len(points) == 1:
            return float(np.interp(nbytes, sizes, times))
        slope = (times[-1] - times[-2]) / max(sizes[-1] - sizes[-2], 1e-30)
        return times[-1] + (nbytes - sizes[-1]) * max(slope, 0.0)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["format"] = PROFILE_FORMAT
        out["spmm_nnz_s"] = {str(k): v for k, v in self.spmm_nnz_s.items()}
        out["broadcast_rounds"] = {str(g): [list(pt) for pt in pts]
                                   for g, pts in self.broadcast_rounds.items()}
        return out

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=1))
        return path

    @classmethod
    def load(cls, path: str | Path) -> Profile:
        """A profile file, every field checked (a hand-written one is the usual case)."""
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as err:
            raise DataFormatError(f"{path}: cannot read the profile: {err}") from err
        try:
            return cls.from_dict(raw)
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise DataFormatError(
                f"{path}: not a sparsegnn profile ({err!r:.120}); write one with "
                "`sparsegnn calibrate --out FILE`") from err

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Profile:
        if raw.get("format") != PROFILE_FORMAT:
            raise ValueError(f"format {raw.get('format')!r}, expected {PROFILE_FORMAT}")

        def seconds(value: Any, what: str) -> float:
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not math.isfinite(value) or value < 0:
                raise ValueError(f"{what} must be a finite number >= 0, got {value!r:.40}")
            return float(value)

        spmm = {int(k): seconds(v, f"spmm_nnz_s[{k}]") for k, v in raw["spmm_nnz_s"].items()}
        if not spmm or min(spmm) < 1:
            raise ValueError("spmm_nnz_s needs at least one width >= 1")
        links = {name: LinkCost(seconds(c["latency_s"], f"{name} latency_s"),
                                seconds(c["seconds_per_byte"], f"{name} seconds_per_byte"))
                 for name, c in raw["collectives"].items() if name in COLLECTIVES}
        if "broadcast" not in links:
            raise ValueError("collectives needs at least broadcast")
        world = raw["world_size"]
        if type(world) is not int or world < 1:
            raise ValueError(f"world_size must be an integer >= 1, got {world!r:.40}")
        optional = {key: seconds(raw.get(key, 0.0), key)
                    for key in ("dropout_s", "epoch_overhead_s", "call_overhead_s",
                                "row_overhead_s", "edge_call_overhead_s")}
        rounds = {}
        for key, pts in (raw.get("broadcast_rounds") or {}).items():
            group = int(key)
            if group < 2 or not pts:
                raise ValueError(f"broadcast_rounds[{key}]: a group of >= 2 ranks with "
                                 "at least one [bytes, seconds] point")
            rounds[group] = [(seconds(b, f"broadcast_rounds[{key}] bytes"),
                              seconds(t, f"broadcast_rounds[{key}] seconds"))
                             for b, t in pts]
        kernels = {}
        for key, points in (raw.get("attention_s") or {}).items():
            if key not in ATTENTION_KERNELS or not points \
                    or any(len(point) != 3 for point in points):
                raise ValueError(f"attention_s[{key!r:.40}]: one of "
                                 f"{', '.join(ATTENTION_KERNELS)} with [rows, forward, "
                                 "forward and backward seconds per value] points")
            kernels[key] = [(seconds(rows, f"attention_s[{key}]"),
                             seconds(forward, f"attention_s[{key}]"),
                             seconds(train, f"attention_s[{key}]"))
                            for rows, forward, train in points]
        return cls(str(raw["backend"]), world, spmm, seconds(raw["spmm_row_s"], "spmm_row_s"),
                   seconds(raw["gemm_s"], "gemm_s"),
                   seconds(raw["elementwise_s"], "elementwise_s"), links,
                   dict(raw.get("notes") or {}),
                   int(seconds(raw.get("rank_overhead_bytes", 0), "rank_overhead_bytes")),
                   int(seconds(raw.get("rank_base_bytes", 0), "rank_base_bytes")),
                   max(1, int(seconds(raw.get("hosts", 1), "hosts"))),
                   broadcast_rounds=rounds,
                   core_sharing=max(1.0, seconds(raw.get("core_sharing", 1.0), "core_sharing")),
                   attention_s=kernels, **optional,
                   relation_call_overhead_s=None if raw.get("relation_call_overhead_s") is None
                   else seconds(raw["relation_call_overhead_s"], "relation_call_overhead_s"))
