"""What training commands leave behind: TensorBoard event files read back with
tensorboard's own reader, the per-epoch history behind ``--history``, and quiet logs."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sparsegnn.cli.main import main
from sparsegnn.train.progress import EpochDisplay

event_accumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator",
    reason="tensorboard is not installed (pip install 'sparsegnn[tensorboard]')")

GRAPH = "sbm:nodes=300,blocks=3,degree=6"
pytestmark = pytest.mark.usefixtures("one_thread")


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series in ``logdir``, as tensorboard itself reads the event files."""
    acc = event_accumulator.EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)]
            for tag in acc.Tags()["scalars"]}


def assert_epochs_match(series: dict[str, list[tuple[int, float]]],
                        history: list[dict[str, Any]], fields: dict[str, str]) -> None:
    """Each history field equals its TensorBoard curve (stored as float32)."""
    for field, tag in fields.items():
        got = series[f"epoch/{tag}"]
        assert [step for step, _ in got] == [h["epoch"] for h in history]
        assert [v for _, v in got] == pytest.approx([h[field] for h in history], rel=1e-6)


def test_train_logdir_matches_the_json(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "train", "--dataset", GRAPH, "--epochs", "6", "--device", "cpu",
                   "--logdir", str(tmp_path), "--history")
    run = tmp_path / "version_0"
    assert out["logdir"] == str(run)
    series = scalars(run)
    assert len(out["history"]) == 6 and out["losses"] == [h["loss"] for h in out["history"]]
    assert_epochs_match(series, out["history"], {
        "loss": "loss", "train_accuracy": "train_accuracy", "val_accuracy": "val_accuracy",
        "seconds": "epoch_time_s", "val_loss": "val_loss"})
    for key in ("test_accuracy", "best_val_accuracy", "epoch_time_s", "peak_memory_bytes"):
        assert series[f"final/{key}"] == [(5, pytest.approx(out[key], rel=1e-6))]
    memory = [v for _, v in series["epoch/peak_memory_bytes"]]
    assert len(memory) == 6 and memory == sorted(memory)  # a high-water mark
    assert memory[-1] <= out["peak_memory_bytes"] * (1 + 1e-6)
    saved = json.loads((run / "run.json").read_text())
    assert saved["history"] == out["history"] and saved["test_accuracy"] == out["test_accuracy"]


def test_json_keeps_final_figures_and_drops_the_history(
        capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "train", "--dataset", GRAPH, "--epochs", "3", "--device", "cpu")
    assert "history" not in out and "losses" not in out
    assert out["epochs_run"] == 3 and 0.0 <= out["test_accuracy"] <= 1.0


@pytest.mark.parametrize("mode", [[], ["--mode", "minibatch", "--fanouts", "3,3", "--layers",
                                         "2", "--batch-size", "64"]])
