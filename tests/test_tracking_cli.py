"""`sparsegnn track ...` through the real entry point, on the TrackML sample."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from sparsegnn.cli.main import main
from sparsegnn.data.paths import BUNDLED
from sparsegnn.tracking.infer import load_model
from sparsegnn.tracking.shipped import shipped_model
from tracking_toys import toy_graphs

SAMPLE = BUNDLED / "trackml_sample"  # the copy the package ships: runs from a clone alone
pytestmark = pytest.mark.usefixtures("one_thread")



def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_evaluate_truth_graph_on_sample(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_json(capsys, "track", "evaluate", "--events", str(SAMPLE), "--oracle",
                      "--plots", str(tmp_path))
    assert (result["graph"], result["scores"], result["num_edges"]) == ("truth", "oracle", 4230)
    assert result["num_reconstructable"] == 54 and result["tracking_efficiency"] == 1.0
    assert result["fake_rate"] == 0.0 and result["trackml_score"] == pytest.approx(1.0)
    assert result["edge_auc"] is None  # only true edges: AUC undefined, printed as null
    assert sorted(Path(p).name for p in result["plots"]) == [
        "efficiency_eta.png", "efficiency_pt.png", "scores.png"]


def test_min_track_hits_drops_short_tracks(capsys: pytest.CaptureFixture[str]) -> None:
    every = run_json(capsys, "track", "evaluate", "--events", str(SAMPLE), "--oracle")
    long = run_json(capsys, "track", "evaluate", "--events", str(SAMPLE), "--oracle",
                    "--min-track-hits", "8")
    assert long["num_tracks"] < every["num_tracks"] and long["fake_rate"] == 0.0
    # reconstructable particles with 3-7 hits lose their (only) track
    assert long["num_matched"] < every["num_matched"] == 54
    # truth graph, oracle scores: nothing lost before track building, which drops them
    assert long["missed_particles"] == {"missed": 54 - long["num_matched"], "lost_in_graph": 0,
                                        "lost_at_score_cut": 0,
                                        "lost_in_track_building": 54 - long["num_matched"]}


def test_pipeline_stages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graphs, model, tracks = tmp_path / "graphs", tmp_path / "in.pt", tmp_path / "tracks"
    built = run_json(capsys, "track", "build-graphs", "--events", str(SAMPLE), "--out", str(graphs),
                     "--phi-slope", "0.01", "--module-map", str(tmp_path / "mm.npz"))
    assert built["mean_efficiency"] == 1.0 and built["mean_num_edges"] < 14466
    assert (tmp_path / "mm.npz").is_file() and built["module_map_pairs"] == 3918
    filt = run_json(capsys, "track", "train-filter", "--graphs", str(graphs), "--out",
                    str(tmp_path / "filter.pt"), "--epochs", "2", "--hidden", "16")
    assert filt["targets_kept"] >= 0.999 and filt["edges_kept"] < 1.0
    pruned = run_json(capsys, "track", "build-graphs", "--events", str(SAMPLE), "--out",
                      str(tmp_path / "pruned"), "--phi-slope", "0.01", "--module-map",
                      str(tmp_path / "mm.npz"), "--filter", str(tmp_path / "filter.pt"))
    assert pruned["mean_num_edges"] == pytest.approx(filt["edges_kept"] * built["mean_num_edges"])
    assert pruned["mean_efficiency"] >= 0.999 and pruned["mean_purity"] > built["mean_purity"]
    trained = run_json(capsys, "track", "train", "--graphs", str(graphs), "--out", str(model),
                       "--hidden", "8", "--iterations", "1", "--epochs", "1", "--device", "cpu")
    assert trained["last_epoch"]["events_used"] == 1 and model.is_file()
    tuned = run_json(capsys, "track", "train", "--graphs", str(graphs), "--out",
                     str(tmp_path / "tuned.pt"), "--init", str(model), "--epochs", "1",
                     "--max-sample-nodes", "2000", "--seed-order", "phi", "--device", "cpu")
    epoch = tuned["last_epoch"]
    assert epoch["events_used"] == 1 and epoch["steps"] > 1
    assert epoch["max_step_nodes"] <= 2000 and epoch["edge_coverage"] > 0.95
    ckpt = tmp_path / "run.ckpt"
    run_json(capsys, "track", "train", "--graphs", str(graphs), "--out", str(tmp_path / "a.pt"),
             "--hidden", "8", "--iterations", "1", "--epochs", "1", "--checkpoint", str(ckpt))
    resumed = run_json(capsys, "track", "train", "--graphs", str(graphs), "--out",
                       str(tmp_path / "b.pt"), "--hidden", "8", "--iterations", "1", "--epochs",
                       "2", "--checkpoint", str(ckpt), "--resume", "--history")
    assert [e["epoch"] for e in resumed["history"]] == [0, 1]
    assert load_model(tmp_path / "tuned.pt").cfg == load_model(model).cfg  # hidden 8 kept
    run_json(capsys, "track", "reconstruct", "--events", str(SAMPLE), "--graphs", str(graphs),
             "--model", str(model), "--out", str(tracks), "--device", "cpu")
    with open(tracks / "event000000001-tracks.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 5527 and set(rows[0]) == {"hit_id", "track_id"}
    scored = run_json(capsys, "track", "evaluate", "--events", str(SAMPLE), "--graphs",
                      str(graphs), "--model", str(model), "--method", "walkthrough",
                      "--device", "cpu")
    assert scored["scores"] == "model" and 0.0 <= scored["tracking_efficiency"] <= 1.0
    assert 0.0 <= scored["edge_auc"] <= 1.0
    missed = scored["missed_particles"]
    assert missed["missed"] == scored["num_reconstructable"] - scored["num_matched"]
    assert missed["missed"] == sum(v for k, v in missed.items() if k != "missed")
    argv = ["track", "evaluate", "--events", str(SAMPLE), "--graphs", str(graphs), "--model",
            str(model), "--method", "triplets", "--min-track-hits", "3", "--device", "cpu"]
    loose = run_json(capsys, *argv)
    strict = run_json(capsys, *argv, "--min-layers", "6")  # fewer tracks survive
    assert 0 < strict["num_tracks"] < loose["num_tracks"]
    bridged = run_json(capsys, *argv, "--min-layers", "6", "--bridge-misfit", "16",
                       "--precision", "bf16")
    assert bridged["num_tracks"] > 0 and bridged["edge_auc"] != strict["edge_auc"]
    assert main([*argv[:-2], "--method", "walkthrough", "--bridge-misfit", "16"]) == 2
    assert "bridge_misfit" in capsys.readouterr().err
    sampled = run_json(capsys, "track", "evaluate", "--events", str(SAMPLE), "--graphs",
                       str(graphs), "--model", str(model), "--max-sample-nodes", "500",
                       "--device", "cpu")
    assert 0.0 <= sampled["edge_auc"] <= 1.0 and sampled["edge_auc"] != scored["edge_auc"]


def test_missing_graphs_is_a_clean_error(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["track", "train", "--graphs", str(tmp_path), "--out", str(tmp_path / "m")]) == 2
    assert "no graph .npz files" in capsys.readouterr().err


@pytest.mark.distributed
def test_train_over_ranks_reports_shares_and_gradient_bytes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graphs = tmp_path / "graphs"
    graphs.mkdir()
    for i, g in enumerate(toy_graphs([6, 8, 10])):
        g.save(graphs / f"event{i}.npz")
    out = run_json(capsys, "track", "train", "--graphs", str(graphs), "--out",
                   str(tmp_path / "in.pt"), "--hidden", "8", "--iterations", "1", "--epochs",
                   "2", "--nprocs", "2", "--timeout", "60", "--history")
    assert out["world_size"] == 2 and out["events_per_rank"] == [2, 1]
    assert [e["steps"] for e in out["history"]] == [2, 2]  # the rank with two events sets it
    assert all(e["events_used"] == 3 for e in out["history"])
    n_params = sum(v.numel() for v in load_model(tmp_path / "in.pt").state_dict().values())
    grads = [c["grad_allreduce"]["sent"] for c in out["comm_bytes"]]
    assert grads == [4 * 4 * n_params] * 2  # 4 steps, one float32 gradient to the other rank
    assert out["bytes_sent_per_rank"][0] > grads[0]  # plus the small statistics reductions


@pytest.mark.distributed
def test_data_parallel_training_resumes_bit_identically(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two ranks stopped after 2 of 3 epochs and resumed (each from its own checkpoint
    file): the same losses and the same weights as a run that never stopped."""
    graphs = tmp_path / "graphs"
    graphs.mkdir()
    for i, g in enumerate(toy_graphs([6, 8, 10])):
        g.save(graphs / f"event{i}.npz")
    common = ["track", "train", "--graphs", str(graphs), "--hidden", "8", "--iterations", "1",
              "--max-sample-nodes", "20", "--nprocs", "2", "--timeout", "60", "--history"]
    full = run_json(capsys, *common, "--epochs", "3", "--out", str(tmp_path / "full.pt"))
    ckpt = tmp_path / "run.ckpt"
    run_json(capsys, *common, "--epochs", "2", "--out", str(tmp_path / "part.pt"),
             "--checkpoint", str(ckpt))
    assert sorted(p.name for p in tmp_path.glob("run.rank*.ckpt")) == [
        "run.rank0.ckpt", "run.rank1.ckpt"]
    resumed = run_json(capsys, *common, "--epochs", "3", "--out", str(tmp_path / "res.pt"),
                       "--checkpoint", str(ckpt), "--resume")
    assert [e["loss"] for e in resumed["history"]] == [e["loss"] for e in full["history"]]
    a, b = load_model(tmp_path / "full.pt"), load_model(tmp_path / "res.pt")
    for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True):
        assert torch.equal(x, y)


