"""docs/metrics.md is generated from the catalogue, and the catalogue is what is served."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from exporter.metrics.catalogue import BY_NAME, FAMILIES
from exporter.metrics.docs import main, render_markdown
from tests.conftest import StartSim
from tests.service.conftest import REPO, TOKEN, RunServe, scenario_root, value

DOC = REPO / "docs" / "metrics.md"


def test_committed_reference_is_generated() -> None:
    assert DOC.read_text(encoding="utf-8") == render_markdown(), (
        "docs/metrics.md is stale: run python -m exporter.metrics.docs > docs/metrics.md")


def test_reference_lists_every_family() -> None:
    text = render_markdown()
    for family in FAMILIES:
        assert f"| `{family.name}` | {family.type} |" in text
        for label in family.labels:
            assert f"`{label}`" in text


def test_module_entry_point(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "exporter.metrics.docs"], cwd=REPO,
                         capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout == render_markdown()
    target = tmp_path / "metrics.md"
    assert main([str(target)]) == 0
    assert target.read_text(encoding="utf-8") == render_markdown()
    assert main(["--bogus"]) == 2


async def test_served_families_are_catalogued(start_sim: StartSim,
                                              run_serve: RunServe) -> None:
    directory = scenario_root() / "sidecar-hybrid"
    sim = await start_sim(directory, http=True, token=TOKEN)
    served = await run_serve(sim, "--topology", str(directory / "topology.json"),
                             "--poll.interval", "1m")
    await served.wait_for(lambda s: value(s, "podres_up") == 1.0, what="first poll")
    text = await served.metrics_text()
    helps = {}
    types = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            helps[name] = help_text
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            types[name] = kind
    assert set(helps) <= set(BY_NAME)
    for name, help_text in helps.items():
        assert help_text == BY_NAME[name].help
        assert types[name] == BY_NAME[name].type
    # Each family appears once, as one block.
    assert len([line for line in text.splitlines() if line.startswith("# TYPE ")]) == \
        len(types)
