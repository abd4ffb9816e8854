"""`podres-exporter history` (not yet implemented)."""

from __future__ import annotations

import argparse

from exporter.errors import UserError

HELP = "history (not yet implemented)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser


def run(args: argparse.Namespace) -> int:
    raise UserError("history is not implemented yet")
