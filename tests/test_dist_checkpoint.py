"""Distributed checkpoints (issue 21): a folder per saved epoch with one shard per rank and
a manifest written last; resume from the newest complete one, on the same grid
bit-identically and on another world size or algorithm continuing the loss curve.

The multi-rank cases run in one spawned job of 4 gloo ranks on sub-grids of it (starting
processes dominates the cost here). Folder, manifest and refusal cases train a single
rank in this process: its 1x1x1 grid communicates nothing, so it needs no process group.

Grid changes are compared in float64 with dropout 0 unless dropout is the point: then
the first resumed epoch's loss depends only on the restored weights (and the next ones
on the restored Adam moments), so it must equal the uninterrupted run's up to the
summation order, which is all a grid changes. With dropout it would also depend on the
masks, which only continue exactly when every rank draws the whole graph's mask from one
shared stream (the graph in memory); that case is checked on its own.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import pytest
import torch

from sparsegnn.cli.main import main
from sparsegnn.data import load_any
from sparsegnn.data.io import atomic_write
from sparsegnn.distributed import RankFailedError, Session, close_session, init_session, spawn
from sparsegnn.errors import DataFormatError, InvalidValueError
from sparsegnn.names import Algorithm
from sparsegnn.train import dist_checkpoint
from sparsegnn.train.checkpoint import read_checkpoint, save_checkpoint
from sparsegnn.train.dist_checkpoint import MANIFEST, file_sha256, remove_killed_saves
from sparsegnn.train.fullgraph import TrainConfig
from sparsegnn.train.rank_train import DistributedConfig, train_rank

GRAPH_SPEC = "sbm:nodes=200,blocks=3,degree=6"
CLOSE = 1e-5
Masks = Literal["auto", "global", "block"]


def _cfg(**overrides: Any) -> TrainConfig:
    """float64, no dropout, 6 epochs (the uninterrupted length)."""
    base = TrainConfig(model="gcn", hidden=16, num_layers=2, dropout=0.0, epochs=6,
                       dtype="float64", progress=False, checkpoint_every=2)
    return replace(base, **overrides)


def _summary(model: Any, result: Any, report: Any) -> dict[str, Any]:
    return {"losses": [h.loss for h in result.history],
            "weights": {k: v.clone() for k, v in model.state_dict().items()},
            "resumed": report.resumed, "warnings": report.checkpoint_warnings}


@pytest.fixture(scope="module")
def graph():
    return load_any(GRAPH_SPEC, None, seed=0)


def _one_rank(graph: Any, cfg: TrainConfig) -> dict[str, Any]:
    """Train on a single rank in this process (a 1x1x1 grid needs no process group)."""
    session = Session(0, 1, 0, "gloo", torch.device("cpu"))
    got = train_rank(graph, cfg, DistributedConfig(algo="1d"), session)
    assert got is not None
    return _summary(*got)


# ---------------------------------------------------------------------- 4 ranks, one job
def _grid_changes(graph: Any, work: str) -> dict[str, Any]:
    """Rank body: uninterrupted references, then checkpoints resumed on the same grid and
    on others (4 ranks 2d <-> 2 ranks 1d; 2d -> 1.5d with per-block masks)."""
    session = init_session("gloo", timeout_s=60)
    out: dict[str, Any] = {}
    root = Path(work)

    def run(name: str, algo: Algorithm, p: int, cfg: TrainConfig, masks: Masks = "auto",
            replication: int = 1) -> None:
        dcfg = DistributedConfig(algo=algo, replication=replication, backend="gloo",
                                 dropout_masks=masks)
        got = train_rank(graph, cfg, dcfg, session, members=range(p))
        if got is not None:
            out[name] = _summary(*got)

    def first(name: str, algo: Algorithm, p: int, masks: Masks = "auto", **kw: Any) -> Path:
        run(name, algo, p, _cfg(epochs=4, checkpoint=root / name, **kw), masks)
        return root / name

    def copy(src: Path, dst: str) -> Path:
        if session.rank == 0:  # the others reach the copy's first use only through rank 0
            shutil.copytree(src, root / dst)
        return root / dst

    try:
        run("ref", "2d", 4, _cfg())
        run("ref-drop", "2d", 4, _cfg(dropout=0.5))
        run("ref-block", "2d", 4, _cfg(dropout=0.5), masks="block")
        a = first("a", "2d", 4)
        run("a-resumed", "1d", 2, _cfg(checkpoint=a, resume=True))
        b = first("b", "1d", 2)
        run("b-resumed", "2d", 4, _cfg(checkpoint=b, resume=True))
        c = first("c", "2d", 4, dropout=0.5)
        d = copy(c, "d")
        run("c-resumed", "2d", 4, _cfg(dropout=0.5, checkpoint=c, resume=True))
        run("d-resumed", "1d", 2, _cfg(dropout=0.5, checkpoint=d, resume=True))
        g = first("g", "2d", 4, masks="block", dropout=0.5)
        h = copy(g, "h")
        run("g-resumed", "2d", 4, _cfg(dropout=0.5, checkpoint=g, resume=True), "block")
        run("h-resumed", "1.5d", 4, _cfg(dropout=0.5, checkpoint=h, resume=True), "block",
            replication=2)
    finally:
        close_session()
    return out


@pytest.fixture(scope="module")
def ranks(graph, tmp_path_factory):
    work = tmp_path_factory.mktemp("grid_changes")
    # The wall timeout only guards against a hang; gloo's 60 s timeout fires first.
    return spawn(_grid_changes, 4, (graph, str(work)), wall_timeout_s=300), work


@pytest.mark.distributed
@pytest.mark.parametrize(("resumed", "reference"), [("c", "ref-drop"), ("g", "ref-block")],
                         ids=["shared-masks", "block-masks"])
def test_resume_on_the_same_grid_is_bit_identical(ranks, resumed, reference):
    """2D on 4 ranks, dropout 0.5, stopped after 4 of 6 epochs and resumed: every rank's
    losses and final weights equal the uninterrupted run's bit for bit (each rank resumes
    its own shard, RNG streams included, with masks shared or drawn per vertex block)."""
    outputs, _ = ranks
    for rank in range(4):
        got, ref = outputs[rank][f"{resumed}-resumed"], outputs[rank][reference]
        assert got["resumed"].rng == "restored" and got["resumed"].epoch == 4
        assert got["losses"] == ref["losses"]
        for key, w in ref["weights"].items():
            assert torch.equal(got["weights"][key], w), (rank, key)
    assert outputs[0]["c-resumed"]["resumed"].describe() == (
        "resumed epoch 4 from a 4-rank 2d checkpoint (same layout)")


@pytest.mark.distributed
@pytest.mark.parametrize(("resumed", "first", "ranks_after", "reference", "says"), [
    ("a", "a", 2, "ref", "resumed epoch 4 from a 4-rank 2d checkpoint onto 2 ranks 1d"),
    ("b", "b", 4, "ref", "resumed epoch 4 from a 2-rank 1d checkpoint onto 4 ranks 2d"),
    ("d", "c", 2, "ref-drop", "resumed epoch 4 from a 4-rank 2d checkpoint onto 2 ranks 1d"),
], ids=["2d4-to-1d2", "1d2-to-2d4", "2d4-to-1d2-dropout"])
def test_resume_onto_another_grid_continues_the_loss_curve(ranks, resumed, first, ranks_after,
                                                           reference, says):
    """The checkpoint's epochs are restored exactly as rank 0 recorded them; the resumed
    epochs' losses (the first depends on the weights, the second on Adam's moments too,
    and with dropout on the masks of the shared stream) match the uninterrupted run's."""
    outputs, _ = ranks
    ref = outputs[0][reference]["losses"]
    for rank in range(ranks_after):
        got = outputs[rank][f"{resumed}-resumed"]
        assert got["losses"][:4] == outputs[0][first]["losses"]
        assert got["losses"][4:] == pytest.approx(ref[4:], abs=CLOSE)
        assert got["resumed"].describe() == says and got["resumed"].rng == "shared"


