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

from exporter import DOCS, __version__
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
        self.exit(2, f"{self.prog}: error: {_with_nearest_choice(message)} "
                  f"(see {self.prog} --help)\n")


_INVALID_CHOICE = re.compile(r"invalid choice: '(.*)' \(choose from (.*)\)$")


def _with_nearest_choice(message: str) -> str:
    """argparse's "invalid choice" (a command, a subcommand, a flag's value), with the
    nearest choice when one is close (``doctr`` → ``doctor``)."""
    match = _INVALID_CHOICE.search(message)
    if not match:
        return message
    choices = re.findall(r"'([^']*)'", match[2])
    import difflib  # a typo's hint only: not in the memory of a running serve

    close = difflib.get_close_matches(match[1], choices, n=1, cutoff=0.6)
    return f"{message}; did you mean {close[0]!r}?" if close else message


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="podres-exporter",
        description="Reconciles the kubelet's PodResources API into node_exclusive, "
        "pod_exclusive and pod_shared CPU and memory ledgers, and publishes them.",
        epilog=f"'podres-exporter COMMAND --help' for a command's flags. Documentation: "
        f"{DOCS}",
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


def _chosen(parser: argparse.ArgumentParser, args: argparse.Namespace
            ) -> argparse.ArgumentParser:
    """The (sub)command parser that parsed ``args``: the deepest subparser chosen."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            name = getattr(args, action.dest, None)
            if name in action.choices:
                return _chosen(action.choices[name], args)
    return parser


def _unrecognized(parser: argparse.ArgumentParser, extras: Sequence[str]) -> str:
    """argparse's "unrecognized arguments", with the command's nearest flag for each
    mistyped one (``--kublet.url`` → ``--kubelet.url``)."""
    import difflib  # a typo's hint only: not in the memory of a running serve

    known = [o for o in parser._option_string_actions if o.startswith("--")]
    hints = {}
    for arg in extras:
        flag = arg.split("=", 1)[0]
        close = difflib.get_close_matches(flag, known, n=1, cutoff=0.6) \
            if flag.startswith("-") else []
        if close:
            hints[flag] = close[0]
    message = f"unrecognized arguments: {' '.join(extras)}"
    if len(hints) == 1:
        return f"{message} (did you mean {next(iter(hints.values()))}?)"
    said = "; ".join(f"{flag}: did you mean {near}?" for flag, near in hints.items())
    return f"{message} ({said})" if hints else message


def _given(parser: argparse.ArgumentParser, argv: Sequence[str]) -> frozenset[str]:
    """The flags written on the command line as written (not from the environment, not
    defaults; an abbreviation as the flag it stands for): what a command that ignores some
    flags, or deprecates a spelling, looks at."""
    flags = set()
    for arg in argv:
        if arg == "--":
            break
        if not arg.startswith("--"):
            continue
        name = arg.split("=", 1)[0]
        if name not in parser._option_string_actions:
            found = [o for o in parser._option_string_actions if o.startswith(name)]
            name = found[0] if len(found) == 1 else name
        if name in parser._option_string_actions:
            flags.add(name)
    return frozenset(flags)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args, extras = parser.parse_known_args(argv)
    chosen = _chosen(parser, args)
    if extras:
        chosen.error(_unrecognized(chosen, extras))
    args._given = _given(chosen, argv)
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