def test_test_confusion_agrees_with_test_accuracy(
        mode: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """The matrix the report draws: rows true class, columns predicted, on the test split
    with the best-on-validation weights (full-graph and minibatch on one process)."""
    out = run_json(capsys, "train", "--dataset", GRAPH, "--epochs", "3", "--device", "cpu",
                   *mode)
    counts = out["test_confusion"]
    correct = sum(counts[i][i] for i in range(len(counts)))
    assert len(counts) == 3 and correct / sum(map(sum, counts)) == pytest.approx(
        out["test_accuracy"], rel=1e-6)


def test_minibatch_logdir_has_the_validation_loss(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Sampled training on one process evaluates the whole graph each epoch: its
    cross-entropy on the validation split is a curve too."""
    out = run_json(capsys, "train", "--dataset", GRAPH, "--epochs", "3", "--mode", "minibatch",
                   "--fanouts", "3,3", "--layers", "2", "--batch-size", "64", "--logdir",
                   str(tmp_path), "--history")
    assert all(h["val_loss"] > 0 for h in out["history"])
    assert_epochs_match(scalars(tmp_path / "version_0"), out["history"],
                        {"val_loss": "val_loss", "val_accuracy": "val_accuracy"})


@pytest.mark.distributed
def test_distributed_logdir_has_one_writer_and_every_rank_bytes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "train", "--dataset", GRAPH, "--epochs", "3", "--nprocs", "2",
                   "--algo", "1d", "--device", "cpu", "--logdir", str(tmp_path), "--history")
    run = tmp_path / "version_0"
    series = scalars(run)
    # rank 0 alone writes: one event file of epochs (plus the final figures), not two
    assert len(list(run.glob("events.out.tfevents.*"))) == 2
    assert_epochs_match(series, out["history"], {"loss": "loss", "val_accuracy": "val_accuracy",
                                                 "val_loss": "val_loss"})
    sent = [r["sent"] for r in out["comm"]["per_rank"]]
    assert [series[f"ranks/bytes_sent_per_epoch/{r}"][0][1] for r in (0, 1)] == sent
    memory = [m["peak_rss_bytes"] for m in out["memory_per_rank"]]
    got = [series[f"ranks/peak_memory_bytes/{r}"][0][1] for r in (0, 1)]
    assert got == pytest.approx(memory, rel=1e-6)


@pytest.mark.distributed
def test_distributed_val_loss_equals_one_process(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two 1D ranks sum the validation loss in the reduction of the validation accuracy:
    the curve is the one-process run's on the same graph and seed (float64), and the
    bytes each rank measures still equal the model's."""
    args = ("train", "--dataset", GRAPH, "--epochs", "4", "--device", "cpu", "--dtype",
            "float64", "--history", "--logdir")
    one = run_json(capsys, *args, str(tmp_path / "one"))
    two = run_json(capsys, *args, str(tmp_path / "two"), "--nprocs", "2", "--algo", "1d")
    want, got = ([h["val_loss"] for h in out["history"]] for out in (one, two))
    assert len(got) == 4 and got == pytest.approx(want, abs=1e-9)
    curves = [[v for _, v in scalars(tmp_path / run / "version_0")["epoch/val_loss"]]
              for run in ("one", "two")]
    assert curves[1] == pytest.approx(curves[0], abs=1e-6)
    assert curves[0] == pytest.approx(want, rel=1e-6)  # event files hold float32
    comm = two["comm"]
    assert comm["total_bytes_per_epoch"] == comm["comm_model"]["total_bytes_per_epoch"]


def test_track_train_logdir_matches_the_json(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from tracking_toys import toy_graphs

    graphs = tmp_path / "graphs"
    graphs.mkdir()
    for i, g in enumerate(toy_graphs([6, 8])):
        g.save(graphs / f"event{i}.npz")
    logdir = tmp_path / "tb"
    out = run_json(capsys, "track", "train", "--graphs", str(graphs), "--out",
                   str(tmp_path / "in.pt"), "--hidden", "8", "--iterations", "1", "--epochs",
                   "3", "--device", "cpu", "--logdir", str(logdir), "--history")
    assert out["epochs_run"] == 3 and out["last_epoch"] == out["history"][-1]
    assert_epochs_match(scalars(logdir / "version_0"), out["history"], {
        "loss": "loss", "events_used": "events_used", "seconds": "epoch_time_s"})


def test_curate_distil_logdir_matches_the_json(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("pyarrow")
    from sparsegnn.curation.ingest import IngestConfig, ingest
    from sparsegnn.curation.synthetic import SyntheticConfig, write_corpus

    write_corpus(tmp_path / "corpus.jsonl", SyntheticConfig(num_docs=120, num_sites=4, seed=2))
    ingest(tmp_path / "corpus.jsonl", tmp_path / "store", IngestConfig(batch_rows=64))
    logdir = tmp_path / "tb"
    out = run_json(capsys, "curate", "distil", "--corpus", str(tmp_path / "store"),
                   "--labels", str(tmp_path / "corpus.jsonl"), "--model", "text",
                   "--epochs", "3", "--out", str(tmp_path / "a.pt"), "--logdir", str(logdir),
                   "--history")
    series = scalars(logdir / "version_0")
    assert_epochs_match(series, out["history"], {"loss": "loss", "val_accuracy": "val_accuracy"})
    assert series["final/best_val_accuracy"][0][1] == pytest.approx(out["best_val_accuracy"])


@pytest.mark.parametrize(("epochs", "lines"), [(200, 10), (25, 9), (7, 7), (1, 1)])
def test_without_a_bar_a_run_logs_a_line_per_tenth(
        epochs: int, lines: int, caplog: pytest.LogCaptureFixture) -> None:
    """Off a terminal (pytest's stderr): summary lines at every tenth and the last epoch."""
    display = EpochDisplay(epochs, 0, "train", None, True, None)
    stats = type("Stats", (), {"loss": 0.5, "seconds": 0.01})()
    with caplog.at_level(logging.INFO, logger="sparsegnn.train.progress"):
        for epoch in range(1, epochs + 1):
            display.update(epoch, stats, epoch == epochs)
    display.close()
    assert display.bar is None and len(caplog.records) == lines
    assert caplog.records[-1].getMessage().startswith(f"train: epoch {epochs}/{epochs}, loss")


def test_progress_flag_forces_the_bar_and_other_ranks_stay_silent() -> None:
    assert EpochDisplay(5, 0, "train", True, True, None).bar is not None
    assert EpochDisplay(5, 0, "train", True, False, None).bar is None
    assert EpochDisplay(5, 0, "train", False, True, None).bar is None


@pytest.mark.slow
def test_demo_into_a_log_file_writes_fewer_than_30_lines(tmp_path: Path) -> None:
    """``make demo > log.txt`` (stderr too, as CI captures it): a few summary lines, no
    bar redrawn line after line."""
    log = tmp_path / "log.txt"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with log.open("w") as fh:
        done = subprocess.run([sys.executable, "-m", "sparsegnn", "demo", "--device", "cpu"],
                              stdout=fh, stderr=subprocess.STDOUT, env=env, timeout=600,
                              check=False)
    text = log.read_text()
    assert done.returncode == 0, text
    assert len(text.splitlines()) < 30 and "\r" not in text, text


def test_other_libraries_info_logs_stay_out_of_a_run(capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    """The CLI shows our INFO lines, not matplotlib's or transformers' (it used to set the
    root logger to INFO); ``--verbose`` shows them again."""
    import logging

    from sparsegnn.cli.main import main

    levels = [(lg, lg.level) for lg in (logging.getLogger(), logging.getLogger("sparsegnn"))]
    try:
        assert main(["data", "info", "sbm:nodes=60,blocks=2,degree=4", "--json"]) == 0
        assert not logging.getLogger("matplotlib.font_manager").isEnabledFor(logging.INFO)
        assert logging.getLogger("sparsegnn.train.progress").isEnabledFor(logging.INFO)
        assert main(["--verbose", "data", "info", "sbm:nodes=60,blocks=2,degree=4"]) == 0
        assert logging.getLogger("matplotlib.font_manager").isEnabledFor(logging.INFO)
    finally:
        for logger, level in levels:
            logger.setLevel(level)
    capsys.readouterr()


_BAR_SCRIPT = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("progress", sys.argv[1])
progress = importlib.util.module_from_spec(spec)
spec.loader.exec_module(progress)
stats = type("Stats", (), {"loss": 0.5, "seconds": 0.01})()
display = progress.EpochDisplay(3, 0, "train", progress=None, reports=True, score=None)
for epoch in (1, 2, 3):
    display.update(epoch, stats, last=epoch == 3)
display.close()
"""


def test_a_terminal_of_zero_by_zero_still_shows_the_bar() -> None:
    """On a terminal that reports 0 columns and 0 lines, the bar is drawn (tqdm hid every
    bar below a screen of 0 lines, so training showed nothing). A real pseudo-terminal:
    the terminal is what is tested."""
    import fcntl
    import os
    import pty
    import select
    import struct
    import subprocess
    import sys
    import termios

    import sparsegnn.train.progress as progress

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 0, 0, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen([sys.executable, "-c", _BAR_SCRIPT, progress.__file__],
                            stdin=follower, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    out = b""
    try:
        while select.select([leader], [], [], 30)[0]:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal closed with the process
                break
            if not chunk:
                break
            out += chunk
    finally:
        proc.wait(timeout=30)
        os.close(leader)
    assert proc.returncode == 0
    assert b"train:" in out


def hparams(run: Path) -> tuple[dict[str, Any], set[str]]:
    """The settings and metric tags of ``run``'s HParams summaries, as TensorBoard reads them."""
    from tensorboard.plugins.hparams import metadata

    acc = event_accumulator.EventAccumulator(str(run))
    acc.Reload()
    content = acc.PluginTagToContent(metadata.PLUGIN_NAME)
    start = metadata.parse_session_start_info_plugin_data(
        content[metadata.SESSION_START_INFO_TAG])
    experiment = metadata.parse_experiment_plugin_data(content[metadata.EXPERIMENT_TAG])
    values = {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind"))
              for k, v in start.hparams.items()}
    return values, {m.name.tag for m in experiment.metric_infos}


def test_two_runs_into_one_logdir_are_two_tensorboard_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each run takes the next ``version_N`` (saying so) instead of appending to the first
    run's curves and replacing its run.json; each has its own curves, validation loss and
    hparams; a resumed run continues its own folder; ``--name`` labels a run."""
    first = run_json(capsys, "train", "--dataset", GRAPH, "--epochs", "4", "--logdir",
                     str(tmp_path), "--checkpoint", str(tmp_path / "ck.pt"), "--history")
    assert main(["train", "--dataset", GRAPH, "--epochs", "2", "--lr", "0.05", "--logdir",
                 str(tmp_path), "--history", "--json"]) == 0
    out, err = capsys.readouterr()
    second = json.loads(out.strip().splitlines()[-1])
    assert f"this run logs to {tmp_path / 'version_1'}" in err
    runs = {tmp_path / "version_0": first, tmp_path / "version_1": second}
    for run, out in runs.items():
        series = scalars(run)
        assert [s for s, _ in series["epoch/loss"]] == list(range(len(out["history"])))
        assert [v for _, v in series["epoch/val_loss"]] == pytest.approx(
            [h["val_loss"] for h in out["history"]], rel=1e-6)
        assert json.loads((run / "run.json").read_text())["test_accuracy"] == \
            out["test_accuracy"]
        values, metrics = hparams(run)
        assert values["lr"] == pytest.approx(out["config"]["lr"])
        assert values["epochs"] == len(out["history"]) and values["model"] == "gcn"
        assert {"epoch/val_loss", "final/test_accuracy"} <= metrics
    assert scalars(tmp_path) == {}  # nothing at the top: the runs are its sub-folders
    run_json(capsys, "train", "--dataset", GRAPH, "--epochs", "6", "--logdir", str(tmp_path),
             "--checkpoint", str(tmp_path / "ck.pt"), "--resume")
    assert not (tmp_path / "version_2").exists()
    labelled = run_json(capsys, "train", "--dataset", GRAPH, "--epochs", "1", "--logdir",
                        str(tmp_path), "--name", "cora-gcn")
    assert labelled["logdir"] == str(tmp_path / "cora-gcn" / "version_0")


def test_runs_of_the_older_layouts_stay_where_they_are(tmp_path: Path) -> None:
    """A folder written before runs were numbered (its events at the top, ``run-N``
    beside) is left as it is: a new run takes ``version_0``, a resumed one continues
    the folder itself."""
    from sparsegnn.train.eventlog import run_logdir

    (tmp_path / "run.json").write_text("{}")
    (tmp_path / "run-2").mkdir()
    assert run_logdir(tmp_path, resume=False) == tmp_path / "version_0"
    assert run_logdir(tmp_path, resume=True) == tmp_path
    (tmp_path / "version_0").mkdir()
    (tmp_path / "version_7").mkdir()
    assert run_logdir(tmp_path, resume=False) == tmp_path / "version_8"
    assert run_logdir(tmp_path, resume=True) == tmp_path / "version_7"


def test_a_name_without_a_logdir_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--dataset", GRAPH, "--epochs", "1", "--name", "x"]) == 2
    assert "give --logdir too" in capsys.readouterr().err
