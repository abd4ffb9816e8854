"""Hostile fixture files through ``snapshot --from DIR`` (the CLI, in process): every
outcome is a ledger or one clear line naming the problem, never a traceback or a hang."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzz.budget import fuzz, ran, timeout
from fuzz.inputs import assert_clean, json_values, mutated_json, run_main

SCENARIOS = Path(__file__).resolve().parents[1] / "data" / "scenarios"
BASE = SCENARIOS / "database-pod-scope"
FILES = ("list.json", "allocatable.json", "pods.json", "configz.json", "topology.json")


def original(name: str) -> Any:
    return json.loads((BASE / name).read_text())


@st.composite
def hostile_file(draw: st.DrawFn) -> tuple[str, bytes]:
    name = draw(st.sampled_from(FILES))
    data = draw(mutated_json(original(name)) | json_values.map(
        lambda v: json.dumps(v).encode()) | st.binary(max_size=64))
    return name, data


@pytest.fixture(scope="module")
def workdir() -> Any:
    path = Path(tempfile.mkdtemp(prefix="podres-fuzz-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.timeout(timeout(120))
@fuzz()
@given(changes=st.lists(hostile_file(), min_size=1, max_size=2))
def test_snapshot_from_hostile_fixture(workdir: Path, changes: list[tuple[str, bytes]]
                                       ) -> None:
    ran("fixture files (snapshot --from)")
    fixture = workdir / "node"
    shutil.rmtree(fixture, ignore_errors=True)
    shutil.copytree(BASE, fixture)
    for name, data in changes:
        (fixture / name).write_bytes(data)
    outcome = run_main(["snapshot", "--from", str(fixture), "-o", "json"])
    assert_clean(outcome)
    if outcome.code == 0:
        assert json.loads(outcome.out)["schema"] == "podres.ledger/v1"
    else:
        # The line names the file at fault (or the directory, for a missing list).
        assert str(fixture) in outcome.err_lines[0], outcome.err


def test_unpaired_surrogate_in_a_field_name_is_one_line(workdir: Path) -> None:
    """Found by this suite: protobuf's JSON parser raised SystemError (a traceback) for a
    key that JSON allows and UTF-8 cannot encode."""
    fixture = workdir / "surrogate"
    shutil.rmtree(fixture, ignore_errors=True)
    shutil.copytree(BASE, fixture)
    (fixture / "allocatable.json").write_text('{"\\ud800": 1}')
    outcome = run_main(["snapshot", "--from", str(fixture)])
    assert outcome.code != 0
    assert_clean(outcome)
    assert "allocatable.json: not a valid AllocatableResourcesResponse: a field name is not " \
        "valid UTF-8" in outcome.err_lines[0]
