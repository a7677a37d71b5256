"""``emulator rank`` under launchers: rank/world/local rank from each launcher's environment, and a real
``mpirun -np 4`` run whose rank 0 writes one merged results directory."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys

import pytest

from emulator.errors import ConfigError
from emulator.remote.api import Refusal
from emulator.remote.launch import LaunchInfo, Rendezvous, launcher_env


@pytest.mark.parametrize("env, want", [
    ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1"},
     LaunchInfo(3, 8, 1, "mpirun (Open MPI)")),
    ({"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "2"}, LaunchInfo(5, 6, 2, "srun (Slurm)")),
    ({"PMI_RANK": "1", "PMI_SIZE": "2"}, LaunchInfo(1, 2, 1, "PMI")),
    ({"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "0"}, LaunchInfo(0, 4, 0, "torchrun")),
    # Open MPI wins over a stray torchrun-style RANK
    ({"RANK": "9", "WORLD_SIZE": "10", "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"},
     LaunchInfo(0, 2, 0, "mpirun (Open MPI)")),
])
def test_launcher_environments(env, want):
    assert launcher_env(env) == want


@pytest.mark.parametrize("env, message", [
    ({}, "no launcher environment"),
    ({"RANK": "x", "WORLD_SIZE": "4"}, "must be integers"),
    ({"SLURM_PROCID": "6", "SLURM_NTASKS": "6"}, "is not a rank of"),
])
def test_bad_launcher_environments(env, message):
    with pytest.raises(ConfigError, match=message):
        launcher_env(env)


def test_rendezvous_refuses_a_second_agent_for_one_rank():
    rdv = Rendezvous(2)
    rdv.add(0, "http://a:1", "10.0.0.1")
    rdv.add(0, "http://a:1", "10.0.0.1")  # the same again: idempotent
    with pytest.raises(Refusal) as exc:
        rdv.add(0, "http://b:1", "10.0.0.2")
    assert exc.value.status == 409
    assert not rdv.complete()
    rdv.add(1, "http://b:1", "10.0.0.2")
    assert rdv.complete() and rdv.plan().rank_addresses() == ("10.0.0.1", "10.0.0.2")


def test_mpirun_four_ranks_rank0_writes_the_merged_results(tmp_path, token_file, profiles):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun not installed (Debian's openmpi-bin; .ci/run installs it)")
    with socket.socket() as s:
        s.bind(("127.0.0.71", 0))
        master_port = s.getsockname()[1]
    prof = profiles[0](tmp_path / "rank.yaml", """  collectives:
    - type: all_to_all
      group: 0-3
      size: 1MiB
      algorithm: direct
      iterations: 1
""", port=master_port, ranks=4)
    out = tmp_path / "out"
    emulator = [sys.executable, "-m", "emulator"]
    res = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "4", *emulator, "rank", str(prof),
                          "-o", str(out), "--token-file", str(token_file), "--quiet",
                          "--addresses", "127.0.0.71,127.0.0.72,127.0.0.73,127.0.0.74",
                          "--master", f"127.0.0.71:{master_port}"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads((out / "results.json").read_text())
    tot = doc["summary"]["totals"]
    assert doc["complete"] and tot["bytes_delivered"] == tot["bytes_scheduled"] == 3 << 20  # 4 × 3 peers × 1 MiB / 4
    hosts = doc["driver"]["health"]["hosts"]
    assert [h["ranks"] for h in hosts] == [[0], [1], [2], [3]]
    assert [h["addresses"] for h in hosts] == [["127.0.0.71"], ["127.0.0.72"], ["127.0.0.73"], ["127.0.0.74"]]
