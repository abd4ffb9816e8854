"""How much of the kubelet's own code the random differential reaches, as statement coverage
(docs/design.md#reference, figures in docs/performance.md).

    python -m bench.reference_coverage --version 1.37 --seed 1 --count 1000

builds the reference with Go coverage of the kubelet's CPU, memory, topology and device
managers and the PodResources server (``go build -cover``, ``bench.reference.COVERED``), runs
the random workloads through it and the model with ``GOCOVERDIR`` set, and prints the
statement coverage per package (``go tool covdata percent``), for the CPU and topology
managers' packages without their test fakes, and for the files named in FILES (``go tool
covdata textfmt`` read by ``go tool cover -func``), then the agreement.

By default it runs the joined mix (:data:`MIXES`): ``--count`` workloads of each of the
default mix (CPU, a share with devices), the memory mix (``--memory``: the Static memory
manager, a share with devices) and the device mix (``--devices``: devices on every
workload), each from a seed of its own, into one set of counters. The same process also
meets ``--options`` random kubelet configurations, good and bad
(bench/reference_options.py), and ``--memory-options`` random memory-manager
configurations (bench/reference_memory_options.py), whose refusals count too: the memory
manager's ``NewManager`` and reservation checks are reached only there; and ``--topology``
random machine descriptions, healthy and broken, through ``topology.Discover``
(bench/reference_topology.py). ``--memory`` or ``--devices`` alone runs that one mix; a
``--covdir`` kept from an earlier run adds this run's counters to its own.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench import reference_devices
from bench.reference import (
    COVERED,
    KUBELET,
    SOURCE,
    VERSIONS,
    Reference,
    ReferenceUnavailable,
    build,
    go_binary,
    run,
)
from bench.reference_memory_options import run_memory_options, summary
from bench.reference_options import run_options
from bench.reference_topology import run_topology

# Files whose own figure the acceptance names, beside the packages.
FILES = ("cm/memorymanager/policy_static.go", "cm/memorymanager/memory_manager.go",
         "cm/devicemanager/manager.go",
         "cm/devicemanager/topology_hints.go", "cm/devicemanager/pod_devices.go")
# The groups of FILES whose figure together the acceptance names.
GROUPS = {"memorymanager (policy_static.go, memory_manager.go)": FILES[:2],
          "devicemanager (manager.go, topology_hints.go, pod_devices.go)": FILES[2:]}
# Packages whose functions --functions lists too, and whose figure is also given without
# their test fakes (fake_cpu_manager.go, fake_topology_manager.go: what other kubelet
# packages' tests run instead of the manager; no kubelet ever runs them).
CPU_PACKAGES = ("cm/cpumanager", "cm/cpumanager/topology", "cm/topologymanager")
# The joined mix: each mix's name, its flags for bench.reference.run, and what its seed adds
# to --seed (so that the mixes' cases differ beyond the memory and device streams).
MIXES: dict[str, tuple[bool, bool | None, int]] = {
    "default": (False, None, 0), "memory": (True, None, 1), "devices": (False, True, 2)}
_PERCENT = re.compile(r"^\s*(\S+)\s+coverage:\s+([\d.]+)% of statements")


def package_percent(go: str, covdir: Path) -> dict[str, float]:
    """``go tool covdata percent``: statement coverage per package."""
    out = subprocess.run([go, "tool", "covdata", "percent", f"-i={covdir}"],
                         capture_output=True, text=True, check=True).stdout
    got: dict[str, float] = {}
    for line in out.splitlines():
        m = _PERCENT.match(line)
        if m:
            got[m.group(1)] = float(m.group(2))
    return got


def file_percent(go: str, covdir: Path) -> dict[str, tuple[int, int]]:
    """(covered, total) statements per source file, from the text profile: ``go tool cover
    -func`` gives functions only, so the blocks are summed here, as it sums them."""
    with tempfile.NamedTemporaryFile("w+", suffix=".out") as prof:
        subprocess.run([go, "tool", "covdata", "textfmt", f"-i={covdir}", f"-o={prof.name}"],
                       check=True)
        prof.seek(0)
        # A block may be listed once per counter file: keep the largest count of each.
        blocks: dict[tuple[str, str], tuple[int, int]] = {}
        for line in prof.read().splitlines()[1:]:
            where, n, hits = line.rsplit(" ", 2)
            name, span = where.split(":", 1)
            old = blocks.get((name, span), (int(n), 0))
            blocks[(name, span)] = (int(n), max(old[1], int(hits)))
    totals: dict[str, tuple[int, int]] = {}
    for (name, _), (stmts, count) in blocks.items():
        covered, total = totals.get(name, (0, 0))
        totals[name] = (covered + (stmts if count else 0), total + stmts)
    return totals


def without_fakes(files: dict[str, tuple[int, int]], pkg: str) -> tuple[int, int]:
    """(covered, total) statements of package ``pkg``'s own files less its ``fake_*.go``."""
    covered = total = 0
    for name, (c, t) in files.items():
        where, _, base = name.rpartition("/")
        if where == pkg and not base.startswith("fake_"):
            covered, total = covered + c, total + t
    return covered, total


