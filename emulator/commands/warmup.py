"""``emulator warmup``: compile the fluid fabric's kernels into numba's on-disk cache ahead of a run.

A fluid run on an empty cache (a fresh install, a CI job) compiles its kernels at first use, ~30 CPU-s; this
does it once, up front (:func:`emulator.drivers.fluid_warm.warm_all`), and says how many compiled and where the
cache is. With a warm cache it only loads them (a few seconds).
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> None:
    parser = subparsers.add_parser(
        name, help=help_text,
        description="Compile the fluid fabric's numba kernels into numba's cache (next to the package, or "
                    "NUMBA_CACHE_DIR), so a first fluid run does not spend ~30 CPU-s compiling them.",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from emulator.drivers.fluid_warm import warm_all

    print(warm_all())
    return 0
