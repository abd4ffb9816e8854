"""Process settings of serve (exporter.runtime): glibc's mmap threshold kept fixed."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from foundation.helpers import REPO

# In a child process, so that this one's allocator is left as it was: a 12 MB block (the
# size of a 1000-pod /pods body) is freed, then a 4 MB one is made; prints whether the
# latter has a mapping of its own (unmapped when freed) or sits in the heap.
_PROBE = """
import ctypes, sys
from exporter.runtime import fix_mmap_threshold
if sys.argv[1] == "fixed":
    assert fix_mmap_threshold()
big = bytearray(12 << 20)
del big
block = bytearray(4 << 20)
address = ctypes.addressof((ctypes.c_char * len(block)).from_buffer(block))
for line in open("/proc/self/maps"):
    span, *rest = line.split()
    start, end = (int(x, 16) for x in span.split("-"))
    if start <= address < end:
        print("heap" if rest[-1] == "[heap]" else "own")
"""


def _where(mode: str) -> str:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], check=True, text=True,
                         capture_output=True, cwd=REPO)
    return out.stdout.strip()


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                    reason="glibc's mmap threshold")
def test_a_freed_large_block_does_not_move_later_ones_into_the_heap() -> None:
    assert _where("default") == "heap"  # glibc raised its threshold past 4 MB
    assert _where("fixed") == "own"