@pytest.mark.distributed
def test_per_block_streams_are_re_derived_and_replicas_agree(ranks):
    """Per-block dropout resumed on another grid (2D -> 1.5D, c = 2) cannot continue the old
    blocks' streams: they are re-derived per block, so a block's two replicas still draw
    the same masks and keep identical weights; rank 0 would refuse to write the epoch-6
    manifest otherwise."""
    outputs, work = ranks
    got = [outputs[rank]["h-resumed"] for rank in range(4)]
    assert {g["resumed"].rng for g in got} == {"re-derived"}
    assert "re-derived per vertex block" in got[0]["resumed"].describe()
    for other in got[1:]:
        for key, w in got[0]["weights"].items():
            assert torch.equal(other["weights"][key], w), key
    manifest = json.loads((work / "h" / "epoch-000006" / MANIFEST).read_text())
    assert manifest["layout"]["algo"] == "1.5d" and manifest["layout"]["replication"] == 2
    assert sorted(p.name for p in (work / "h").iterdir()) == ["epoch-000004", "epoch-000006"]


# ---------------------------------------------------------------------- one rank, in process
@pytest.fixture(scope="module")
def base(graph, tmp_path_factory) -> tuple[Path, list[float]]:
    """A complete 1-rank checkpoint folder (epochs 2 and 4) and its run's losses."""
    root = tmp_path_factory.mktemp("base") / "ckpt"
    return root, _one_rank(graph, _cfg(epochs=4, checkpoint=root))["losses"]


