"""Bad input to the runner and to the reference program gets a clear answer, not a trace."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable

import pytest

from bench.reference import ReferenceUnavailable, binary_path, build, main


def test_the_runner_refuses_a_bad_count(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--count", "0"])
    assert exc.value.code == 2
    assert "argument --count: must be at least 1" in capsys.readouterr().err


def test_an_unknown_version_is_named() -> None:
    with pytest.raises(ReferenceUnavailable, match=r"unknown kubelet version '9\.9'"):
        build("9.9")


def test_the_reference_answers_bad_requests_with_errors(
        need_reference: Callable[[str], None]) -> None:
    need_reference("1.37")
    script = "\n".join([
        "not json",
        json.dumps({"op": "admit", "pod": {}}),
        json.dumps({"op": "frobnicate"}),
        json.dumps({"op": "setup", "setup": {"cpus": []}}),
        json.dumps({"op": "setup", "setup": {"cpus": [{"id": 0, "core": 0, "socket": 0,
                                                        "numa": 0, "l3": -1}],
                                              "reserved_cpu": "1"}}),
        json.dumps({"op": "admit", "pod": {"metadata": {"name": "x"}}}),
        json.dumps({"op": "remove", "pod_uid": "nobody"}),
        json.dumps({"op": "frobnicate"}),
    ]) + "\n"
    done = subprocess.run([str(binary_path("1.37"))], input=script, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert [a["ok"] for a in answers] == [False, False, False, False, True, False, False,
                                           False]
    errors = [a.get("error", "") for a in answers]
    assert errors[0].startswith("bad request")
    assert "send a setup first" in errors[1]
    assert "frobnicate: no node" in errors[2]
    assert "no CPUs" in errors[3]
    assert "without metadata.uid" in errors[5]
    assert "no pod nobody" in errors[6]
    assert 'unknown op "frobnicate"' in errors[7]
