"""`podres-exporter api` (not yet implemented)."""

from __future__ import annotations

import argparse

from exporter.errors import UserError

HELP = "api (not yet implemented)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser


def run(args: argparse.Namespace) -> int:
    raise UserError("api is not implemented yet")