def test_folder_layout_manifest_and_retention(graph, tmp_path):
    """Eight epochs saved every two: only the last two complete checkpoints remain, and
    the manifest names each shard with its size and sha256 and the run's layout."""
    root = tmp_path / "ckpt"
    _one_rank(graph, _cfg(epochs=8, checkpoint=root))
    assert sorted(p.name for p in root.iterdir()) == ["epoch-000006", "epoch-000008"]
    folder = root / "epoch-000008"
    assert sorted(p.name for p in folder.iterdir()) == [MANIFEST, "rank0.pt"]
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["epoch"] == 8 and manifest["layout"]["world_size"] == 1
    assert manifest["fingerprint"]["dtype"] == "float64"
    shard, = manifest["shards"]
    assert shard["sha256"] == file_sha256(folder / "rank0.pt")
    assert shard["bytes"] == (folder / "rank0.pt").stat().st_size
    assert read_checkpoint(folder / "rank0.pt").fingerprint["epoch"] == 8


def _no_manifest(folder: Path) -> None:
    (folder / MANIFEST).unlink()


def _truncated_shard(folder: Path) -> None:
    shard = folder / "rank0.pt"
    shard.write_bytes(shard.read_bytes()[:1000])


def _missing_shard(folder: Path) -> None:
    (folder / "rank0.pt").unlink()


def _garbage_manifest(folder: Path) -> None:
    (folder / MANIFEST).write_text("{not json")


@pytest.mark.parametrize(("damage", "reason"), [
    (_no_manifest, "no manifest.json"),
    (_truncated_shard, "rank0.pt has 1000 bytes"),
    (_missing_shard, "rank0.pt is missing"),
    (_garbage_manifest, "manifest.json is unreadable or malformed"),
], ids=["no-manifest", "truncated-shard", "missing-shard", "garbage-manifest"])
def test_incomplete_checkpoints_are_skipped(graph, base, tmp_path, damage, reason):
    """The newest folder damaged as a killed or tampered save leaves it: resume warns, goes
    back to the previous complete one and ends bit-identical to the uninterrupted run."""
    root = shutil.copytree(base[0], tmp_path / "ckpt")
    damage(root / "epoch-000004")
    got = _one_rank(graph, _cfg(epochs=4, checkpoint=root, resume=True))
    assert got["resumed"].epoch == 2
    warning, = got["warnings"]
    assert "epoch-000004 is incomplete" in warning and reason in warning
    assert got["losses"] == base[1]
    assert dist_checkpoint.verify(root / "epoch-000004", 4)["layout"]["world_size"] == 1