def uncovered_functions(go: str, covdir: Path, version: str, files: Sequence[str]
                        ) -> list[str]:
    """``go tool cover -func`` lines below 100 % for ``files`` (run in the reference's module,
    with the version's go.mod, so that it finds the kubelet's sources)."""
    _, modfile, _ = VERSIONS[version]
    with tempfile.NamedTemporaryFile("w+", suffix=".out") as prof:
        subprocess.run([go, "tool", "covdata", "textfmt", f"-i={covdir}", f"-o={prof.name}"],
                       check=True)
        done = subprocess.run([go, "tool", "cover", f"-func={prof.name}"], cwd=SOURCE,
                              capture_output=True, text=True, check=False,
                              env={**os.environ, "GOFLAGS": f"-modfile={modfile}"})
    out = []
    for line in done.stdout.splitlines():
        if any(f in line for f in files) and not line.rstrip().endswith("100.0%"):
            out.append(line.split("kubelet/", 1)[-1])
    return out


def chosen_mixes(*, memory: bool, devices: bool) -> dict[str, tuple[bool, bool | None, int]]:
    """The joined mix, or the one mix ``--memory`` and ``--devices`` name."""
    if memory and devices:
        return {"memory+devices": (True, True, MIXES["memory"][2])}
    if memory or devices:
        return {name: MIXES[name] for name in ("memory", "devices")
                if (memory if name == "memory" else devices)}
    return dict(MIXES)


