"""Checkpoints of distributed full-graph runs: a folder per saved epoch, one shard per
rank, a manifest written last; resume onto the same or another grid.

Layout of ``--checkpoint CKPT``::

    CKPT/epoch-000010/rank0.pt ... rank{p-1}.pt   each rank's state (checkpoint.py format)
    CKPT/epoch-000010/manifest.json               written last, by grid rank 0

p files cannot be replaced atomically together, hence the manifest. Each rank writes its
shard atomically (temp file, fsync, rename); the grid then gathers every rank's
acknowledgement (bytes, sha256 of the file, hash of its model and optimiser state), and
rank 0 writes the manifest atomically: epoch, fingerprint, layout (world size, algorithm,
grid, replication, partition, dropout masks) and every shard with its size and sha256.
A checkpoint is *complete* only when its manifest exists and every shard it names is on
disk with the recorded size and sha256; a rank killed mid-save leaves a folder without a
manifest (or with files that no longer match it), which resume skips with a warning, and
the previous complete checkpoint is still there: the last two complete ones are kept,
older folders are deleted only after a newer manifest has landed.

Full-graph GCN/SAGE keep the model parameters, Adam's moments and the loop state
identically on every rank (weight gradients are all-reduced; loss and accuracy are
reduced over the grid), and rank 0 refuses to write a manifest if the ranks' copies
differ. So resuming on another world size or algorithm loads rank 0's shard on every
rank; only the RNG streams depend on the grid: with the graph in memory every rank draws
the whole graph's dropout mask from one stream shared by all ranks (rank 0's continues
it exactly), while with per-block masks (partitioned folders) a new grid's blocks hold
other vertices, so their streams are re-derived from ``(seed, block, epoch)``. On the
same layout each rank reads its own shard and continues bit-identically. See
docs/distributed.md, "Checkpoints and resume".
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparsegnn.data.io import atomic_write
from sparsegnn.distributed import Communicator, ProcessGrid
from sparsegnn.errors import DataFormatError, InvalidValueError, SparseGNNError
from sparsegnn.train.checkpoint import (
    Fingerprint,
    content_hash,
    load_checkpoint,
    require_fingerprint,
    rng_state,
    save_checkpoint,
    seed_everything,
)
from sparsegnn.train.run_lock import RunLock

FORMAT = "sparsegnn-distributed-checkpoint"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
KEEP = 2  # complete checkpoints kept: the newest, and one to fall back on while it is written
_EPOCH_DIR = re.compile(r"epoch-(\d{6,})")
# What a save writes into an epoch folder (shards, manifest, their atomic_write temp files):
# only these are ever deleted, so a folder that also holds someone else's file survives.
_OURS = re.compile(r"rank\d+\.pt|manifest\.json|\.(rank\d+\.pt|manifest\.json)\..+\.tmp")
_TEMP = re.compile(r"\.(rank\d+\.pt|manifest\.json)\..+\.tmp")
# What a manifest's layout names (train/distributed.py builds it); resume reports it.
LAYOUT_KEYS = frozenset({"world_size", "algo", "grid", "replication", "partition",
                         "dropout_masks"})
_HASH_INTS = 4  # a sha256 as four signed int64, the unit Communicator.gather_ints moves


class IncompleteCheckpoint(SparseGNNError):
    """A checkpoint folder that is not complete: no manifest, or shards that do not
    match it (a save that was killed, a file changed since)."""


class NothingToResume(DataFormatError):
    """``--resume`` on a folder with saved epochs none of which can be restored."""


def epoch_folder(root: Path, epoch: int) -> Path:
    return root / f"epoch-{epoch:06d}"


def shard_name(rank: int) -> str:
    return f"rank{rank}.pt"


def epoch_folders(root: Path) -> list[tuple[int, Path]]:
    """The ``epoch-NNNNNN`` folders under ``root``, oldest first."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir()
             if p.is_dir() and (m := _EPOCH_DIR.fullmatch(p.name))]
    return sorted(found)


