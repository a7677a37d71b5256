"""Plots: every figure function returns a decodable PNG, also for empty input (headless, Agg)."""

from __future__ import annotations

import io

import numpy as np
import pytest

from emulator.report import plots


def _decode(png: bytes) -> np.ndarray:
    from matplotlib.image import imread

    assert png.startswith(plots.PNG_MAGIC)
    img = imread(io.BytesIO(png), format="png")
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
    return img


def _not_blank(img: np.ndarray) -> None:
    assert float(img[..., :3].std()) > 0.01  # something was drawn


def test_cct_cdf() -> None:
    rng = np.random.default_rng(1)
    png = plots.cct_cdf_png({"all_reduce": rng.integers(1_000_000, 2_000_000, 50),
                             "all_to_all": rng.integers(200_000, 900_000, 7)})
    _not_blank(_decode(png))


def test_straggler_heatmap_with_non_members() -> None:
    lat = np.arange(8 * 12, dtype=np.float64).reshape(8, 12) * 1000 - 20_000
    lat[3, 4] = np.nan  # rank 3 not in instance 4
    _not_blank(_decode(plots.straggler_heatmap_png(lat, list(range(8)))))
    _decode(plots.straggler_heatmap_png(lat[:, :5], list(range(8)), [f"i{k}" for k in range(5)]))


def test_port_timeseries() -> None:
    t = np.arange(0, 2_000_000, 1000)
    q = (np.sin(t / 1e5) + 1) * 100_000
    rates = {f"rank {r} QP {r}": (t[::10], np.full(t[::10].shape, 25e9 / (r + 1))) for r in range(14)}
    png = plots.port_timeseries_png("leaf0->spine1", t, q, rates, kmin_bytes=50_000, kmax_bytes=200_000)
    _not_blank(_decode(png))


def test_fct_slowdown_by_size() -> None:
    buckets = [{"min_size_bytes": s, "max_size_bytes": 2 * s, "flows": 10, "median_slowdown": 1.0 + k,
                "p95_slowdown": 2.0 + k, "p99_slowdown": 3.0 + k} for k, s in enumerate((1024, 65536, 1 << 20))]
    _not_blank(_decode(plots.fct_slowdown_png(buckets)))


def test_grouped_bars() -> None:
    png = plots.grouped_bars_png(["AR cv", "A2A p99/p50"], ["alone", "mixed"], [[0.01, 0.2], [1.0, None]],
                                 "value", "study")
    _not_blank(_decode(png))


@pytest.mark.parametrize("make", [
    lambda: plots.cct_cdf_png({}),
    lambda: plots.cct_cdf_png({"all_reduce": []}),
    lambda: plots.straggler_heatmap_png(np.zeros((0, 0)), []),
    lambda: plots.port_timeseries_png("p", np.zeros(0), np.zeros(0), {}),
    lambda: plots.fct_slowdown_png([]),
])
def test_empty_inputs_still_render(make) -> None:
    _decode(make())
