"""Hostile and careless input to ``sparsegnn train`` (issue 27): checkpoints, graphs,
numeric options and checkpoint paths.

Every case runs the real CLI's entry point (``run_cli`` in conftest: exit status, stdout
and stderr as the process would have them). A refusal must be exit 2 with one stderr line
that names the input, no traceback, no output, checkpoint or temp file left behind and the
inputs (checkpoints included) byte-identical. The small graphs and checkpoints are made
once per module in-process, exactly as the CLI would make them.
"""

from __future__ import annotations

import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pytest

from conftest import all_refused, assert_user_error, run_all, tree, write_crafted_checkpoint
from sparsegnn.data import row_normalize
from sparsegnn.data.generators import from_spec
from sparsegnn.data.io import load_graph, save_graph
from sparsegnn.train import TrainConfig, train_single
from sparsegnn.train.checkpoint import read_checkpoint

# 128 features: the first layer's weight (and its Adam moments) is then the largest tensor
# of a checkpoint, so flipped bytes land in model data rather than in an RNG state.
_SPEC = "sbm:nodes=60,blocks=3,degree=4,features=128"
_FAST = ("--epochs", "2", "--device", "cpu", "--no-progress")


# ---------------------------------------------------------------------- shared inputs
@dataclass(frozen=True)
class Inputs:
    """What the cases read; no case may change anything under ``root``."""

    root: Path
    graph: Path  # a small SBM graph with features, labels and masks
    other: Path  # the same sizes, other edges (another seed)
    ckpt: Path  # a float32 gcn/16 checkpoint of 2 epochs on ``graph``, as the CLI writes it
    ckpt64: Path  # the same in float64
    evil: Path  # torch.save of a checkpoint-shaped dict whose state runs `touch MARKER`
    marker: Path  # what loading ``evil`` unsafely creates


def _checkpoint(graph_file: Path, path: Path, dtype: Literal["float32", "float64"]) -> Path:
    """The checkpoint ``sparsegnn train --dataset graph_file --epochs 2 --checkpoint path``
    writes (same defaults, same row-normalised features, same fingerprint)."""
    graph = load_graph(graph_file)
    graph.x = row_normalize(graph.x)
    cfg = TrainConfig(epochs=2, checkpoint=path, progress=False, dtype=dtype)
    train_single(graph, cfg, "cpu")
    return path


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Inputs:
    root = tmp_path_factory.mktemp("train_inputs")
    graph = save_graph(from_spec(_SPEC, seed=1), root / "graph.npz")
    other = save_graph(from_spec(_SPEC, seed=2), root / "other.npz")
    ckpt = _checkpoint(graph, root / "run.pt", "float32")
    ckpt64 = _checkpoint(graph, root / "run64.pt", "float64")
    marker = root / "MARKER"
    evil = root / "evil.pt"
    write_crafted_checkpoint(evil, marker)
    return Inputs(root, graph, other, ckpt, ckpt64, evil, marker)


def _resume(graph: Path, ckpt: Path, *extra: str) -> tuple[str | Path, ...]:
    return ("train", "--dataset", graph, "--checkpoint", ckpt, "--resume", *_FAST, *extra)


def _fields(line: str) -> list[str]:
    """The fingerprint fields a "does not match this run" line names, in order."""
    listed = line.split("does not match this run:", 1)[1].split(" (resume with", 1)[0]
    return [part.split()[0] for part in listed.split(";")]


def _flip(src: Path, dst: Path) -> Path:
    """``src`` copied to ``dst`` with bytes in the middle of its largest tensor inverted:
    the file still unzips and unpickles, only the numbers are wrong."""
    raw = bytearray(src.read_bytes())
    with zipfile.ZipFile(src) as z:
        entry = max((i for i in z.infolist() if "/data/" in i.filename),
                    key=lambda i: i.file_size)
        data = z.read(entry)
        at = raw.find(data)
    assert at > 0
    mid = at + len(data) // 2
    for k in range(mid, mid + 8):
        raw[k] ^= 0xFF
    dst.write_bytes(bytes(raw))
    return dst