class _RunsCode:
    """Unpickling this runs a shell command: what a crafted shard would carry."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, ...]:
        return os.system, (self.command,)


def _replace_shard(folder: Path, content: bytes) -> None:
    """Put ``content`` in as rank 0's shard with a manifest that vouches for it (as
    someone who can write the folder could): only the loader stands in the way."""
    (folder / "rank0.pt").write_bytes(content)
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["shards"][0].update(bytes=len(content), sha256=file_sha256(folder / "rank0.pt"))
    (folder / MANIFEST).write_text(json.dumps(manifest))


def test_crafted_and_garbage_shards_are_refused(graph, base, tmp_path):
    root = shutil.copytree(base[0], tmp_path / "ckpt")
    marker = tmp_path / "MARKER"
    buffer = io.BytesIO()
    torch.save({"format": "sparsegnn-checkpoint", "version": 1, "fingerprint": {},
                "checksum": "", "state": _RunsCode(f"touch {marker}")}, buffer)
    crafted = buffer.getvalue()
    torch.load(io.BytesIO(crafted), weights_only=False)  # proof that it runs code unsafely
    assert marker.exists()
    marker.unlink()
    _replace_shard(root / "epoch-000004", crafted)
    with pytest.raises(DataFormatError, match=r"rank0\.pt: refused: .*could run code"):
        _one_rank(graph, _cfg(epochs=6, checkpoint=root, resume=True))
    assert not marker.exists()
    _replace_shard(root / "epoch-000004", os.urandom(3000))
    with pytest.raises(DataFormatError, match=r"rank0\.pt: corrupt or truncated"):
        _one_rank(graph, _cfg(epochs=6, checkpoint=root, resume=True))


def test_checkpoint_of_another_run_is_refused(graph, base, tmp_path):
    """Another hidden size, dtype or graph is one line naming the field; another world
    size or algorithm is not refused (the other tests resume across them)."""
    root = shutil.copytree(base[0], tmp_path / "ckpt")
    with pytest.raises(InvalidValueError, match="hidden 16 in the file, 32 in this run"):
        _one_rank(graph, _cfg(hidden=32, checkpoint=root, resume=True))
    with pytest.raises(InvalidValueError, match="dtype float64 in the file, float32"):
        _one_rank(graph, _cfg(dtype="float32", checkpoint=root, resume=True))
    other = load_any(GRAPH_SPEC, None, seed=1)
    with pytest.raises(InvalidValueError, match=r"does not match this run: graph "):
        _one_rank(other, _cfg(checkpoint=root, resume=True))


# ---------------------------------------------------------------------- a rank killed mid-save
def _dying_save(path: Path, state: dict[str, Any], fingerprint: Any = None) -> None:
    """save_checkpoint, except that epoch 4's shard is half written and the rank SIGKILLed
    in the middle of it, inside the real atomic write, once rank 0's shard is in place
    (on a loaded machine rank 0 could otherwise still be writing, and its folder would
    hold nothing to call incomplete)."""
    if path.parent.name != "epoch-000004":
        save_checkpoint(path, state, fingerprint)
        return

    def half_then_die(fh: Any) -> None:
        buffer = io.BytesIO()
        torch.save(state, buffer)
        fh.write(buffer.getvalue()[: buffer.tell() // 2])
        fh.flush()
        deadline = time.monotonic() + 60
        while not (path.parent / "rank0.pt").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGKILL)

    atomic_write(path, half_then_die)


def _killed_while_saving(graph: Any, root: str) -> None:
    """Rank body: 2 ranks 1d saving every 2 epochs; rank 1 dies while writing epoch 4."""
    session = init_session("gloo", timeout_s=60)
    if session.rank == 1:
        dist_checkpoint.save_checkpoint = _dying_save  # type: ignore[assignment]
    try:
        train_rank(graph, _cfg(checkpoint=Path(root)),
                   DistributedConfig(algo="1d", backend="gloo"), session)
    finally:
        close_session()


@pytest.mark.distributed
def test_a_rank_killed_while_saving_leaves_the_previous_checkpoint(graph, base, tmp_path):
    root = tmp_path / "ckpt"
    with pytest.raises(RankFailedError, match=r"rank 1 of 2 failed \(killed by SIGKILL\)"):
        spawn(_killed_while_saving, 2, (graph, str(root)), wall_timeout_s=120)
    partial = root / "epoch-000004"
    assert not (partial / MANIFEST).exists()
    assert any(p.name.startswith(".rank1.pt.") for p in partial.iterdir())
    got = _one_rank(graph, _cfg(epochs=4, checkpoint=root, resume=True))
    assert got["resumed"].epoch == 2 and "epoch-000004 is incomplete" in got["warnings"][0]
    assert got["losses"] == pytest.approx(base[1], abs=CLOSE)
    assert sorted(p.name for p in partial.iterdir()) == [MANIFEST, "rank0.pt"]


# ---------------------------------------------------------------------- command line
@pytest.mark.distributed
def test_cli_resumes_a_two_rank_checkpoint_on_one_rank(tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    common = ["train", "--dataset", GRAPH_SPEC, "--checkpoint", str(ckpt), "--no-progress",
              "--history", "--json"]
    assert main([*common, "--nprocs", "2", "--algo", "1d", "--checkpoint-every", "2",
                 "--epochs", "4"]) == 0
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    (ckpt / "epoch-000005").mkdir()  # a save of epoch 5 that never finished
    (ckpt / "epoch-000005" / "rank0.pt").write_bytes(b"half a shard")
    assert main([*common, "--nprocs", "1", "--resume", "--epochs", "6"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out.strip().splitlines()[-1])
    assert "resumed epoch 4 from a 2-rank 1d checkpoint onto 1 rank 1d" in captured.out
    assert "warning: checkpoint" in captured.err and "epoch-000005 is incomplete" in captured.err
    assert out["resumed_from"]["epoch"] == 4 and out["epochs_run"] == 6
    assert out["world_size"] == 1 and out["losses"][:4] == first["losses"]
    assert sorted(p.name for p in ckpt.iterdir()) == ["epoch-000004", "epoch-000006"]


def test_killed_saves_are_removed_and_nothing_else(tmp_path):
    """What a rank killed mid-save leaves (a shard's or the manifest's temp file) goes,
    and a folder then empty; shards, manifests and files of other names stay."""
    epoch = tmp_path / "epoch-000001"
    epoch.mkdir()
    keep = ["rank0.pt", MANIFEST, ".other.tmp", "notes.txt"]
    gone = [".rank1.pt.k2j3x9aa.tmp", f".{MANIFEST}.q1w2e3r4.tmp"]
    for name in keep + gone:
        (epoch / name).write_bytes(b"x")
    left = tmp_path / "epoch-000002"  # a failed save's folder, its temp file only
    left.mkdir()
    (left / ".rank0.pt.a1b2c3d4.tmp").write_bytes(b"x")
    remove_killed_saves(tmp_path)
    assert sorted(p.name for p in epoch.iterdir()) == sorted(keep)
    assert not left.exists()
    remove_killed_saves(tmp_path / "absent")  # no folder: nothing to do
