"""flows.csv per-QP detail with transport.qps_per_peer = Q: each part's bytes, start, end and UDP source
port, while the flow's own start, end and FCT stay per logical transfer."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from emulator.cli import main
from emulator.results.io import read_results


def _rows(tmp_path: Path, q: int, fabric: str = "sim") -> list[dict[str, str]]:
    profile = {"name": "t", "seed": 4, "ranks": {"count": 4}, "warmup": 1, "iterations": 1, "timeout": "30s",
               "fabric": {"kind": fabric, "ports": {"rate": "1Gbps"}, "transport": {"qps_per_peer": q}},
               "workload": {"collectives": [{"type": "all_to_all", "group": "0-3", "size": "300001B"}]}}
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(profile))
    assert main(["run", str(path), "-o", str(tmp_path / "r"), "--quiet"]) == 0
    with open(tmp_path / "r" / "flows.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split()]


@pytest.mark.parametrize("q", [1, 4])
def test_each_part_has_its_bytes_start_end_and_port_on_sim(tmp_path: Path, q: int) -> None:
    rows = _rows(tmp_path, q)
    assert len(rows) == 2 * 12
    for row in rows:
        size, start, end = int(row["size_bytes"]), int(row["actual_start_ns"]), int(row["end_ns"])
        parts, starts, ends = _ints(row["qp_bytes"]), _ints(row["qp_start_ns"]), _ints(row["qp_end_ns"])
        assert len(parts) == len(starts) == len(ends) == len(row["udp_sports"].split()) == int(row["qps"]) == q
        assert sum(parts) == size and max(parts) - min(parts) <= 1  # split evenly
        assert min(starts) == start >= 0  # the flow starts with its first part
        assert max(ends) == end  # and ends with its last one: FCT stays per logical transfer
        assert all(e > s >= 0 for s, e in zip(starts, ends, strict=True))
    if q > 1:  # parts of one flow do not all end at the same time
        assert any(len(set(_ints(r["qp_end_ns"]))) > 1 for r in rows)


def test_the_part_log_survives_the_records_file(tmp_path: Path) -> None:
    _rows(tmp_path, 4)
    recs = read_results(tmp_path / "r").records()
    from emulator.endpoint.records import PART_HELD

    rows = sum(len(r.part_t_ns) for r in recs.values())
    held = sum(r.part_kind.count(PART_HELD) for r in recs.values())
    assert rows == 2 * 12 * 4 * 3  # per flow and part: its SEND start, its RECV start and its RECV held
    assert held == 2 * 12 * 4
