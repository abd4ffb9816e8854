"""The reference under Go's race detector: restart-heavy random workloads through a ``-race``
build of the kubelet reference (docs/design.md#reference).

    python -m bench.reference_race --version 1.36 --seed 7 --count 200 --devices --memory

builds ``reference/build/kubelet-<version>-race`` if needed (the first build of a version
takes minutes: every kubelet package is compiled again with the detector), runs the
workloads with a restart after every admission, and prints each data race the detector
reported (its two accesses, innermost frames first), then the agreement. It exits 1 on any
race or disagreement. The reference's own goroutines are few (the CPU manager's reconcile
loop, the device plugins' registration and ListAndWatch streams, the PodResources server),
and every race found so far was between one of them and a request of the script.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from bench.reference import (
    CASE_TIMEOUT,
    Case,
    Outcome,
    Reference,
    ReferenceUnavailable,
    binary_path,
    build,
    random_case,
    run_case,
    workload_flags,
)
from reconciler.kube import PodSpec


def restart_heavy(case: Case) -> Case:
    """``case`` with a kubelet restart after every admission (and its own restarts kept)."""
    ops: list[tuple[str, PodSpec | None]] = []
    for op in case.ops:
        ops.append(op)
        if op[0] == "admit":
            ops.append(("restart", None))
    return replace(case, ops=ops)


def race_reference(version: str, log_dir: Path, *, timeout: float | None = CASE_TIMEOUT
                   ) -> Reference:
    """The ``-race`` build of ``version`` (built if needed), writing each report the detector
    makes into ``log_dir`` and going on after it."""
    return Reference(version, build(version, race=True),
                     env={"GORACE": f"log_path={log_dir / 'race'} halt_on_error=0"},
                     timeout=timeout)


_FRAME = re.compile(r"^  (\S+)\(\)$")


def races(log_dir: Path) -> list[str]:
    """Each report in ``log_dir``, shortened to its accesses and their first frames."""
    out = []
    for path in sorted(log_dir.glob("race.*")):
        for report in path.read_text().split("==================\n"):
            if "WARNING: DATA RACE" not in report:
                continue
            lines: list[str] = []
            frames = 0
            for line in report.splitlines():
                if line.startswith(("Write at", "Read at", "Previous write", "Previous read")):
                    lines.append(line)
                    frames = 0
                elif (m := _FRAME.match(line)) and frames < 3:
                    lines.append(f"    {m.group(1)}")
                    frames += 1
            out.append("\n".join(lines))
    return out


def run(version: str, seed: int, count: int, log_dir: Path, *, memory: bool | None = None,
        devices: bool | None = True) -> Iterator[Outcome]:
    """``count`` restart-heavy workloads from ``seed`` (the seeds of bench.reference) on the
    race build; reports land in ``log_dir`` (:func:`races`)."""
    with race_reference(version, log_dir) as ref:
        for i in range(count):
            case = random_case(seed * 1_000_003 + i, version, memory=memory, devices=devices)
            yield run_case(ref, restart_heavy(case))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.reference_race",
        description="Run restart-heavy random workloads through the kubelet reference built "
                    "with Go's race detector, and print every data race it reports "
                    "(docs/design.md#reference).")
    workload_flags(parser)
    parser.add_argument("--build-only", action="store_true",
                        help="build the race reference for --version if needed, and stop")
    args = parser.parse_args(argv)
    try:
        started = time.monotonic()
        path = build(args.version, race=True, quiet=False)
    except ReferenceUnavailable as exc:
        print(f"reference {args.version} (race): unavailable: {exc}", file=sys.stderr)
        return 2
    if args.build_only:
        print(f"reference {args.version} (race): {path.name} ready in "
              f"{time.monotonic() - started:.0f} s")
        return 0
    started = time.monotonic()
    agree = 0
    with tempfile.TemporaryDirectory(prefix="podres-race-") as tmp:
        log_dir = Path(tmp)
        for outcome in run(args.version, args.seed, args.count, log_dir,
                           memory=args.memory or None, devices=args.devices or None):
            agree += outcome.agrees
            if not outcome.agrees:
                print(f"disagreement: {outcome.case.describe()}\n  "
                      + "\n  ".join(outcome.disagreements[:3]))
        found = races(log_dir)
    for report in found:
        print(f"data race:\n{report}")
    print(f"({args.count} restart-heavy workloads from seed {args.seed} in "
          f"{time.monotonic() - started:.1f} s on {binary_path(args.version, race=True).name})")
    print(f"reference {args.version} (race): {agree}/{args.count} agree, {len(found)} data "
          f"race{'' if len(found) == 1 else 's'}")
    return 0 if agree == args.count and not found else 1


if __name__ == "__main__":
    sys.exit(main())
