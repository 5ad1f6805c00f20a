"""Hostile and careless input to ``sparsegnn track`` (issue 27): models, checkpoints, graphs,
output folders and numeric options.

Every case runs the real CLI's entry point (``run_cli`` in conftest: exit status, stdout
and stderr as the process would have them). A refusal must be exit 2 with one stderr line
that names the input, no traceback, no output, temp file or folder left behind and the
inputs unchanged. The small events, graphs, model and checkpoints are made once per module
in-process.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import (
    all_refused,
    write_crafted_checkpoint,
)
from sparsegnn.tracking.events import Event, read_events
from sparsegnn.tracking.graph_construction import HitGraph, ModuleMap, module_map_graph
from sparsegnn.tracking.infer import save_model
from sparsegnn.tracking.model import INConfig, InteractionNetwork
from sparsegnn.tracking.train import TrackTrainConfig, TrainReport, train
from tracking_toys import straight_tracks

_FAST = ("--hidden", "8", "--iterations", "1", "--epochs", "1", "--device", "cpu")
_EV2 = "event000000002"


# ---------------------------------------------------------------------- shared inputs
@dataclass(frozen=True)
class Inputs:
    """What the cases read; no case may change anything under ``root``."""

    root: Path
    events: Path  # two small TrackML-format events
    bad_events: Path  # the same, the second event's hits CSV unparsable on line 3
    graphs: Path  # their graphs, as an earlier 'track build-graphs' output
    model: Path  # an Interaction Network model (hidden 8, 1 iteration)
    ckpt: Path  # a training checkpoint of that size on ``graphs``
    evil: Path  # torch.save of a checkpoint-shaped dict whose state runs `touch MARKER`
    marker: Path  # what loading ``evil`` unsafely creates


def _write_event(directory: Path, prefix: str, ev: Event) -> None:
    """``ev`` as the three TrackML CSV files."""
    hits = ["hit_id,x,y,z,volume_id,layer_id,module_id"] + [
        f"{h},{x!r},{y!r},{z!r},{v},{la},{m}" for h, (x, y, z), v, la, m in zip(
            ev.hit_id.tolist(), ev.position.tolist(), ev.volume.tolist(), ev.layer.tolist(),
            ev.module.tolist(), strict=True)]
    truth = ["hit_id,particle_id,weight"] + [
        f"{h},{p},{w!r}" for h, p, w in zip(ev.hit_id.tolist(), ev.particle_id.tolist(),
                                            ev.weight.tolist(), strict=True)]
    p = ev.particles
    parts = ["particle_id,vx,vy,vz,px,py,pz,q,nhits"] + [
        ",".join(map(repr, [pid, *vtx, *mom, q, n])) for pid, vtx, mom, q, n in zip(
            p.particle_id.tolist(), p.vertex.tolist(), p.momentum.tolist(), p.charge.tolist(),
            p.nhits.tolist(), strict=True)]
    for kind, lines in (("hits", hits), ("truth", truth), ("particles", parts)):
        (directory / f"{prefix}-{kind}.csv").write_text("\n".join(lines) + "\n")


def _write_manifest(directory: Path, kind: str) -> None:
    """Mark ``directory`` as an earlier output of a track stage (as the CLI writes it)."""
    files = sorted(p.name for p in directory.iterdir())
    (directory / "manifest.json").write_text(
        json.dumps({"format": kind, "version": 1, "files": files}))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Inputs:
    root = tmp_path_factory.mktemp("track_inputs")
    events = root / "events"
    events.mkdir()
    for i in (1, 2):
        _write_event(events, f"event{i:09d}", straight_tracks(6, seed=i))
    bad_events = root / "bad_events"
    shutil.copytree(events, bad_events)
    hits = bad_events / f"{_EV2}-hits.csv"
    lines = hits.read_text().splitlines()
    lines[2] = lines[2].replace(",", ",1.0.0x", 1)  # line 3, column x
    hits.write_text("\n".join(lines) + "\n")

    read = read_events(events)
    module_map = ModuleMap.learn(read)
    graphs = root / "graphs"
    graphs.mkdir()
    for ev in read:
        module_map_graph(ev, module_map).save(graphs / f"{ev.name}.npz")
    _write_manifest(graphs, "sparsegnn-track-graphs")

    torch.manual_seed(0)
    cfg = INConfig(hidden=8, iterations=1)
    model = root / "model.pt"
    save_model(model, InteractionNetwork(cfg), TrainReport(1.0))
    ckpt = root / "run.ckpt"
    loaded = [HitGraph.load(p) for p in sorted(graphs.glob("*.npz"))]  # as the CLI loads them
    train(loaded, TrackTrainConfig(model=cfg, epochs=1), "cpu", checkpoint=ckpt)

    marker = root / "MARKER"
    evil = root / "evil.pt"
    write_crafted_checkpoint(evil, marker, {"kind": "track-model"})
    return Inputs(root, events, bad_events, graphs, model, ckpt, evil, marker)


def _flip(src: Path, dst: Path) -> Path:
    """``src`` copied to ``dst`` with bytes inside its largest tensor inverted: the file
    still unzips and unpickles, only the numbers are wrong."""
    raw = bytearray(src.read_bytes())
    with zipfile.ZipFile(src) as z:
        entry = max((i for i in z.infolist() if "/data/" in i.filename),
                    key=lambda i: i.file_size)
        at = raw.find(z.read(entry))
    assert at > 0
    for k in range(at + 8, at + 16):
        raw[k] ^= 0xFF
    dst.write_bytes(bytes(raw))
    return dst


# ---------------------------------------------------------------------- 1. crafted model
def test_crafted_model_runs_no_code(workdir: Path, inputs: Inputs) -> None:
    """Every place a model, filter or checkpoint is read refuses the pickle without running
    it: no MARKER, one line naming the file."""
    ckpt = shutil.copy(inputs.evil, workdir / "evil.ckpt")
    ev, g, evil = inputs.events, inputs.graphs, inputs.evil
    named = ("evil.pt", "refused")
    all_refused([
        (("track", "evaluate", "--events", ev, "--model", evil), named),
        (("track", "reconstruct", "--events", ev, "--graphs", g, "--model", evil,
          "--out", workdir / "tracks"), named),
        (("track", "build-graphs", "--events", ev, "--filter", evil,
          "--out", workdir / "graphs"), named),
        (("track", "train", "--graphs", g, "--out", workdir / "a.pt", "--init", evil, *_FAST),
         named),
        (("track", "train", "--graphs", g, "--out", workdir / "b.pt", "--checkpoint", ckpt,
          "--resume", *_FAST), ("evil.ckpt", "refused")),
    ], workdir, workdir, inputs.root)
    assert not inputs.marker.exists()


# ---------------------------------------------------------------------- 2. flipped bytes
def test_flipped_bytes_are_refused_by_checksum(workdir: Path, inputs: Inputs) -> None:
    """A model or checkpoint with a few bytes inverted loads as tensors; the checksum
    refuses it, and a resumed run does not overwrite the damaged checkpoint."""
    model = _flip(inputs.model, workdir / "flipped.pt")
    ckpt = _flip(inputs.ckpt, workdir / "flipped.ckpt")
    ev, g = inputs.events, inputs.graphs
    all_refused([
        (("track", "evaluate", "--events", ev, "--graphs", g, "--model", model),
         ("flipped.pt", "corrupt", "the file recorded")),
        (("track", "train", "--graphs", g, "--out", workdir / "b.pt", "--checkpoint", ckpt,
          "--resume", *_FAST), ("flipped.ckpt", "corrupt", "the file recorded")),
    ], workdir, workdir, inputs.root)


# ---------------------------------------------------------------------- 3. other model size
def test_resume_with_another_model_size_names_the_field(workdir: Path,
                                                        inputs: Inputs) -> None:
    ckpt = shutil.copy(inputs.ckpt, workdir / "run.ckpt")
    argv = ("track", "train", "--graphs", inputs.graphs, "--out", workdir / "m.pt",
            "--hidden", "16", "--iterations", "1", "--epochs", "2", "--checkpoint", ckpt,
            "--resume")
    [line] = all_refused([(argv, ("run.ckpt", "hidden 8 in the file, 16 in this run"))],
                          workdir, workdir, inputs.root)
    assert line.count(" in the file") == 1  # only the field that differs


# ---------------------------------------------------------------------- 4. whole outputs
def test_build_failing_part_way_leaves_out_as_it_was(workdir: Path, inputs: Inputs) -> None:
    """The second event cannot be read: an earlier build output keeps every file (the
    error names the event, so the folder was accepted as replaceable)."""
    earlier = workdir / "earlier"
    shutil.copytree(inputs.graphs, earlier)
    argv = ("track", "build-graphs", "--events", inputs.bad_events, "--out", earlier)
    all_refused([(argv, (f"{_EV2}-hits.csv", "line 3"))], workdir, workdir, inputs.root)


def test_reconstruct_failing_part_way_leaves_out_as_it_was(workdir: Path,
                                                          inputs: Inputs) -> None:
    """The first event's tracks are written before the second event turns out to have no
    graph: neither a new folder nor an earlier tracks output may show them."""
    graphs = workdir / "graphs"
    shutil.copytree(inputs.graphs, graphs)
    (graphs / f"{_EV2}.npz").unlink()
    earlier = workdir / "earlier"
    earlier.mkdir()
    (earlier / "event000000001-tracks.csv").write_text("hit_id,track_id\n1,1\n")
    _write_manifest(earlier, "sparsegnn-track-tracks")
    all_refused([
        (("track", "reconstruct", "--events", inputs.events, "--graphs", graphs,
          "--model", inputs.model, "--out", out, "--device", "cpu"),
         ("no graph for event", _EV2))
        for out in (workdir / "new" / "tracks", earlier)
    ], workdir, workdir, inputs.root)


def test_outputs_never_replace_a_folder_of_other_files(workdir: Path, inputs: Inputs) -> None:
    """A folder of the user's files, or another stage's output, is refused, not replaced."""
    mine = workdir / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    graphs = workdir / "graphs"
    shutil.copytree(inputs.graphs, graphs)
    ev = inputs.events
    all_refused([
        (("track", "build-graphs", "--events", ev, "--out", mine), ("mine", "not empty")),
        (("track", "reconstruct", "--events", ev, "--graphs", graphs, "--model", inputs.model,
          "--device", "cpu", "--out", graphs), ("graphs", "not an earlier sparsegnn-track-"
                                                          "tracks output")),
    ], workdir, workdir, inputs.root)


# ---------------------------------------------------------------------- 5. corrupt graphs
def test_corrupt_graph_file_is_named(workdir: Path, inputs: Inputs) -> None:
    """A truncated file, one needing a pickle, and one whose edges point past its hits."""
    def damaged(name: str) -> Path:
        folder = workdir / name
        shutil.copytree(inputs.graphs, folder)
        return folder

    truncated = damaged("truncated")
    target = truncated / f"{_EV2}.npz"
    target.write_bytes(target.read_bytes()[:300])
    pickled = damaged("pickled")
    with np.load(pickled / f"{_EV2}.npz") as saved:
        arrays = dict(saved)
    np.savez(pickled / f"{_EV2}.npz", **{**arrays, "y": np.array([{"a": 1}], dtype=object)})
    out_of_range = damaged("range")
    arrays["edge_index"] = arrays["edge_index"].copy()
    arrays["edge_index"][1, -1] = 999
    np.savez(out_of_range / f"{_EV2}.npz", **arrays)
    ev = inputs.events
    all_refused([
        (("track", "train", "--graphs", truncated, "--out", workdir / "m.pt", *_FAST),
         (f"truncated/{_EV2}.npz",)),
        (("track", "reconstruct", "--events", ev, "--graphs", pickled, "--model", inputs.model,
          "--out", workdir / "tracks", "--device", "cpu"), (f"pickled/{_EV2}.npz",)),
        (("track", "evaluate", "--events", ev, "--graphs", out_of_range,
          "--model", inputs.model, "--device", "cpu"), (f"range/{_EV2}.npz", "edge_index")),
    ], workdir, workdir, inputs.root)


# ---------------------------------------------------------------------- 6. range checks
def test_numeric_options_are_range_checked(workdir: Path, inputs: Inputs) -> None:
    """Refused by argparse, before any file is read (simulate would need ACTS)."""
    trainer = ("track", "train", "--graphs", inputs.graphs, "--out", workdir / "m.pt")
    reco = ("track", "reconstruct", "--events", inputs.events, "--graphs", inputs.graphs,
            "--model", inputs.model, "--out", workdir / "tracks")
    all_refused([
        ((*trainer, "--hidden", "0"), ("--hidden", "0")),
        ((*trainer, "--lr", "nan"), ("--lr", "nan")),
        ((*trainer, "--epochs", "0"), ("--epochs", "0")),
        ((*trainer, "--fanouts", "abc"), ("--fanouts", "abc")),
        ((*trainer, "--nprocs", "-2"), ("--nprocs", "-2")),
        ((*reco, "--cut", "1.5"), ("--cut", "1.5")),
        (("track", "simulate", "--gun", "0", "--out", workdir / "sim"), ("--gun", "0")),
    ], workdir, workdir, inputs.root)


# ---------------------------------------------------------------------- 7. bad --out paths
def test_out_on_a_regular_file_creates_nothing(workdir: Path, inputs: Inputs) -> None:
    """A file where a folder is needed, or a path under a file (root ignores permissions,
    so these are the unwritable places a test can make)."""
    afile = workdir / "afile"
    afile.write_text("not a folder")
    ev, g = inputs.events, inputs.graphs
    named = ("afile", "not a directory")
    all_refused([
        (("track", "build-graphs", "--events", ev, "--out", afile), named),
        (("track", "reconstruct", "--events", ev, "--graphs", g, "--model", inputs.model,
          "--out", afile / "tracks" / "deeper"), named),
        (("track", "train", "--graphs", g, "--out", workdir / "m.pt",
          "--checkpoint", afile / "run.ckpt"), named),
    ], workdir, workdir, inputs.root)