def run_mixes(ref: Reference, version: str, seed: int, count: int,
              mixes: dict[str, tuple[bool, bool | None, int]]
              ) -> tuple[dict[str, tuple[int, float]], list[str]]:
    """``count`` workloads of each mix on ``ref``: (agreed, seconds) per mix, and a line for
    each disagreement (its mix, case and first difference)."""
    agreed: dict[str, tuple[int, float]] = {}
    disagreements: list[str] = []
    for name, (memory, devices, offset) in mixes.items():
        started, agree = time.monotonic(), 0
        for outcome in run(version, seed + offset, count, ref, memory=memory, devices=devices):
            agree += outcome.agrees
            if not outcome.agrees:
                disagreements.append(f"{name} mix: {outcome.case.describe()}: "
                                     f"{outcome.disagreements[0]}")
        agreed[name] = (agree, time.monotonic() - started)
    return agreed, disagreements


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.reference_coverage",
        description="Statement coverage of the kubelet's own managers reached by N random "
                    "workloads of the differential (docs/design.md#reference).")
    parser.add_argument("--version", default="1.37", choices=sorted(VERSIONS))
    parser.add_argument("--seed", type=int, default=1, help="first random seed (default 1)")
    parser.add_argument("--count", type=int, default=1000,
                        help="random workloads of each mix (default 1000)")
    parser.add_argument("--memory", action="store_true",
                        help="only the memory mix: the Static memory manager "
                             "(python -m bench.reference --memory); with --devices, every "
                             "workload with devices too")
    parser.add_argument("--devices", action="store_true",
                        help="only the device mix: devices on every workload "
                             "(python -m bench.reference --devices)")
    parser.add_argument("--unhealthy", action="store_true",
                        help="also give the plugins of a share of the cases with devices "
                             "unhealthy devices (bench.reference_devices.UNHEALTHY_SHARE; the "
                             "model does not follow them yet: open)")
    parser.add_argument("--functions", action="store_true",
                        help="also list the functions of FILES and of the CPU and topology "
                             "managers' packages that are not fully covered")
    parser.add_argument("--options", type=int, default=1000, metavar="N",
                        help="also run N random kubelet configurations, good and bad "
                             "(python -m bench.reference_options; default 1000, 0 for none)")
    parser.add_argument("--memory-options", type=int, default=1000, metavar="N",
                        help="also run N random memory-manager configurations, good and bad "
                             "(python -m bench.reference_memory_options; default 1000, 0 for "
                             "none)")
    parser.add_argument("--topology", type=int, default=1000, metavar="N",
                        help="also run N random machine descriptions, healthy and broken, "
                             "through Discover (python -m bench.reference_topology; default "
                             "1000, 0 for none)")
    parser.add_argument("--covdir", type=Path, default=None,
                        help="keep the coverage counters in this directory (default: a "
                             "temporary one)")
    args = parser.parse_args(argv)
    if args.unhealthy:
        reference_devices.UNHEALTHY_SHARE = 0.3
    go = go_binary()
    try:
        binary = build(args.version, quiet=False, cover=True)
        if go is None:
            raise ReferenceUnavailable("no Go toolchain")
    except ReferenceUnavailable as exc:
        print(f"reference {args.version}: unavailable: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="podres-cover-") as tmp:
        covdir = args.covdir or Path(tmp)
        covdir.mkdir(parents=True, exist_ok=True)
        mixes = chosen_mixes(memory=args.memory, devices=args.devices)
        with Reference(args.version, binary, {"GOCOVERDIR": str(covdir)}) as ref:
            agreed, disagreements = run_mixes(ref, args.version, args.seed, args.count, mixes)
            options_agree = sum(option.agrees for option in
                                run_options(args.version, args.seed, args.options, ref))
            memory_options = list(run_memory_options(args.version, args.seed,
                                                     args.memory_options, ref))
            topology_agree = sum(machine.agrees for machine in
                                 run_topology(args.version, args.seed, args.topology, ref))
        packages = package_percent(go, covdir)
        files = file_percent(go, covdir)
        which = ", ".join(f"{name} from seed {args.seed + mixes[name][2]}" for name in mixes)
        print(f"kubelet {args.version}: statement coverage after {args.count} workloads "
              f"of each mix ({which}), {args.options} configurations and "
              f"{args.memory_options} memory-manager configurations")
        for pkg in COVERED[1:]:
            shown = f"{packages[pkg]:5.1f} %" if pkg in packages else "not linked"
            print(f"  {pkg.removeprefix(KUBELET + '/'):36} {shown}")
        for pkg in CPU_PACKAGES:
            covered, total = without_fakes(files, f"{KUBELET}/{pkg}")
            if total:
                print(f"  {pkg + ' without test fakes':36} {100 * covered / total:5.1f} %  "
                      f"({covered}/{total} statements)")
        for name in FILES:
            covered, total = files.get(f"{KUBELET}/{name}", (0, 0))
            shown = (f"{100 * covered / total:5.1f} %  ({covered}/{total} statements)"
                     if total else "not linked")
            print(f"  {name:36} {shown}")
        for group, names in GROUPS.items():
            covered = sum(files.get(f"{KUBELET}/{name}", (0, 0))[0] for name in names)
            total = sum(files.get(f"{KUBELET}/{name}", (0, 0))[1] for name in names)
            if total:
                print(f"  {group}: {100 * covered / total:5.1f} %  ({covered}/{total} "
                      "statements)")
        if args.functions:
            listed = (*FILES, *(f"{pkg}/" for pkg in CPU_PACKAGES))
            for line in uncovered_functions(go, covdir, args.version, listed):
                print(f"    {line}")
    for line in disagreements:
        print(f"disagreement: {line}")
    if args.options:
        print(f"options {args.version}: {options_agree}/{args.options} agree")
    if args.topology:
        print(f"topology {args.version}: {topology_agree}/{args.topology} agree")
    if memory_options:
        for line in summary(memory_options):
            print(f"  memory options, {line}")
        print(f"memory options {args.version}: {sum(o.agrees for o in memory_options)}/"
              f"{len(memory_options)} agree")
    for name, (agree, took) in agreed.items():
        print(f"reference {args.version}, {name} mix: {agree}/{args.count} agree "
              f"({took:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
