"""ACTS CSV -> TrackML CSV conversion, on hand-written ACTS files (pyacts not needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sparsegnn.errors import DataFormatError
from sparsegnn.tracking.events import read_event
from sparsegnn.tracking.simulate import convert_event

BARCODE = "particle_id_pv,particle_id_sv,particle_id_part,particle_id_gen,particle_id_subpart"


def _geometry_id(volume: int, layer: int, module: int) -> int:
    return (volume << 56) | (layer << 36) | (module << 8)


def _acts_event(directory: Path, part: int = 2) -> None:
    (directory / "event000000000-particles_simulated.csv").write_text(
        f"{BARCODE},particle_type,process,vx,vy,vz,vt,px,py,pz,m,q\n"
        "1,0,1,0,0,13,0,0,0,1.5,0,1.0,0.0,0.5,0.1,-1\n"
        f"1,0,{part},0,0,-13,0,0,0,-2.0,0,0.0,2.0,0.0,0.1,1\n"
    )
    (directory / "event000000000-hits.csv").write_text(
        f"{BARCODE},geometry_id,tx,ty,tz\n"
        f"1,0,1,0,0,{_geometry_id(8, 2, 7)},32,0,16\n"
        f"1,0,1,0,0,{_geometry_id(8, 4, 9)},72,0,36\n"
        f"1,0,2,0,0,{_geometry_id(8, 2, 3)},0,32,-2\n"
    )
    (directory / "event000000000-measurements.csv").write_text(
        "measurement_id,geometry_id,local_key,local0,local1,global_x,global_y,global_z\n"
        f"0,{_geometry_id(8, 2, 7)},,0,0,32.01,0,16\n"
        f"1,{_geometry_id(8, 4, 9)},,0,0,72.02,0,36\n"
        f"2,{_geometry_id(8, 2, 3)},,0,0,0,32.03,-2\n"
    )
    (directory / "event000000000-measurement-simhit-map.csv").write_text(
        "measurement_id,hit_id\n0,0\n1,1\n2,2\n2,0\n"
    )


def test_convert_event_round_trips_through_the_reader(tmp_path: Path) -> None:
    _acts_event(tmp_path)
    out = tmp_path / "trackml"
    out.mkdir()
    assert convert_event(tmp_path, "event000000000", out) == "event000000000"
    ev = read_event(out, "event000000000")
    assert ev.hit_id.tolist() == [1, 2, 3]
    assert (ev.volume.tolist(), ev.layer.tolist(), ev.module.tolist()) == (
        [8, 8, 8], [2, 4, 2], [7, 9, 3])
    # Measurement 2 merged two simulated hits: it takes the first one's particle.
    assert ev.particle_index.tolist() == [0, 0, 1]
    assert ev.particles.nhits.tolist() == [2, 1]
    assert ev.particles.pt.tolist() == pytest.approx([1.0, 2.0])
    assert ev.particles.vertex[:, 2].tolist() == [1.5, -2.0]
    assert ev.weight.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(ev.position[0], [32.01, 0, 16])
    assert len(set(ev.particle_id.tolist())) == 2 and (ev.particle_id > 0).all()


def test_barcode_overflow_is_an_error(tmp_path: Path) -> None:
    _acts_event(tmp_path, part=1 << 21)
    with pytest.raises(DataFormatError, match="particle_id_part does not fit"):
        convert_event(tmp_path, "event000000000", tmp_path)


@pytest.mark.slow
def test_track_simulate_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("acts")
    from sparsegnn.cli.main import main

    out = tmp_path / "sim"
    assert main(["track", "simulate", "--gun", "5", "--num-events", "2", "--out", str(out),
                 "--json"]) == 0
    assert '"events": ["event000000000", "event000000001"]' in capsys.readouterr().out
    ev = read_event(out, "event000000001")
    assert len(ev.particles) >= 5 and ev.num_hits > 20
    assert set(np.unique(ev.volume)) <= {7, 8, 9, 12, 13, 14, 16, 17, 18}
    assert sorted(p.name for p in out.iterdir()) == ["acts"] + [
        f"event00000000{i}-{kind}.csv" for i in (0, 1) for kind in ("hits", "particles", "truth")]
    assert (out / "acts" / "event000000001-measurements.csv").is_file()


class _FakeParticle:
    """The few Pythia8 ``Particle`` accessors the HepMC reduction reads."""

    def __init__(self, status: int, mother: int, pid: int = 211) -> None:
        self._status, self._mother, self._pid = status, mother, pid

    def statusHepMC(self) -> int:
        return self._status

    def mother1(self) -> int:
        return self._mother

    def id(self) -> int:
        return self._pid

    def __getattr__(self, name: str):  # momenta and vertices: any number will do
        return lambda: 1.0


def test_hepevt_keeps_beams_final_state_and_decays_with_their_ancestry() -> None:
    from sparsegnn.tracking.ttbar import _hepevt

    record = [_FakeParticle(11, 0, 90),  # Pythia's system line
              _FakeParticle(4, 0, 2212), _FakeParticle(4, 0, 2212),  # beams
              _FakeParticle(11, 1, 21),  # a parton: dropped
              _FakeParticle(2, 3, 511),  # a B from the parton: hangs off the beams
              _FakeParticle(11, 4, 413),  # an unstable intermediate from the B: dropped
              _FakeParticle(1, 5),  # its pion: hangs off the B, the nearest decayed ancestor
              _FakeParticle(1, 3)]  # a pion from the parton: hangs off the beams
    hep = _hepevt(record)
    assert hep["pid"].tolist() == [2212, 2212, 511, 211, 211]
    assert hep["status"].tolist() == [4, 4, 2, 1, 1]
    assert hep["parents"].tolist() == [[-1, -1], [-1, -1], [0, 1], [2, 2], [0, 1]]


def test_track_simulate_ttbar_with_pileup(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("acts")
    pytest.importorskip("pythia8mc")
    pytest.importorskip("pyhepmc")
    from sparsegnn.cli.main import main

    out = tmp_path / "ttbar"
    assert main(["track", "simulate", "--ttbar", "--pileup", "2", "--events", "1", "--seed",
                 "3", "--out", str(out), "--no-progress", "--json"]) == 0
    assert '"ttbar": true, "pileup": 2' in capsys.readouterr().out
    ev = read_event(out, "event000000000")
    # ttbar alone gives well over a hundred charged particles and a thousand hits.
    assert len(ev.particles) > 100 and ev.num_hits > 1000
    assert (ev.particle_index >= 0).all() and ev.particles.nhits.sum() == ev.num_hits
    assert sorted(p.name for p in out.iterdir()) == ["acts"] + [
        f"event000000000-{kind}.csv" for kind in ("hits", "particles", "truth")]
