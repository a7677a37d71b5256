"""Issue 14's workload features on remote hosts: a perturbed rank and queue pairs per peer through the
controller and two real agents on 127.0.0.x — every byte delivered, the slow rank named by the straggler
attribution, flows split over the queue pairs in flows.csv."""

from __future__ import annotations

import csv
import json
import socket
from pathlib import Path

from emulator.cli import main


def _port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.50", 0))
        return s.getsockname()[1]


def _profile(path: Path, *, seed: int, warmup: int, iterations: int, ranks: int, transport: str, rest: str) -> Path:
    """A direct-fabric profile on 127.0.0.x at ``path``: the common header, ``transport`` lines (indented by 4)
    appended to the transport section, then ``rest`` (perturbations, workload)."""
    base = Path(__file__).resolve().parents[2] / "profiles" / "base" / "loopback_8.yaml"
    path.write_text(f"""extends: {base}
seed: {seed}
timeout: 60s
warmup: {warmup}
iterations: {iterations}
ranks:
  count: {ranks}
fabric:
  kind: direct
  udp_port: {_port()}
  time_dilation: 1
  ports:
    rate: 1Gbps
  transport:
    retransmit_timeout: 30ms
{transport}{rest}""")
    return path


def test_perturbation_and_qps_per_peer_on_remote_hosts(start_agent, token_file, tmp_path, capsys, profiles):
    agents = [start_agent() for _ in range(2)]
    prof = _profile(tmp_path / "p.yaml", seed=5, warmup=1, iterations=3, ranks=4,
                    transport="    qps_per_peer: 2\n", rest="""perturbations:
  - ranks: [2]
    compute_scale: 3
workload:
  generate:
    kind: data-parallel
    options: {layers: 2, params_per_layer: 256KiB, bucket_size: 512KiB, fwd: 2ms, bwd: 4ms}
""")
    _, hosts_file = profiles
    hosts = hosts_file(tmp_path / "hosts.yaml", agents, ["127.0.0.50", "127.0.0.51"], ["0-1", "2-3"])
    out = tmp_path / "out"
    code = main(["run", str(prof), "--hosts", str(hosts), "--token-file", str(token_file), "-o", str(out)])
    said = capsys.readouterr()
    assert code == 0, said.err
    doc = json.loads((out / "results.json").read_text())
    tot = doc["summary"]["totals"]
    assert doc["complete"] and tot["bytes_delivered"] == tot["bytes_scheduled"] > 0
    assert doc["perturbations"]["entries"] == [{"index": 0, "text": "injected compute ×3", "ranks": [2]}]
    top = doc["summary"]["straggler_attribution"]["ranks"][0]
    assert top["rank"] == 2 and top["last_arrival_fraction"] == 1.0
    assert "straggler attribution: rank 2 last to arrive in 100 % of instances" in said.out
    with open(out / "flows.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and all(len(r["qp_bytes"].split()) == 2 for r in rows)
    assert all(int(r["end_ns"]) >= int(r["actual_start_ns"]) for r in rows)


def test_two_jobs_on_remote_hosts_have_per_job_summaries(start_agent, token_file, tmp_path, capsys, profiles):
    agents = [start_agent() for _ in range(2)]
    prof = _profile(tmp_path / "jobs.yaml", seed=2, warmup=0, iterations=2, ranks=7, transport="", rest="""workload:
  jobs:
    - name: ar
      workload: {collectives: [{type: all_reduce, group: 0-3, size: 32KiB, algorithm: ring}]}
    - name: a2a
      start_offset: 10us
      workload: {collectives: [{type: all_to_all, group: 0-2, size: 24KiB}]}
""")
    _, hosts_file = profiles
    hosts = hosts_file(tmp_path / "hosts.yaml", agents, ["127.0.0.50", "127.0.0.51"], ["0-3", "4-6"])
    out = tmp_path / "out"
    code = main(["run", str(prof), "--hosts", str(hosts), "--token-file", str(token_file), "-o", str(out), "--quiet"])
    assert code == 0, capsys.readouterr().err
    s = json.loads((out / "results.json").read_text())["summary"]
    assert s["totals"]["bytes_delivered"] == s["totals"]["bytes_scheduled"] > 0
    ar, a2a = s["jobs"]["ar"], s["jobs"]["a2a"]
    assert ar["hosts"] == [0, 1, 2, 3] and a2a["hosts"] == [4, 5, 6]
    assert ar["flows_unfinished"] == a2a["flows_unfinished"] == 0 and ar["cct"]["count"] == a2a["cct"]["count"] == 2
    with open(out / "flows.csv", newline="") as fh:
        assert {r["job"] for r in csv.DictReader(fh)} == {"ar", "a2a"}
