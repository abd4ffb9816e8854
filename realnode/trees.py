"""Real machines' sysfs trees (tests/data/hwloc/hwloc-trees.tar.xz, from hwloc's test suite)
made ready to bind over ``/sys/devices/system/{cpu,node}`` and ``/proc/cpuinfo``: the
topology reader's judge (tests/topology) and the real node (realnode/harness.py) use them.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tarfile
from pathlib import Path

from exporter.sources.sysfs_topology import _parse_list, _parse_map

REPO = Path(__file__).resolve().parent.parent
ARCHIVE = REPO / "tests" / "data" / "hwloc" / "hwloc-trees.tar.xz"
CACHE = Path(__file__).resolve().parent / "build" / "trees"


def relink(node: Path) -> None:
    """The dump as the machine was: a live kernel's ``nodeN/cpuM`` are links to
    ``../../cpu/cpuM`` (the dumps keep them as files, or lost them; then ``cpulist`` or
    ``cpumap`` says which they were), and cAdvisor reads through them."""
    links = [p for p in node.iterdir() if re.fullmatch(r"cpu\d+", p.name)]
    cpus = [int(p.name[3:]) for p in links]
    if not links:
        for name, parse in (("cpulist", _parse_list), ("cpumap", _parse_map)):
            if (node / name).is_file():
                cpus = parse((node / name).read_text(encoding="latin-1"))
                break
    for cpu in cpus:
        link = node / f"cpu{cpu}"
        if link.exists() or link.is_symlink():
            link.unlink()
        link.symlink_to(f"../../cpu/cpu{cpu}")


def extract(dest: Path) -> Path:
    """Every tree of the archive under ``dest/hwloc-trees``, relinked; that directory."""
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(dest, filter="data")
    for node in sorted(dest.glob("hwloc-trees/*/sys/devices/system/node/node*")):
        relink(node)
    return dest / "hwloc-trees"


def names() -> list[str]:
    with tarfile.open(ARCHIVE) as tar:
        return sorted({Path(m.name).parts[1] for m in tar.getmembers()
                       if len(Path(m.name).parts) > 2})


def cached_tree(name: str) -> Path:
    """``name``'s tree, extracted once into realnode/build/trees (again when the archive
    changes)."""
    digest = hashlib.sha256(ARCHIVE.read_bytes()).hexdigest()[:16]
    root = CACHE / digest
    if not (root / "hwloc-trees").is_dir():
        if CACHE.exists():
            shutil.rmtree(CACHE)
        tmp = CACHE / f"{digest}.partial"
        extract(tmp)
        tmp.rename(root)
    tree = root / "hwloc-trees" / name
    if not tree.is_dir():
        raise ValueError(f"no tree {name!r} in {ARCHIVE.name} (one of {', '.join(names())})")
    return tree
