"""Command-line entry point: wiring only.

Each subcommand lives in ``emulator/commands/<name>.py`` and exposes ``register(subparsers)`` (adds
its parser, with help) and ``run(args) -> int``. Modules are imported lazily, so a command's heavy
dependencies load only when it runs. Errors derived from :class:`EmulatorError` are printed as one
``error: ...`` line with exit status 2; Ctrl-C exits 130. Any other exception is a bug of the emulator:
one ``internal error: ...`` line and exit status 4 (:data:`EXIT_INTERNAL`), never Python's 1 (which
``emulator run`` reserves for a broken SLO); with ``EMULATOR_DEBUG=1`` in the environment it is re-raised
with its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from emulator import __version__
from emulator.errors import EmulatorError

#: exit status of an unexpected exception (a bug of the emulator, not of the input)
EXIT_INTERNAL = 4
#: environment variable that makes an unexpected exception show its traceback
DEBUG_ENV = "EMULATOR_DEBUG"

#: (subcommand, module, one-line help) in the order of the data flow.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("generate", "emulator.commands.generate", "write a synthetic Chakra trace (one .et per rank)"),
    ("inspect", "emulator.commands.inspect", "summarise a Chakra trace or a schedule file"),
    ("compile", "emulator.commands.compile", "compile a trace into a per-rank flow schedule"),
    ("run", "emulator.commands.run", "run a profile on the sim, loopback, direct or fluid fabric"),
    ("warmup", "emulator.commands.warmup", "compile the fluid fabric's kernels ahead of a first fluid run"),
    ("report", "emulator.commands.report", "render a results directory (text, json, csv, html, timeline, plots)"),
    ("compare", "emulator.commands.compare", "compare results directories side by side"),
    ("export-trace", "emulator.commands.export_trace", "write a run's workload as Chakra ET files with measured times"),
    ("agent", "emulator.commands.agent", "serve the agent API of a multi-host run on this host"),
    ("rank", "emulator.commands.rank", "run one rank of a multi-host run under mpirun, srun or torchrun"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="emulator",
        description="Network test driver for AI fabrics: Chakra traces → RoCEv2 traffic under DCQCN → tails and stragglers.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name, help_text in COMMANDS:
        importlib.import_module(module_name).register(sub, name, help_text)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except Exception as exc:  # the safety net: a bug must not exit 1, the "SLO broken" status of run
        if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
            raise
        text = f"{type(exc).__name__}: {exc}".replace("\r", "\\r").replace("\n", "\\n")
        print(f"internal error (a bug of the emulator, please report it): {text}{_origin(exc)}; "
              f"run again with {DEBUG_ENV}=1 to see the traceback", file=sys.stderr)
        return EXIT_INTERNAL


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except EmulatorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


def _origin(exc: BaseException) -> str:
    """`` at FILE:LINE`` of the innermost frame of the exception's traceback ('' without one)."""
    tb = exc.__traceback__
    if tb is None:
        return ""
    while tb.tb_next is not None:
        tb = tb.tb_next
    return f" at {os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"


if __name__ == "__main__":
    sys.exit(main())
