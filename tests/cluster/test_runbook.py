"""The SLURM script of the multi-node runbook (``docs/examples/sparsegnn.sbatch``) run on
two namespace hosts (:mod:`testbed.netns`).

There is no SLURM here, so two stand-ins play it: ``scontrol show hostnames`` lists the
hosts' addresses, and ``srun`` runs its command once per host inside that host's
namespace with ``SLURM_NODEID`` set and ``IFACE`` naming the host's interface (on a real
cluster every node's interface has the same name; here each namespace's differs). The
python the script runs is a wrapper that records each node's command line, so the test
checks that the script starts exactly the torchrun of :func:`testbed.launch.torchrun_argv`, the
launch the cluster tests check. A second submission must resume from the first one's
checkpoint, as a requeued job does. Needs root (skipped otherwise). The runbook's copy of
the script is checked against the file everywhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from testbed.launch import PORT, RUN_S, last_json, torchrun_argv
from testbed.netns import Cluster, available, sweep_stale

from sparsegnn.cli.main import main

_AVAILABLE, _WHY = available()
_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = _ROOT / "docs" / "examples" / "sparsegnn.sbatch"
_JOB_ID = "4242"
_NPROC = 2
_STUBS = {
    "scontrol": '#!/bin/bash\n[ "$1 $2" = "show hostnames" ] && tr , "\\n" <<< "$3"\n',
    # srun --opts CMD...: CMD once per "node" of $FAKE_NODES (netns:ifname), exit: the worst
    "srun": """#!/bin/bash
while [[ $1 == --* ]]; do shift; done
i=0; pids=()
for node in $FAKE_NODES; do
  ip netns exec "${node%%:*}" env SLURM_NODEID=$i IFACE="${node#*:}" "$@" & pids+=($!)
  i=$((i + 1))
done
rc=0; for p in "${pids[@]}"; do wait "$p" || rc=$?; done; exit $rc
""",
    # the python the script runs: records its arguments per node, then is the real one
    "python": f"""#!/bin/bash
printf '%s\\n' "$@" > "$ARGV_LOG.$SLURM_NODEID"
exec {sys.executable} "$@"
""",
}


def test_runbook_shows_the_script_as_it_is() -> None:
    """docs/distributed.md shows the script in full; that copy must not drift from it."""
    doc = (_ROOT / "docs" / "distributed.md").read_text()
    assert f"```bash\n{SCRIPT.read_text()}```" in doc


def _stubs(folder: Path) -> Path:
    folder.mkdir()
    for name, text in _STUBS.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    return folder


def _submit(c: Cluster, stubs: Path, dataset: Path, ckpt: Path, epochs: int,
            argv_log: Path) -> subprocess.CompletedProcess[str]:
    """``bash sparsegnn.sbatch`` as sbatch would start it on the first node, for a
    two-node allocation of ``_NPROC`` ranks each."""
    env = {
        **os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "PYTHON": str(stubs / "python"),
        "SLURM_JOB_NODELIST": ",".join(h.address for h in c.hosts),
        "SLURM_NNODES": str(len(c.hosts)), "SLURM_JOB_ID": _JOB_ID,
        "FAKE_NODES": " ".join(f"{h.netns}:{h.ifname}" for h in c.hosts),
        "ARGV_LOG": str(argv_log), "DATASET": str(dataset), "CKPT": str(ckpt),
        "NPROC_PER_NODE": str(_NPROC),
        "TRAIN_ARGS": f"--algo 2d --epochs {epochs} --checkpoint-every 1 --timeout 60 "
                      "--dtype float64 --dropout 0 --no-progress",
    }
    try:
        return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True,
                              text=True, timeout=RUN_S, check=False)
    except subprocess.TimeoutExpired as err:  # say where it stood, not only that it hung
        tail = (err.stderr or b"")[-3000:]
        out = (err.stdout or b"")[-1000:]
        text = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
        printed = out.decode(errors="replace") if isinstance(out, bytes) else out
        pytest.fail(f"the script ran past {RUN_S:.0f} s; stdout ends {printed!r}; "
                    f"stderr ends:\n{text}")


@pytest.mark.distributed
@pytest.mark.skipif(not _AVAILABLE, reason=_WHY)
def test_sbatch_script_runs_the_tested_torchrun_and_resumes(tmp_path: Path) -> None:
    """Two hosts x 2 ranks, 2D: the script's run trains on 4 ranks and checkpoints; its
    torchrun command lines are the harness's; submitted again for one more epoch, it
    resumes from the last complete checkpoint."""
    graph, folder = tmp_path / "g.npz", tmp_path / "parts"
    assert main(["data", "generate", "sbm:nodes=400,blocks=4,degree=6", "--out", str(graph)]) == 0
    assert main(["data", "partition", str(graph), str(folder), "--algo", "2d",
                 "--nprocs", "4"]) == 0
    stubs, ckpt = _stubs(tmp_path / "bin"), tmp_path / "ckpt"
    sweep_stale()  # clusters a crashed earlier run left
    with Cluster(2) as c:
        first = _submit(c, stubs, folder, ckpt, 2, tmp_path / "argv")
        assert first.returncode == 0, first.stderr[-3000:]
        again = _submit(c, stubs, folder, ckpt, 3, tmp_path / "argv-again")
        assert again.returncode == 0, again.stderr[-3000:]
    ran, resumed = last_json(first.stdout), last_json(again.stdout)
    assert ran["world_size"] == 4 and ran["epochs_run"] == 2
    assert (ckpt / "epoch-000002" / "manifest.json").is_file()
    assert resumed["resumed_from"]["epoch"] == 2 and resumed["epochs_run"] == 3
    endpoint = f"{c.hosts[0].address}:{PORT}"
    for i, h in enumerate(c.hosts):
        argv = (tmp_path / f"argv.{i}").read_text().splitlines()
        tested = torchrun_argv(2, _NPROC, i, endpoint, _JOB_ID, h.address, [])[1:]
        assert argv[:len(tested)] == tested
