"""The demo's simulated node takes the CPU manager policy options the kubelet takes."""

from __future__ import annotations

import pytest

from exporter.demo.node import build_node
from exporter.errors import UserError


def test_full_pcpus_only_rejects_what_is_not_whole_cores() -> None:
    plain = build_node("2x8x2")
    strict = build_node("2x8x2", "full-pcpus-only")
    # The bundled workload has pods whose exclusive containers ask for an odd CPU count:
    # on a 2-thread-per-core node the kubelet refuses them with full-pcpus-only.
    assert len(strict.rejected) > len(plain.rejected)
    new = set(strict.rejected) - set(plain.rejected)
    assert new and all("SMT Alignment Error" in strict.rejected[key][1].reason for key in new)


@pytest.mark.parametrize("options", ["bogus", "align-by-socket",
                                     "full-pcpus-only,distribute-cpus-across-cores"])
def test_options_the_kubelet_refuses_are_one_line(options: str) -> None:
    with pytest.raises(UserError, match="--cpu-policy-options"):
        build_node("2x8x2", options)
