"""Named congestion-control presets: RP parameter sets, and the matching NP and CP (RED) settings.

=============  =========  ======================================================================
preset         RP form    source (docs/dcqcn.md)
=============  =========  ======================================================================
``paper``      paper      SIGCOMM 2015 values (§4.1): g 1/256, K = T = 55 µs, B 10 MB, F 5,
                          R_AI 40 Mb/s, R_HAI 200 Mb/s; NP 50 µs (deferred); RED 5 KB/200 KB/1 %
``connectx``   firmware   NVIDIA ConnectX-4+ defaults (§5.1), α without rounding (see
                          ``params.ALPHA_ROUNDINGS``), ``rate_to_set_on_first_cnp`` 0 = keep the
                          current rate; NP ``min_time_between_cnps`` 4 µs; RED = NVIDIA switch
                          "RoCE lossless" defaults (§6) 150 KB / 1500 KB, Pmax 1.0 (assumed: §6
                          gives no probability)
``hpcc-ns3``   firmware   HPCC ns-3 ``run.py --cc dcqcn`` (§5.2): float α, g 1/256, α 1 µs, cut check
                          4 µs, timer 300 µs, F 1, no byte counter, AI/HAI 5/50 Mb/s × bw/25G,
                          min 1 Gb/s, α = 1 and a cut at the first check after the first CNP;
                          NP marks every CE packet; RED 100/400 KB × bw/25G, Pmax 0.2
``none``       —          line rate, CNPs ignored
``fixed``      —          a constant rate (knob ``rate_bps``), CNPs ignored
=============  =========  ======================================================================
"""

from __future__ import annotations

from emulator.errors import ConfigError
from emulator.pacing.base import FixedRate, NoCongestionControl, RateController
from emulator.pacing.dcqcn import DcqcnFirmware, DcqcnPaper
from emulator.pacing.notification import NpParams
from emulator.pacing.params import DcqcnFirmwareParams, DcqcnPaperParams, DcqcnParams, FixedRateParams
from emulator.pacing.red import RedParams
from emulator.pacing.registry import controller_spec, register_controller


def hpcc_ns3_params(line_rate_bps: float) -> DcqcnFirmwareParams:
    """HPCC ns-3 ``run.py --cc dcqcn`` as firmware-form knobs (AI/HAI scale with the line rate)."""
    bw_gbps = line_rate_bps / 1e9
    return DcqcnFirmwareParams(
        dce_tcp_g=1020, dce_tcp_rtt_us=1.0, alpha_rounding="exact", initial_alpha_value=1024,
        rate_to_set_on_first_cnp_mbps=0.0, rate_on_first_cnp_fraction=1.0, first_cnp_cuts=True,
        rpg_min_dec_fac_pct=0.0, rpg_min_rate_mbps=1000.0, rpg_max_rate_mbps=0.0, rpg_gd=11,
        rate_reduce_monitor_period_us=4.0, clamp_tgt_rate=False, clamp_tgt_rate_after_time_inc=True,
        rpg_time_reset_us=300.0, rpg_byte_reset=0, rpg_threshold=1,
        rpg_ai_rate_mbps=5.0 * bw_gbps / 25, rpg_hai_rate_mbps=50.0 * bw_gbps / 25,
    )


def dcqcn_controller(line_rate_bps: float, params: DcqcnParams) -> RateController:
    """A DCQCN controller of the form the parameter dataclass belongs to."""
    if isinstance(params, DcqcnPaperParams):
        return DcqcnPaper(line_rate_bps, params)
    if isinstance(params, DcqcnFirmwareParams):
        return DcqcnFirmware(line_rate_bps, params)
    raise ConfigError(f"not a DCQCN parameter set: {type(params).__name__}")


def _fixed(line_rate_bps: float, params: FixedRateParams) -> RateController:
    if params.rate_bps is None:
        raise ConfigError("knob 'rate_bps' is required")
    return FixedRate(min(params.rate_bps, line_rate_bps))


def _connectx_red(line_rate_bps: float) -> RedParams:
    return RedParams(kmin_bytes=150_000, kmax_bytes=1_500_000, pmax=1.0)


def _hpcc_red(line_rate_bps: float) -> RedParams:
    scale = line_rate_bps / 25e9
    return RedParams(kmin_bytes=round(100_000 * scale), kmax_bytes=round(400_000 * scale), pmax=0.2)


register_controller("paper", dcqcn_controller, lambda _rate: DcqcnPaperParams(),
                    np=NpParams(min_time_between_cnps_ns=50_000, defer=True), doc="DCQCN, SIGCOMM 2015 values")
register_controller("connectx", dcqcn_controller, lambda _rate: DcqcnFirmwareParams(), red=_connectx_red,
                    doc="DCQCN, NVIDIA ConnectX firmware defaults")
register_controller("hpcc-ns3", dcqcn_controller, hpcc_ns3_params,
                    np=NpParams(min_time_between_cnps_ns=0, defer=False), red=_hpcc_red,
                    doc="DCQCN as HPCC's ns-3 runs it")
register_controller("none", lambda rate, _params: NoCongestionControl(rate), None, constant_rate=True,
                    doc="line rate")
register_controller("fixed", _fixed, lambda _rate: FixedRateParams(), constant_rate=True,
                    doc="a constant rate")


def np_params(name: str) -> NpParams:
    """The notification point that goes with a preset."""
    return controller_spec(name).np


def red_params(name: str, line_rate_bps: float) -> RedParams:
    """Switch marking thresholds that go with a preset (paper values unless the preset has its own)."""
    return controller_spec(name).red(line_rate_bps)

