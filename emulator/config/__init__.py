"""YAML profiles: schema, units, ``extends:``/``matrix:``, and precedence defaults < profile < env < CLI.

Public API::

    from emulator.config import load_profile, load_profiles, profile_from_dict, Profile

    profile = load_profile("profiles/quickstart.yaml", overrides=["fabric.ports.rate=10Gbps"])
    profile.fabric.ports.rate_bps        # 10_000_000_000
    profile.to_dict()                    # canonical plain data (ints in bytes, bit/s, ns)

The schema is the dataclass tree in :mod:`emulator.config.model` and is documented key by key in
``profiles/README.md``. Every error is a :class:`~emulator.errors.ConfigError` with one line naming
the file and the key path.
"""

from emulator.config.knobs import CC_KNOB_ALIASES, CC_KNOBS, Knob
from emulator.config.loader import (
    ENV_VAR,
    deep_merge,
    load_profile,
    load_profiles,
    parse_key_path,
    parse_set,
    profile_from_dict,
)
from emulator.config.model import (
    ALGORITHMS,
    COLLECTIVE_TYPES,
    ROOTED_TYPES,
    Collective,
    CompileOptions,
    CongestionControl,
    Direct,
    DirectRank,
    Dscp,
    Ecn,
    Fabric,
    GenerateWorkload,
    LoopbackSwitch,
    Output,
    Pfc,
    Ports,
    Profile,
    Ranks,
    Topology,
    TraceWorkload,
    Workload,
)
from emulator.config.slo import Slo

__all__ = [
    "ALGORITHMS",
    "CC_KNOBS",
    "CC_KNOB_ALIASES",
    "COLLECTIVE_TYPES",
    "ENV_VAR",
    "ROOTED_TYPES",
    "Collective",
    "CompileOptions",
    "CongestionControl",
    "Direct",
    "DirectRank",
    "Dscp",
    "Ecn",
    "Fabric",
    "GenerateWorkload",
    "Knob",
    "LoopbackSwitch",
    "Output",
    "Pfc",
    "Ports",
    "Profile",
    "Ranks",
    "Slo",
    "Topology",
    "TraceWorkload",
    "Workload",
    "deep_merge",
    "load_profile",
    "load_profiles",
    "parse_key_path",
    "parse_set",
    "profile_from_dict",
]
