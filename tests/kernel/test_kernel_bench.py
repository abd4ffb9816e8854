"""The kernel-read benchmark works (figures are not asserted: a benchmark, not a timed
test)."""

from __future__ import annotations

import json
import sys

import pytest
from foundation.helpers import REPO

if str(REPO) not in sys.path:  # bench/ is run from the checkout (python -m bench.kernel_read)
    sys.path.insert(0, str(REPO))

from bench import kernel_read


def test_prints_json_last_and_reads_without_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert kernel_read.main(["--pods", "40", "--cpus", "16", "--rounds", "2"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    result = json.loads(lines[-1])
    assert result["pods"] == 40 and result["containers"] == 160 and result["cpus"] == 16
    # Each pod's and container's cpuset and cpu.stat, and /proc/stat.
    assert result["files"] == 2 * (40 + 160) + 1
    assert result["entry_errors"] == 0  # the tree written is the tree read
    assert {"floor_ms", "cgroup_ms", "procstat_ms", "domain_ms", "total_ms",
            "ratio"} <= set(result)
    assert any(line.startswith("cgroup") for line in lines)


def test_rejects_silly_sizes() -> None:
    with pytest.raises(SystemExit):
        kernel_read.main(["--pods", "0"])
