"""``podres-exporter``: one entry point, one module per command under exporter.commands.

Each command module exposes ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int``; heavy imports stay inside ``run`` so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import NoReturn

from exporter import __version__
from exporter.errors import UserError

COMMANDS = ("serve", "demo", "snapshot", "record", "sim", "plan", "explain", "doctor", "history",
            "api")


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"exporter.commands.{name}")


class _Parser(argparse.ArgumentParser):
    """Usage mistakes are one line, pointing at ``--help`` for the rest."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        # A value that starts with "-" and a digit (`--poll.interval -5s`) is a value, so
        # its flag's type explains what is wrong with it, not "expected one argument".
        # No flag of this CLI starts with "-" and a digit.
        self._negative_number_matcher = re.compile(r"^-\d")

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="podres-exporter",
        description="Reconciles the kubelet's PodResources API into node_exclusive, "
        "pod_exclusive and pod_shared CPU and memory ledgers, and publishes them.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        module = _module(name)
        # Defaults are written into each flag's help where it is declared (once); the
        # argparse formatter that appends them would repeat them.
        cmd = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args._run(args)
    except UserError as exc:
        print(f"podres-exporter {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
