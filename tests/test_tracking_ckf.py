"""The CKF peer: hit-id mapping onto our events, and a small simulated run end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sparsegnn.errors import DataFormatError
from sparsegnn.tracking.ckf import tracks_for
from sparsegnn.tracking.events import Event, Particles, read_event


def toy_event(n: int) -> Event:
    """``n`` hits with ids 1..n, all of one particle (only the ids matter here)."""
    particles = Particles(np.array([1]), np.zeros((1, 3)), np.array([[2.0, 0.0, 0.0]]),
                          np.array([1]), np.array([n]))
    return Event("toy", np.arange(1, n + 1), np.zeros((n, 3)), np.full(n, 8), np.arange(n),
                 np.ones(n, dtype=np.int64), np.ones(n, dtype=np.int64),
                 np.zeros(n, dtype=np.int64), np.ones(n), particles)


def test_tracks_for_labels_our_hits_and_keeps_shared_hits_with_the_first_track() -> None:
    ev = toy_event(7)  # hit ids 1..7
    tracks = tracks_for(ev, [[1, 2, 3, 4], [4, 5, 6]])
    assert tracks.hit_track.tolist() == [0, 0, 0, 0, 1, 1, -1]


def test_tracks_for_rejects_hit_ids_the_event_does_not_have() -> None:
    ev = toy_event(3)
    with pytest.raises(DataFormatError, match="not in the event"):
        tracks_for(ev, [[1, 2, 9]])
    assert tracks_for(ev, []).num_tracks == 0


def test_ckf_states_find_their_measurement_by_module_and_position() -> None:
    from sparsegnn.tracking.ckf import match_measurements

    # Module 7 holds three measurements; a reader that reorders them within the module
    # must not change which one a state means (matching by index would).
    meas = {"measurement_id": np.arange(5), "geometry_id": np.array([7, 3, 7, 9, 7]),
            "local0": np.array([1.0, 0.0, -2.0, 5.0, 1.0]),
            "local1": np.array([4.0, 0.0, 3.0, 5.0, -4.0])}
    module = np.array([7, 7, 9, 7, 3])
    local = np.array([[1.0, -4.0], [-2.0, 3.0], [5.0, 5.0], [1.0, 4.0 + 1e-6], [0.0, 0.0]])
    assert match_measurements(meas, module, local).tolist() == [4, 2, 3, 0, 1]
    with pytest.raises(DataFormatError, match="match no measurement"):
        match_measurements(meas, np.array([7]), np.array([[1.0, 0.0]]))  # nothing there
    with pytest.raises(DataFormatError, match="match no measurement"):
        match_measurements(meas, np.array([8]), np.array([[1.0, 4.0]]))  # unknown module


def test_ckf_finds_most_reconstructable_particles(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("acts")
    from sparsegnn.cli.main import main
    from sparsegnn.tracking.ckf import run_ckf
    from sparsegnn.tracking.simulate import GunConfig, simulate_gun

    out = tmp_path / "sim"
    simulate_gun(out, GunConfig(events=2, particles=30, pt_min=1.0, seed=7))
    run = run_ckf(out)
    assert list(run.tracks) == ["event000000000", "event000000001"]
    for name, tracks in run.tracks.items():
        ev = read_event(out, name)
        hit_ids = np.concatenate([np.asarray(t) for t in tracks])
        assert np.isin(hit_ids, ev.hit_id).all()
    # Double-majority matching through OUR truth: a wrong id map (measurements are ordered
    # by module, not by particle) would leave almost every track unmatched.
    capsys.readouterr()
    assert main(["track", "ckf", "--events", str(out), "--max-seeds-per-spm", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["tracking_efficiency"] > 0.8 and result["fake_rate"] < 0.1
    assert result["seconds_per_event"] > 0 and result["events"] == 2


def test_track_demo_runs_end_to_end_next_to_the_ckf(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("acts")
    from sparsegnn.cli.main import main

    out = tmp_path / "demo"
    assert main(["track", "demo", "--out", str(out), "--particles", "40", "--train-events", "2",
                 "--test-events", "1", "--epochs", "2", "--no-progress", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["config"]["min_track_hits"] == 5 and result["config"]["epochs"] == 2
    assert result["num_matched"] / result["num_reconstructable"] == result["tracking_efficiency"]
    assert result["edge_auc"] > 0.7  # trained: an untrained classifier sits near 0.5
    assert result["ckf"]["tracking_efficiency"] > 0.8 and result["seconds_per_event"] > 0
    assert (out / "model.pt").is_file() and all(Path(p).is_file() for p in result["plots"])
    assert {"simulate", "train", "reconstruct", "ckf"} <= set(result["stage_seconds"])


def test_track_demo_refuses_a_directory_with_files(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sparsegnn.cli.main import main

    (tmp_path / "keep.txt").write_text("mine")
    assert main(["track", "demo", "--out", str(tmp_path)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (tmp_path / "keep.txt").read_text() == "mine"
