"""The results of three bench/sim_speed.py digest runs (loss, PFC without RED, a link down) stay those of
the model as recorded (a speed-up that keeps the model keeps them; a model change updates them, said why)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "sim_speed.py"

#: (case, records, fabric counters, queue samples) digests of bench/sim_speed.py --digest at 13424a7; "loss" since
#: rto16 (a go-back-N resend lost again times out an RTO after its owed ACK, not after the QP stops sending)
GOLDEN = {
    "loss": ("2b91dfc63ad604c2", "a698aee42c61d270", "e366912f10baad5f"),
    "pfc-no-red": ("c87424f6a15d03e5", "c8c1877ae676fa8a", "7960996ab6744301"),
    "link-down": ("02c380cf03e84ad0", "7160c67b20e2bc55", "adbf601f2271840c"),
}


def test_digest_runs_keep_their_results():
    spec = importlib.util.spec_from_file_location("sim_speed_bench", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    cases = bench.DIGEST_CASES
    try:
        bench.DIGEST_CASES = tuple(c for c in cases if c[0] in GOLDEN)
        rows = bench.digests()
    finally:
        bench.DIGEST_CASES = cases
    assert {name: tuple(d) for name, *d, _health in rows} == GOLDEN