def remove_killed_saves(root: Path) -> None:
    """Delete the shard and manifest temp files under ``root``'s epoch folders, and the
    folders then empty: what a failed or stopped save leaves (a rank's ``atomic_write``
    removes its temp file when it can unwind; a rank killed after the stop grace cannot).
    Only while no rank of a run on ``root`` is saving: at a run's start (rank 0, holding
    the folder's lock) and after a spawned run has failed and every rank is gone."""
    for _, folder in epoch_folders(root):
        for stale in folder.iterdir():
            if _TEMP.fullmatch(stale.name):
                stale.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # only an empty folder goes
            folder.rmdir()


def is_checkpoint_folder(path: Path) -> bool:
    """Whether ``path`` holds checkpoints of a distributed run (at least one epoch folder)."""
    return bool(epoch_folders(path))


def check_folder(path: Path) -> None:
    """Refuse, before any rank trains, a ``--checkpoint`` that cannot be a folder."""
    if path.exists() and not path.is_dir():
        raise InvalidValueError(
            f"checkpoint {path} is a file; a run on ranks keeps its checkpoints in a folder "
            "(one sub-folder per saved epoch): name a new folder"
        )


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# ---------------------------------------------------------------------- what is on disk
@dataclass(frozen=True)
class EpochCheck:
    """One saved epoch as found on disk: its manifest (``None``: none usable), why the
    folder cannot be used at all (``problem``), and why each unusable shard is so.

    An epoch is *complete* when every shard its manifest names is intact, *restorable*
    when at least one is: the model, optimiser and loop state are identical on every rank
    (the manifest's ``replicated_sha256`` vouches for it), so any intact shard rebuilds
    them, and the ranks whose shard is lost take the RNG streams of a rank that draws the
    same ones (every rank with shared dropout masks, a block's replicas with per-block
    masks), or re-derive them per block when no such shard survived.
    """

    epoch: int
    folder: Path
    manifest: dict[str, Any] | None
    problem: str | None = None
    damaged: dict[int, str] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return self.problem is None and not self.damaged

    @property
    def restorable(self) -> bool:
        return self.problem is None


def check_epoch(folder: Path, epoch: int) -> EpochCheck:
    """Read ``folder``'s manifest and check every shard it names against it."""
    path = folder / MANIFEST
    if not path.is_file():
        return EpochCheck(epoch, folder, None, "no manifest.json (its save did not finish)")
    try:
        manifest = json.loads(path.read_text())
        shards = _shard_entries(manifest, epoch)
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as err:
        return EpochCheck(epoch, folder, None,
                          f"manifest.json is unreadable or malformed ({err})")
    damaged = {rank: why for rank, entry in enumerate(shards)
               if (why := shard_problem(folder, rank, entry)) is not None}
    problem = None
    if len(damaged) == len(shards):
        problem = "no intact shard (" + "; ".join(damaged.values()) + ")"
    return EpochCheck(epoch, folder, manifest, problem, damaged)


def shard_problem(folder: Path, rank: int, entry: tuple[int, str]) -> str | None:
    """Why rank ``rank``'s shard does not match its manifest ``entry``; ``None``: intact."""
    shard = folder / shard_name(rank)
    if not shard.is_file():
        return f"{shard.name} is missing"
    size, sha256 = entry
    found = shard.stat().st_size
    if found != size:
        return f"{shard.name} has {found} bytes, the manifest records {size}"
    if file_sha256(shard) != sha256:
        return f"{shard.name} does not match its sha256 in the manifest"
    return None


def verify(folder: Path, epoch: int) -> dict[str, Any]:
    """The manifest of a complete checkpoint folder, else :class:`IncompleteCheckpoint`
    saying why."""
    check = check_epoch(folder, epoch)
    if check.manifest is None or not check.complete:
        raise IncompleteCheckpoint(_why(check))
    return check.manifest


def _shard_entries(manifest: Any, epoch: int) -> list[tuple[int, str]]:
    """``(bytes, sha256)`` of each rank's shard, once the manifest is checked to be one of
    ``epoch`` with a fingerprint, a layout and exactly the shards of ranks 0..p-1."""
    if manifest.get("format") != FORMAT or manifest.get("version") != FORMAT_VERSION:
        raise ValueError(f"not a version {FORMAT_VERSION} {FORMAT} manifest")
    if manifest["epoch"] != epoch:
        raise ValueError(f"it records epoch {manifest['epoch']}")
    if not isinstance(manifest["fingerprint"], dict) or set(manifest["layout"]) != LAYOUT_KEYS:
        raise ValueError("no fingerprint or layout")
    shards = manifest["shards"]
    expected = [shard_name(r) for r in range(int(manifest["layout"]["world_size"]))]
    if [s["file"] for s in shards] != expected:
        raise ValueError("it does not name one shard per rank")
    return [(int(s["bytes"]), str(s["sha256"])) for s in shards]