# ---------------------------------------------------------------------- 1. crafted checkpoint
def test_crafted_checkpoint_runs_no_code(workdir: Path, inputs: Inputs) -> None:
    """A pickle that runs `touch MARKER` when loaded is refused unread: no MARKER (neither
    the one it names nor one in the working folder), one line naming the file."""
    ckpt = shutil.copy(inputs.evil, workdir / "evil.pt")
    line, = all_refused([(_resume(inputs.graph, ckpt), ("evil.pt", "refused"))],
                         workdir, workdir, inputs.root)
    assert "could run code" in line
    assert not inputs.marker.exists() and not (workdir / "MARKER").exists()


# ---------------------------------------------------------------------- 2. flipped bytes
def test_flipped_bytes_are_refused_by_checksum(workdir: Path, inputs: Inputs) -> None:
    """A good checkpoint with eight bytes of its largest tensor inverted loads as tensors;
    the checksum refuses it and the resumed run neither trains nor rewrites the file."""
    ckpt = _flip(inputs.ckpt, workdir / "flipped.pt")
    all_refused([(_resume(inputs.graph, ckpt), ("flipped.pt", "corrupt", "hashes to"))],
                 workdir, workdir, inputs.root)


# ---------------------------------------------------------------------- 3. dtype
def test_float64_checkpoint_is_not_resumed_as_float32(workdir: Path, inputs: Inputs) -> None:
    ckpt = shutil.copy(inputs.ckpt64, workdir / "run64.pt")
    line, = all_refused([(_resume(inputs.graph, ckpt),
                           ("run64.pt", "dtype float64 in the file, float32 in this run"))],
                         workdir, workdir, inputs.root)
    assert _fields(line) == ["dtype"]  # only what differs


# ---------------------------------------------------------------------- 4. another run
def test_checkpoint_of_another_run_names_the_field(workdir: Path, inputs: Inputs) -> None:
    """Another model kind, another hidden size, another graph of the very same sizes:
    each is one line naming the field and both values, never a load_state_dict error."""
    # One copy per case: the cases run at once, and a checkpoint takes one run at a time.
    copies = []
    for case in ("model", "hidden", "graph"):
        (workdir / case).mkdir()
        copies.append(shutil.copy(inputs.ckpt, workdir / case / "run.pt"))
    lines = all_refused([
        (_resume(inputs.graph, copies[0], "--model", "sage"),
         ("run.pt", "model gcn in the file, sage in this run")),
        (_resume(inputs.graph, copies[1], "--hidden", "32"),
         ("run.pt", "hidden 16 in the file, 32 in this run")),
        (_resume(inputs.other, copies[2]), ("run.pt", "graph ", "in the file")),
    ], workdir, workdir, inputs.root)
    assert [_fields(line) for line in lines] == [["model"], ["hidden"], ["graph"]]


# ---------------------------------------------------------------------- 5. non-finite loss
def test_nonfinite_loss_keeps_the_last_good_checkpoint(workdir: Path, inputs: Inputs) -> None:
    """Resuming with ``--lr 1e30`` blows the weights up after one step: the next epoch's
    loss is NaN, the run stops with one line, and the good checkpoint (which the final
    save would otherwise overwrite) is byte-identical. ``--lr`` must apply on resume for
    this to happen: the saved optimiser state used to bring back the saved rate."""
    ckpt = shutil.copy(inputs.ckpt, workdir / "run.pt")
    before = tree(workdir, inputs.root)
    proc, = run_all([_resume(inputs.graph, ckpt, "--epochs", "4", "--lr", "1e30")], workdir)
    line = assert_user_error(proc, "run.pt", "loss is nan", "last good state")
    assert line.split("error: ", 1)[1].startswith("epoch 3:")
    assert tree(workdir, inputs.root) == before


# ---------------------------------------------------------------------- 6. graph checks
def _graph_file(path: Path, inputs: Inputs, **change: np.ndarray | None) -> Path:
    """``inputs.graph`` as plain arrays with ``change`` applied (None drops the array),
    written without a stored name, as a hand-made file would be."""
    with np.load(inputs.graph) as npz:
        arrays = {k: npz[k] for k in ("edge_index", "num_nodes", "x", "y", "train_mask",
                                      "val_mask", "test_mask")}
    arrays.update(change)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


