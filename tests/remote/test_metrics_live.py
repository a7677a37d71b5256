"""``/metrics`` during a run: per local rank, the delivery rates (bytes/s, packets/s) of the last progress
interval, scraped mid-run from a real agent; 0 once the run is over."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.request

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from emulator.remote.metrics import delivery_rates

BYTES = "emulator_rank_delivered_bytes_per_second"
PACKETS = "emulator_rank_delivered_packets_per_second"


@given(st.floats(0.0, 100.0), st.floats(0.001, 10.0),
       st.dictionaries(st.integers(0, 63).map(str),
                       st.tuples(st.integers(0, 1 << 40), st.integers(0, 1 << 30), st.integers(0, 1 << 30),
                                 st.integers(0, 1 << 20)), max_size=8))
def test_rates_times_the_interval_are_the_deltas(t0_s, dt_s, ranks):
    prev = {"elapsed_s": t0_s, "rank_delivered": {r: [b, p] for r, (b, _, p, _) in ranks.items()}}
    cur = {"elapsed_s": t0_s + dt_s, "rank_delivered": {r: [b + db, p + dp] for r, (b, db, p, dp) in ranks.items()}}
    rates = delivery_rates(prev, cur)
    assert set(rates) == set(ranks)
    for r, (_, db, _, dp) in ranks.items():
        assert abs(rates[r][0] * (cur["elapsed_s"] - t0_s) - db) <= 1e-6 * max(1, db)
        assert abs(rates[r][1] * (cur["elapsed_s"] - t0_s) - dp) <= 1e-6 * max(1, dp)


def test_first_snapshot_counts_from_zero_and_no_interval_is_no_rate():
    assert delivery_rates({}, {"elapsed_s": 0.5, "rank_delivered": {"2": [1000, 10]}}) == {"2": (2000.0, 20.0)}
    snap = {"elapsed_s": 1.0, "rank_delivered": {"2": [1000, 10]}}
    assert delivery_rates(snap, snap) == {"2": (0.0, 0.0)}


def _scrape(url: str, token: str) -> dict[str, dict[str, float]]:
    req = urllib.request.Request(f"{url}/metrics", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=5) as r:
        text = r.read().decode()
    out: dict[str, dict[str, float]] = {BYTES: {}, PACKETS: {}}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in out:
                out[s.name][s.labels["rank"]] = s.value
    return out


def _port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.40", 0))
        return s.getsockname()[1]


def test_metrics_show_live_per_rank_rates_mid_run(start_agent, token_file, tmp_path, profiles):
    agents = [start_agent() for _ in range(2)]
    profile, hosts = profiles
    prof = profile(tmp_path / "p.yaml", "mixed:256MiB", port=_port(), timeout="60s", rate="200Mbps")
    hf = hosts(tmp_path / "hosts.yaml", agents, ["127.0.0.40", "127.0.0.41"], ["0-3", "4-7"])
    token = token_file.read_text().strip()
    ctl = subprocess.Popen([sys.executable, "-m", "emulator", "run", str(prof), "--hosts", str(hf), "--token-file",
                            str(token_file), "-o", str(tmp_path / "out"), "--quiet"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 15
        live = None
        while time.monotonic() < deadline and ctl.poll() is None:
            time.sleep(0.3)
            m = _scrape(agents[1].url, token)
            if m[BYTES] and all(v > 0 for v in m[BYTES].values()):
                live = m
                break
        assert live is not None, f"no live per-rank rates at {agents[1].url} within 15 s"
        assert set(live[BYTES]) == set(live[PACKETS]) == {"4", "5", "6", "7"}
        for r in live[BYTES]:
            assert 0 < live[BYTES][r] < 4 * 200e6 / 8  # at most the senders' line rates
            assert 0 < live[PACKETS][r] <= live[BYTES][r] / 256  # packets carry ≥ 256 B of payload
        ctl.send_signal(signal.SIGINT)
        _, stderr = ctl.communicate(timeout=15)
        assert ctl.returncode == 130, stderr
        over = _scrape(agents[1].url, token)
        assert over[BYTES] and all(v == 0 for v in over[BYTES].values())
    finally:
        if ctl.poll() is None:
            ctl.kill()
            ctl.wait(10)