def latest_complete(root: Path) -> tuple[int | None, list[str]]:
    """The newest complete checkpoint's epoch (``None``: none) and a warning line for each
    newer folder skipped as incomplete."""
    skipped = []
    for epoch, folder in reversed(epoch_folders(root)):
        check = check_epoch(folder, epoch)
        if check.complete:
            return epoch, skipped
        skipped.append(_skip_note(check))
    return None, skipped


def newest_restorable(root: Path) -> tuple[EpochCheck | None, list[str]]:
    """The newest epoch that can be restored and a warning line for each newer folder
    skipped and each of its lost shards; ``None`` when ``root`` holds no epoch folder.

    Raises :class:`NothingToResume`, naming every folder and what is wrong with it, when
    there are epoch folders but none can be restored: starting again at epoch 0 would
    silently throw their progress away.
    """
    skipped: list[EpochCheck] = []
    for epoch, folder in reversed(epoch_folders(root)):
        check = check_epoch(folder, epoch)
        if check.restorable:
            lost = [f"checkpoint {folder}: {why}; that rank is rebuilt from an intact shard"
                    for why in check.damaged.values()]
            return check, [*map(_skip_note, skipped), *lost]
        skipped.append(check)
    if skipped:
        raise NothingToResume(
            f"checkpoint {root} holds no epoch that can be restored: "
            + "; ".join(f"{c.folder.name}: {_why(c)}" for c in skipped)
            + "; nothing was changed (--restart trains from epoch 0 and deletes these "
            "folders once its first checkpoint is saved)")
    return None, []


def _why(check: EpochCheck) -> str:
    return check.problem or "; ".join(check.damaged.values())


def _skip_note(check: EpochCheck) -> str:
    return f"checkpoint {check.folder} is incomplete: {_why(check)}; skipped"


# ---------------------------------------------------------------------- the grid's acks
def gather_grid(comm: Communicator, grid: ProcessGrid, values: list[int]) -> list[list[int]]:
    """Every grid rank's ``values`` (equal lengths), in grid-rank order, on every rank.

    Gathered along the fiber, then the row, then the column: the grid may be part of a
    larger job (tests and benchmarks run several grids in one launch), so a job-wide
    collective would wait for ranks outside it. Rank ``(i, j, k)`` is
    ``(i * cols + j) * layers + k``, exactly the nesting of the three gathers.
    """
    flat = values
    for group in (grid.fiber, grid.row, grid.col):
        flat = [v for part in comm.gather_ints(flat, group) for v in part]
    n = len(values)
    return [flat[r * n:(r + 1) * n] for r in range(grid.shape.size)]


def _ints(hexdigest: str) -> list[int]:
    raw = bytes.fromhex(hexdigest)
    return [int.from_bytes(raw[i:i + 8], "big", signed=True) for i in range(0, len(raw), 8)]


def _hex(values: list[int]) -> str:
    return b"".join(v.to_bytes(8, "big", signed=True) for v in values).hex()


# ---------------------------------------------------------------------- resume report
def describe_layout(layout: dict[str, Any], counted: bool = False) -> str:
    """``4-rank 2d`` (``4-rank 1.5d c=2``), or ``4 ranks 2d`` when ``counted``."""
    n = layout["world_size"]
    ranks = f"{n} rank{'' if n == 1 else 's'}" if counted else f"{n}-rank"
    c = f" c={layout['replication']}" if layout["algo"] == "1.5d" else ""
    return f"{ranks} {layout['algo']}{c}"