def test_untrainable_graphs_are_refused_naming_the_file(workdir: Path,
                                                        inputs: Inputs) -> None:
    """No features, no labels, a label -1, an empty train split, a NaN feature row: each
    is one line naming the file given as --dataset (and the row, where there is one)."""
    with np.load(inputs.graph) as npz:
        y, x = npz["y"].copy(), npz["x"].copy()
    y[7] = -1
    x[9, 2] = np.nan
    files = {
        "nofeatures": ({"x": None}, ("features",)),
        "nolabels": ({"y": None}, ("labels",)),
        "label-1": ({"y": y}, ("row 7", "-1")),
        "notrain": ({"train_mask": np.zeros(60, bool)}, ("train split is empty",)),
        "nanrow": ({"x": x}, ("row 9", "nan")),
    }
    ckpt = workdir / "out" / "run.pt"
    cases = []
    for name, (change, names) in files.items():
        path = _graph_file(workdir / f"{name}.npz", inputs, **change)
        cases.append((("train", "--dataset", path, "--checkpoint", ckpt, *_FAST),
                      (f"{name}.npz", *names)))
    all_refused(cases, workdir, workdir, inputs.root)


# ---------------------------------------------------------------------- 7, 8. options
def test_out_of_range_options_are_refused(workdir: Path, inputs: Inputs) -> None:
    """Each bad value is argparse's (or the device check's) one line naming the option,
    before any graph is read or checkpoint written. ``--nprocs -2`` without ``--algo``
    (case 8) used to fall through to one process and train."""
    ckpt = workdir / "run.pt"
    base = ("train", "--dataset", inputs.graph, "--checkpoint", ckpt, "--epochs", "2",
            "--no-progress")
    bad = [("--nprocs", "-2"), ("--hidden", "0"), ("--checkpoint-every", "0"),
           ("--lr", "nan"), ("--dropout", "1.5"), ("--layers", "0"), ("--device", "bogus"),
           ("--mode", "minibatch", "--fanouts", "abc"), ("--epochs", "0"),
           ("--timeout", "-1")]
    all_refused([((*base, *argv), (argv[-2], argv[-1])) for argv in bad],
                 workdir, workdir, inputs.root)


# ---------------------------------------------------------------------- 9. checkpoint paths
def test_temp_file_of_a_killed_save_is_removed(workdir: Path, inputs: Inputs) -> None:
    """A ``.run.pt.XXXX.tmp`` left by a run killed mid-save is removed when the next run
    starts; a temp file of another checkpoint's name is not touched."""
    ckpt = workdir / "run.pt"
    stale = workdir / ".run.pt.k3j9x2a1.tmp"
    stale.write_bytes(b"half a checkpoint")
    others = workdir / ".other.pt.k3j9x2a1.tmp"
    others.write_bytes(b"someone else's")
    before = tree(inputs.root)
    proc, = run_all([("train", "--dataset", inputs.graph, "--checkpoint", ckpt, *_FAST)],
                     workdir)
    assert proc.returncode == 0, proc.stderr
    assert not stale.exists() and others.read_bytes() == b"someone else's"
    assert sorted(p.name for p in workdir.iterdir()) == [".other.pt.k3j9x2a1.tmp", "run.pt"]
    assert read_checkpoint(ckpt).state["loop"]["epoch"] == 2
    assert tree(inputs.root) == before


def test_checkpoint_path_that_cannot_be_a_file_is_refused(workdir: Path,
                                                          inputs: Inputs) -> None:
    """``--checkpoint`` naming a folder, or a path under a regular file: one line, before
    training, and nothing created (tests run as root, so no permission-based case)."""
    (workdir / "dir").mkdir()
    (workdir / "somefile").write_text("not a folder")
    all_refused([
        (("train", "--dataset", inputs.graph, "--checkpoint", workdir / "dir", *_FAST),
         ("--checkpoint", "dir", "is a directory")),
        (("train", "--dataset", inputs.graph, "--checkpoint",
          workdir / "somefile" / "sub" / "run.pt", *_FAST),
         ("--checkpoint", "somefile", "not a directory")),
    ], workdir, workdir, inputs.root)