def test_help_says_the_model_brings_its_own_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    """Every flag a model file carries says so: with --model, the global default is not
    the one used."""
    with pytest.raises(SystemExit):
        main(["track", "reconstruct", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for flag in ("--cut", "--method", "--min-track-hits", "--precision", "--min-layers",
                 "--bridge-misfit", "--extend-cut", "--merge-cut", "--graph", "--dphi",
                 "--min-dr", "--window-margin", "--map-level"):
        after = text.split(f" {flag} ", 1)[1].split(" --", 1)[0]
        assert "default: the model's setting, else" in after, (flag, after)


@pytest.mark.parametrize("stage", ["reconstruct", "evaluate"])
def test_a_missing_model_is_named_a_model_file(stage: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["track", stage, "--events", str(SAMPLE), "--model", str(tmp_path / "m.pt")]
    assert main([*argv, "--out", str(tmp_path / "t")] if stage == "reconstruct" else argv) == 2
    err = capsys.readouterr().err
    assert f"model file {tmp_path / 'm.pt'} does not exist" in err and "checkpoint" not in err


def test_reconstruct_with_no_model_uses_the_shipped_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A fresh clone reconstructs without training first; the tracks it writes score as
    ``evaluate`` (same shipped model) scores them directly."""
    shipped = str(shipped_model())
    built = run_json(capsys, "track", "reconstruct", "--events", str(SAMPLE), "--out",
                     str(tmp_path / "t"))
    assert built["model"] == shipped and built["events"][0]["num_tracks"] > 0
    assert set(built["stage_seconds_per_event"]) == {"graph", "score", "build"}
    written = run_json(capsys, "track", "evaluate", "--events", str(SAMPLE), "--tracks",
                       str(tmp_path / "t"))
    direct = run_json(capsys, "track", "evaluate", "--events", str(SAMPLE))
    assert (direct["scores"], direct["model"], direct["graph"]) == ("model", shipped,
                                                                    "module-map")
    assert written["model"] == shipped
    for key in ("tracking_efficiency", "fake_rate", "trackml_score", "num_tracks"):
        assert written[key] == direct[key], key
    assert direct["num_tracks"] == built["events"][0]["num_tracks"]


def test_oracle_and_a_model_are_refused_together(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["track", "evaluate", "--events", str(SAMPLE), "--oracle"]
    assert main([*argv, "--model", str(shipped_model())]) == 2
    assert "--oracle scores edges by their truth labels" in capsys.readouterr().err
    assert main([*argv, "--tracks", str(tmp_path)]) == 2
    assert "--oracle does not apply" in capsys.readouterr().err