@dataclass
class Resumed:
    """Where a distributed run resumed from, for its report (``resumed_from`` in JSON)."""

    epoch: int
    folder: str
    written: dict[str, Any]  # the checkpoint's layout
    onto: dict[str, Any]  # this run's
    rng: str  # "restored" (its own streams), "shared" (another rank's) or "re-derived"
    source: int = 0  # the rank whose shard it read (its own unless it was lost)

    def describe(self) -> str:
        """``resumed epoch 10 from a 4-rank 2d checkpoint onto 2 ranks 1d``."""
        head = f"resumed epoch {self.epoch} from a {describe_layout(self.written)} checkpoint"
        if self.written == self.onto:
            return f"{head} (same layout)"
        note = "; dropout streams re-derived per vertex block" if self.rng == "re-derived" else ""
        return f"{head} onto {describe_layout(self.onto, counted=True)}{note}"


# ---------------------------------------------------------------------- the store
@dataclass
class DistributedStore:
    """The :class:`~sparsegnn.train.loop.CheckpointStore` of one rank of a grid.

    ``identity`` must match to resume (graph, model, dtype); ``layout`` is recorded and may
    differ. ``block`` is this rank's vertex block when its dropout stream is per block
    (``None``: one stream shared by every rank), ``seed`` the run's seed, both needed to
    re-derive a block's stream on another layout. A folder that holds saved epochs is
    only used with ``resume`` (continue it) or ``restart`` (train from epoch 0; its old
    epochs are deleted once this run's first checkpoint has landed): without either, a
    second run would silently bury the first one's progress.
    """

    root: Path
    grid: ProcessGrid
    identity: Fingerprint
    layout: dict[str, Any]
    seed: int
    block: int | None
    resume: bool = False
    restart: bool = False
    resumed: Resumed | None = None
    skipped: list[str] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)  # complete epochs of this run, oldest first
    # A communicator of its own: checkpoint acknowledgements are no epoch's traffic.
    comm: Communicator = field(default_factory=Communicator)
    lock: RunLock | None = None

    def describe(self) -> str:
        return f"checkpoint {self.root}"

    def prepare(self) -> None:
        """Rank 0: refuse a file, a folder another run holds and a folder of saved epochs
        without --resume or --restart; delete temp files of saves that were killed."""
        if self.grid.rank != 0:
            return
        check_folder(self.root)
        self.lock = RunLock(self.root, folder=True)
        self.lock.acquire()
        saved = epoch_folders(self.root)
        if saved and not (self.resume or self.restart):
            self.close()
            raise InvalidValueError(
                f"checkpoint {self.root} holds saved epochs (the newest {saved[-1][1].name}): "
                "add --resume to continue from them, or --restart to train from epoch 0 "
                "(its epoch folders are deleted once this run's first checkpoint is saved)")
        remove_killed_saves(self.root)

    def close(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def load(self) -> dict[str, Any] | None:
        """Rank 0 picks the newest restorable checkpoint (every rank then reads its
        choice); each rank loads its own shard on the same layout when it is intact,
        else an intact shard of a rank with the same RNG streams, else any intact one."""
        chosen = -1
        if self.grid.rank == 0:
            check, self.skipped = newest_restorable(self.root)
            chosen = -1 if check is None else check.epoch
        chosen = gather_grid(self.comm, self.grid, [chosen])[0][0]
        if chosen < 0:
            return None
        folder = epoch_folder(self.root, chosen)
        manifest = json.loads((folder / MANIFEST).read_text())
        require_fingerprint(folder, manifest["fingerprint"], self.identity)
        written = manifest["layout"]
        source, rng = self._source(folder, manifest)
        state = load_checkpoint(folder / shard_name(source),
                                {**self.identity, "rank": source, "epoch": chosen})
        if rng == "re-derived":
            assert self.block is not None
            state = {**state, "rng": derived_rng(self.seed, self.block, chosen)}
        self.resumed = Resumed(chosen, str(folder), written, self.layout, rng, source)
        self.kept = [chosen]
        return state

    def _source(self, folder: Path, manifest: dict[str, Any]) -> tuple[int, str]:
        """The shard this rank restores from and what becomes of its RNG streams."""
        shards = _shard_entries(manifest, manifest["epoch"])
        intact = [r for r in self._candidates(manifest["layout"], len(shards))
                  if shard_problem(folder, r, shards[r]) is None]
        if not intact:  # rank 0 found one a moment ago: the folder changed since
            raise IncompleteCheckpoint(f"checkpoint {folder}: no intact shard left")
        same = manifest["layout"] == self.layout
        exact = same and intact[0] in self._same_streams(manifest["layout"], len(shards))
        if exact:
            return intact[0], "restored"
        return intact[0], "shared" if self.block is None else "re-derived"

    def _candidates(self, written: dict[str, Any], world: int) -> list[int]:
        """Ranks whose shards may serve this one, best first: its own, its RNG twins."""
        twins = self._same_streams(written, world) if written == self.layout else []
        return list(dict.fromkeys([*twins, *range(world)]))

    def _same_streams(self, written: dict[str, Any], world: int) -> list[int]:
        """Ranks of the written layout that draw this rank's RNG streams, itself first:
        every rank with shared masks, the ranks of its vertex block with per-block ones."""
        me = self.grid.rank
        if self.block is None:
            return [me, *(r for r in range(world) if r != me)]
        per_block = written["grid"][1] * written["grid"][2]
        return [me, *(r for r in range(world) if r != me and r // per_block == self.block)]

    def save(self, epoch: int, payload: dict[str, Any]) -> None:
        """Write this rank's shard; after every rank's acknowledgement, rank 0 writes the
        manifest and prunes older folders (:meth:`_prune`)."""
        folder = epoch_folder(self.root, epoch)
        # A failed save leaves the folder for remove_killed_saves: a rank removing it here
        # raced a peer's mkdir (CI: "epoch-000001: File exists" instead of the full disk).
        folder.mkdir(parents=True, exist_ok=True)
        shard = folder / shard_name(self.grid.rank)
        save_checkpoint(shard, payload, {**self.identity, "rank": self.grid.rank, "epoch": epoch})
        replicated = content_hash([payload["model"], payload["optimizer"]])
        ack = [shard.stat().st_size, *_ints(file_sha256(shard)), *_ints(replicated)]
        acks = gather_grid(self.comm, self.grid, ack)
        if self.grid.rank == 0:
            self._land(folder, epoch, acks)

    def _land(self, folder: Path, epoch: int, acks: list[list[int]]) -> None:
        replicas = {_hex(a[1 + _HASH_INTS:]) for a in acks}
        if len(replicas) != 1:
            raise RuntimeError(
                f"epoch {epoch}: the ranks' model and optimiser states differ, which "
                "synchronised training never produces; no checkpoint written (a bug)"
            )
        manifest = {
            "format": FORMAT, "version": FORMAT_VERSION, "epoch": epoch,
            "fingerprint": dict(self.identity), "layout": self.layout,
            "replicated_sha256": replicas.pop(),
            "shards": [{"rank": r, "file": shard_name(r), "bytes": a[0],
                        "sha256": _hex(a[1:1 + _HASH_INTS])} for r, a in enumerate(acks)],
        }
        _fsync_dir(folder)  # the shards' renames are durable before the manifest names them
        atomic_write(folder / MANIFEST,
                     lambda fh: fh.write(json.dumps(manifest, indent=1).encode()))
        _fsync_dir(folder)
        self.kept = [*self.kept, epoch][-KEEP:]
        self._prune()

    def _prune(self) -> None:
        """Delete the folders older than the checkpoint just written (which is complete),
        but the last :data:`KEEP` this run wrote; with ``restart``, also the earlier
        run's newer folders. A newer folder of an earlier run is otherwise kept."""
        for old, path in epoch_folders(self.root):
            if old not in self.kept and (old < self.kept[-1] or self.restart):
                remove_checkpoint(path)


def derived_rng(seed: int, block: int, epoch: int) -> dict[str, Any]:
    """Fresh RNG streams for a vertex block resumed on another grid, from ``(seed, block,
    epoch)``: a block's replicas agree, and no two blocks or resume epochs share one."""
    seed_everything(int(content_hash(["dropout", seed, block, epoch])[:15], 16))
    return rng_state()


def remove_checkpoint(folder: Path) -> None:
    """Delete an epoch folder: the manifest first, so a folder being deleted is never
    complete, then the files a save writes; a folder holding anything else is kept."""
    (folder / MANIFEST).unlink(missing_ok=True)
    for path in folder.iterdir():
        if _OURS.fullmatch(path.name):
            path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        folder.rmdir()


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
