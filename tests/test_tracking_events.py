"""TrackML CSV reader: the real sample, and malformed files that must name file and line."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest

from sparsegnn.data.paths import BUNDLED
from sparsegnn.errors import DataFormatError
from sparsegnn.tracking.events import event_files, module_key, read_event, read_events

SAMPLE = BUNDLED / "trackml_sample"  # the copy the package ships: runs from a clone alone
PREFIX = "event000000001"


def test_reads_real_sample() -> None:
    ev = read_event(SAMPLE, PREFIX)
    assert ev.num_hits == 5527 and len(ev.particles) == 548
    assert np.all(np.diff(ev.hit_id) > 0)
    noise = ev.particle_id == 0
    assert noise.sum() == 829 and np.all(ev.particle_index[noise] == -1)
    pid = ev.particles.particle_id
    assert np.array_equal(pid[ev.particle_index[~noise]], ev.particle_id[~noise])
    # The sample keeps whole particles: hits present == nhits column.
    assert np.array_equal(np.bincount(ev.particle_index[~noise], minlength=548), ev.particles.nhits)
    assert set(np.unique(ev.volume)) == {7, 8, 9, 12, 13, 14, 16, 17, 18}
    np.testing.assert_allclose(ev.r, np.hypot(ev.x, ev.y))
    assert ev.particles.pt.max() == pytest.approx(13.0733, abs=1e-3)
    assert int(((ev.particles.pt >= 1) & (ev.particles.nhits >= 3)).sum()) == 54


def test_event_discovery() -> None:
    assert event_files(SAMPLE) == [PREFIX]
    assert read_events(SAMPLE)[0].name == PREFIX


def test_module_key_is_unique_per_triple() -> None:
    keys = module_key(np.array([7, 7, 8]), np.array([2, 2, 2]), np.array([1, 2, 1]))
    assert len(set(keys.tolist())) == 3


def _write(directory: Path, kind: str, text: str, gz: bool = False) -> Path:
    path = directory / f"event1-{kind}.csv{'.gz' if gz else ''}"
    data = text.encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


HITS = (
    "hit_id,x,y,z,volume_id,layer_id,module_id\n"
    "1,10,0,5,8,2,1\n2,20,0,10,8,4,1\n3,30,1,15,8,6,1\n"
)
TRUTH = (
    "hit_id,particle_id,tx,ty,tz,tpx,tpy,tpz,weight\n"
    "1,7,0,0,0,0,0,0,0.5\n2,7,0,0,0,0,0,0,0.5\n3,0,0,0,0,0,0,0,0\n"
)
PARTS = "particle_id,particle_type,vx,vy,vz,px,py,pz,q,nhits\n7,13,0,0,0,1,0,0.5,1,2\n"


def _event_dir(tmp_path: Path, hits: str = HITS, truth: str = TRUTH, parts: str = PARTS) -> Path:
    _write(tmp_path, "hits", hits)
    _write(tmp_path, "truth", truth, gz=True)
    _write(tmp_path, "particles", parts)
    return tmp_path


def test_plain_and_gzip_mix(tmp_path: Path) -> None:
    ev = read_event(_event_dir(tmp_path), "event1")
    assert ev.particle_index.tolist() == [0, 0, -1]
    assert ev.particles.nhits.tolist() == [2]
    assert ev.particles.eta[0] == pytest.approx(np.arcsinh(0.5))


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"hits": HITS.replace("volume_id,", "")}, "hits.csv: missing column(s) ['volume_id']"),
        ({"hits": HITS.replace("2,20,0,10", "2,nan,0,10")}, "event1-hits.csv: line 3, column 'x'"),
        ({"hits": HITS.replace("3,30,1,", "3,30,oops,")}, "line 4, column 'y': cannot parse"),
        ({"hits": HITS.replace("3,30,1,15,8,6,1", "3,30,1,15,8,6")}, "line 4 has 6 fields"),
        ({"hits": HITS.replace("\n3,", "\n2,")}, "hits.csv: line 4: hit_id 2 appears twice"),
        ({"truth": TRUTH.replace("\n2,7,", "\n2,99,")}, "truth.csv.gz: line 3: particle_id 99"),
        ({"truth": TRUTH.replace("\n3,0,", "\n4,0,")}, "truth.csv.gz: line 4: hit_id 4 is not in"),
        ({"parts": PARTS.replace("\n7,", "\n0,")}, "particles.csv: line 2: particle_id 0 is"),
        ({"parts": PARTS.replace("0,0.5,1,2", "0,inf,1,2")}, "column 'pz': value 'inf' is not"),
    ],
)
def test_malformed_files_name_file_and_line(tmp_path: Path, kwargs: dict[str, str],
                                            fragment: str) -> None:
    with pytest.raises(DataFormatError) as err:
        read_event(_event_dir(tmp_path, **kwargs), "event1")
    assert fragment in str(err.value)


def test_missing_file_and_bad_gzip(tmp_path: Path) -> None:
    _event_dir(tmp_path)
    (tmp_path / "event1-particles.csv").unlink()
    with pytest.raises(DataFormatError, match=r"event1-particles.csv\[.gz\]: file not found"):
        read_event(tmp_path, "event1")
    _write(tmp_path, "particles", PARTS)
    shutil.copy(tmp_path / "event1-hits.csv", tmp_path / "event1-truth.csv.gz")
    with pytest.raises(DataFormatError, match=r"truth\.csv\.gz: cannot be read as CSV"):
        read_event(tmp_path, "event1")


def test_directory_without_events(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match=r"no '\*-hits\.csv'"):
        read_events(tmp_path)
