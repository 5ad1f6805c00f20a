"""`Reconstruction`: the stages as one object, the tuning rule, the model file's settings,
and the stages chained on disk (`reconstruct --model M`, `evaluate --tracks DIR`)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from sparsegnn.cli.main import main
from sparsegnn.data.paths import BUNDLED
from sparsegnn.errors import DataFormatError, InvalidValueError
from sparsegnn.tracking.building import MIN_TRACK_HITS, Triplets, Walkthrough, candidates
from sparsegnn.tracking.doublet_cuts import DoubletCuts
from sparsegnn.tracking.events import read_events
from sparsegnn.tracking.infer import load_model, load_track_model, predict, save_model
from sparsegnn.tracking.metrics import combine, track_metrics
from sparsegnn.tracking.model import INConfig
from sparsegnn.tracking.module_map import ModuleMap
from sparsegnn.tracking.pipeline import (
    Reconstruction,
    evaluate_events,
    score_written_tracks,
    tune,
)
from sparsegnn.tracking.reco import build_tracks
from sparsegnn.tracking.settings import RecoConfig
from sparsegnn.tracking.stage_outputs import read_tracks, write_tracks
from sparsegnn.tracking.train import TrackTrainConfig, TrainReport, train
from tracking_toys import straight_tracks

SAMPLE = BUNDLED / "trackml_sample"  # the copy the package ships: runs from a clone alone
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def trained() -> tuple[Reconstruction, list, list]:
    """A small model on toy events with its reconstruction (module map, cuts)."""
    train_events = [straight_tracks(12, seed) for seed in range(3)]
    test_events = [straight_tracks(12, seed) for seed in (10, 11)]
    settings = RecoConfig(cuts=DoubletCuts(dphi=0.5), building=Walkthrough())
    reco = Reconstruction(settings, module_map=ModuleMap.learn(train_events))
    graphs = [reco.graph(ev) for ev in train_events]
    reco.model, _ = train(graphs, TrackTrainConfig(model=INConfig(hidden=8, iterations=1),
                                                   epochs=3))
    return reco, train_events, test_events


def test_stages_compose_as_the_functions_do(trained) -> None:
    reco, _, events = trained
    out = reco.run(events[0])
    scores = predict(reco.model, out.graph)
    np.testing.assert_array_equal(out.scores.scores, scores.scores)
    expected = build_tracks(scores, reco.config.building)
    np.testing.assert_array_equal(out.tracks.hit_track, expected.hit_track)
    oracle = Reconstruction(RecoConfig(graph="truth"))
    run = evaluate_events(oracle, events)
    assert run.tracks.efficiency == 1.0 and run.tracks.fake_rate == 0.0
    assert run.seconds > 0 and len(run.results) == 2


def test_prepare_makes_what_every_event_shares_before_the_clock(trained) -> None:
    """The map's search ranges and the scoring copy exist after prepare(), so the first
    timed event does not pay for them; the reconstruction is unchanged."""
    reco, _, events = trained
    fresh = replace(reco, module_map=ModuleMap.learn([straight_tracks(12, 0)]))
    before = fresh.run(events[0]).tracks.hit_track
    fresh = replace(reco, module_map=ModuleMap.learn([straight_tracks(12, 0)]))
    assert not fresh.module_map._ranges and fresh._scorer is None
    assert fresh.prepare() is fresh
    assert list(fresh.module_map._ranges) and fresh._scorer is not None
    np.testing.assert_array_equal(fresh.run(events[0]).tracks.hit_track, before)


def test_tune_picks_the_best_pair_on_training_events(trained) -> None:
    reco, train_events, _ = trained
    tuned = tune(reco, train_events[:2], choices=candidates(Walkthrough(), (0.3, 0.7), (2, 5)))
    scores = [reco.score(reco.graph(ev)) for ev in train_events[:2]]

    def quality(cut: float, n: int) -> float:
        m = combine([track_metrics(ev, build_tracks(s, Walkthrough(cut=cut, min_track_hits=n)))[0]
                     for ev, s in zip(train_events[:2], scores, strict=True)])
        return m.efficiency - m.fake_rate

    best = max(quality(c, n) for c in (0.3, 0.7) for n in (2, 5))
    found = tuned.config.building
    assert quality(found.cut, found.min_track_hits) == best
    assert found == Walkthrough(cut=found.cut, min_track_hits=found.min_track_hits)
    assert tuned.model is reco.model
    # with the looser passes among the choices, the winner is at least as good
    choices = candidates(Walkthrough(), (0.3, 0.7), (2, 5), loose=(None, 0.5))
    loose = tune(reco, train_events[:2], choices=choices)
    cfg = loose.config.building
    assert cfg.extend_cut == cfg.merge_cut and cfg.extend_cut in (None, 0.5 * cfg.cut)
    m = combine([track_metrics(ev, loose.build(s))[0]
                 for ev, s in zip(train_events[:2], scores, strict=True)])
    assert m.efficiency - m.fake_rate >= best


def test_tune_weighs_each_group_the_same(trained) -> None:
    reco, train_events, _ = trained
    events = train_events[:3]
    names = ["a", "a", "b"]
    reco = reco.with_config(method="triplets")
    choices = candidates(Triplets(), (0.3, 0.7), (2, 5), min_layers=(1, 5))
    tuned = tune(reco, events, choices=choices, groups=names)
    scores = [reco.score(reco.graph(ev)) for ev in events]

    def quality(building: Triplets) -> float:
        trial = replace(reco, config=replace(reco.config, building=building))
        per = [track_metrics(ev, trial.build(s, ev))[0]
               for ev, s in zip(events, scores, strict=True)]
        a, b = combine(per[:2]), combine(per[2:])
        return ((a.efficiency - a.fake_rate) + (b.efficiency - b.fake_rate)) / 2

    best = max(quality(Triplets(cut=c, min_track_hits=n, min_layers=k))
               for c in (0.3, 0.7) for n in (2, 5) for k in (1, 5))
    assert quality(tuned.config.building) == best and tuned.config.building.method == "triplets"
    with pytest.raises(InvalidValueError, match="groups"):
        tune(reco, events, groups=["a"])

def test_model_file_carries_its_reconstruction(trained, tmp_path: Path) -> None:
    reco, _, events = trained
    tuned = reco.with_config(cut=0.4, min_track_hits=3)
    tuned.save(tmp_path / "m.pt", TrainReport(1.0))
    again = Reconstruction.from_model(tmp_path / "m.pt")
    assert again.config == tuned.config
    np.testing.assert_array_equal(again.module_map.pairs, reco.module_map.pairs)
    np.testing.assert_array_equal(again.run(events[0]).tracks.hit_track,
                                  tuned.run(events[0]).tracks.hit_track)
    # a file without settings (older) loads with the defaults
    save_model(tmp_path / "old.pt", reco.model, TrainReport(1.0))
    old = load_track_model(tmp_path / "old.pt")
    assert old.settings is None and old.module_map is None
    assert Reconstruction.from_model(old).config == RecoConfig()
    assert RecoConfig().building.min_track_hits == MIN_TRACK_HITS
    assert load_model(tmp_path / "m.pt").cfg == reco.model.cfg


def test_written_tracks_read_back_the_same(trained, tmp_path: Path) -> None:
    reco, _, events = trained
    tracks = reco.run(events[0]).tracks
    write_tracks(tmp_path / "t.csv", events[0], tracks)
    back = read_tracks(tmp_path / "t.csv", events[0])
    assert track_metrics(events[0], back)[0] == track_metrics(events[0], tracks)[0]
    (tmp_path / "bad.csv").write_text("hit_id,track_id\n1,0\n")
    with pytest.raises(DataFormatError, match="hit ids"):
        read_tracks(tmp_path / "bad.csv", events[0])


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_reconstruct_uses_the_saved_settings_and_evaluate_scores_its_tracks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A model saved with its reconstruction: `reconstruct --model M` alone reproduces it
    (the same metrics as the library's), `evaluate --tracks` scores what it wrote, and a
    flag still overrides a saved setting."""
    events = read_events(SAMPLE)
    settings = RecoConfig(cuts=DoubletCuts(phi_slope=0.01),
                          building=Walkthrough(cut=0.3, min_track_hits=4))
    reco = Reconstruction(settings, module_map=ModuleMap.learn(events))
    reco.model, report = train([reco.graph(ev) for ev in events],
                               TrackTrainConfig(model=INConfig(hidden=8, iterations=1),
                                                epochs=1))
    reco.save(tmp_path / "m.pt", report)
    expected = evaluate_events(reco, events).tracks

    out = _json(capsys, "track", "reconstruct", "--events", str(SAMPLE), "--model",
                str(tmp_path / "m.pt"), "--out", str(tmp_path / "tracks"), "--device", "cpu")
    assert out["settings"] == settings.to_dict()
    _assert_timed(out)
    scored = _json(capsys, "track", "evaluate", "--events", str(SAMPLE), "--tracks",
                   str(tmp_path / "tracks"))
    assert {k: scored[k] for k in expected.to_dict()} == pytest.approx(expected.to_dict())
    assert scored["settings"] == settings.to_dict()
    assert score_written_tracks(events, tmp_path / "tracks")[0] == expected
    # evaluate --model rebuilds the same tracks from the same saved settings
    direct = _json(capsys, "track", "evaluate", "--events", str(SAMPLE), "--model",
                   str(tmp_path / "m.pt"), "--device", "cpu")
    assert direct["tracking_efficiency"] == scored["tracking_efficiency"]
    _assert_timed(direct)
    assert (direct["cut"], direct["min_track_hits"]) == (0.3, 4)

    override = _json(capsys, "track", "reconstruct", "--events", str(SAMPLE), "--model",
                     str(tmp_path / "m.pt"), "--out", str(tmp_path / "tracks2"), "--cut",
                     "0.9", "--min-track-hits", "2", "--device", "cpu")
    assert (override["settings"]["cut"], override["settings"]["min_track_hits"]) == (0.9, 2)
    assert override["settings"]["cuts"] == settings.to_dict()["cuts"]
    assert main(["track", "evaluate", "--events", str(SAMPLE), "--tracks",
                 str(tmp_path / "m.pt")]) == 2
    assert "manifest.json" in capsys.readouterr().err


def _assert_timed(result: dict) -> None:
    """Seconds per event in all and by stage (graph, score, build), the stages adding up."""
    stages = result["stage_seconds_per_event"]
    assert set(stages) == {"graph", "score", "build"} and min(stages.values()) > 0
    assert sum(stages.values()) == pytest.approx(result["seconds_per_event"], rel=0.05)
