"""The runner's bound on the reference (docs/design.md#reference): a request the reference
does not answer in time kills the process, the case is reported as timed out with its seed
(never as agreeing), the run goes on with a fresh process, and the differential test fails.

The peer here is a stand-in for the reference binary, a small Python script: what is under
test is the runner's side of the pipe, and the real kubelet's stall (the topology manager's
merge over every permutation of hints, minutes to hours) is too slow for a unit test."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.reference import Reference, ReferenceTimeout, main, run
from tests.reference.test_differential import check_agreement

SEED = 7


def _peer(tmp_path: Path, body: str) -> Path:
    """A stand-in for the reference binary running ``body``."""
    script = tmp_path / "reference-stand-in"
    script.write_text(f"#!{sys.executable}\nimport json, os, sys, time\n{body}")
    script.chmod(0o755)
    return script


# Reads a request and never answers it (and ends when its input does).
NEVER = "if sys.stdin.readline():\n    time.sleep(3600)\n"


def test_an_unanswered_request_times_out_and_kills_the_process(tmp_path: Path) -> None:
    ref = Reference("1.37", _peer(tmp_path, NEVER), timeout=0.5)
    try:
        with pytest.raises(ReferenceTimeout, match=r"did not answer setup within 0\.5 s"):
            ref.request({"op": "setup"})
        assert ref.proc.poll() is not None
    finally:
        ref.close()


def test_a_timed_out_admission_names_its_pod(tmp_path: Path) -> None:
    with Reference("1.37", _peer(tmp_path, NEVER), timeout=0.2) as ref, \
            pytest.raises(ReferenceTimeout, match="did not answer admit pod-0008 within"):
        ref.request({"op": "admit", "pod": {"metadata": {"name": "pod-0008"}}})


def test_the_run_reports_the_case_and_goes_on_with_a_fresh_process(tmp_path: Path) -> None:
    # Stalls on its first request ever, then refuses every setup at once.
    mark = tmp_path / "stalled"
    body = (f"for line in sys.stdin:\n"
            f"    if not os.path.exists({str(mark)!r}):\n"
            f"        open({str(mark)!r}, 'w').close()\n"
            f"        time.sleep(3600)\n"
            f"    print(json.dumps({{'ok': False, 'error': 'the stand-in refuses'}}), "
            f"flush=True)\n")
    with Reference("1.37", _peer(tmp_path, body), timeout=0.5) as ref:
        first = ref.proc.pid
        stalled, after = run("1.37", SEED, 2, ref)
        assert ref.proc.pid != first
    assert stalled.timed_out and not stalled.agrees
    assert stalled.case.seed == SEED * 1_000_003
    assert stalled.disagreements == [
        "the kubelet 1.37 reference did not answer setup within 0.5 s (killed and restarted)"]
    # The fresh process answered the next case.
    assert not after.timed_out
    assert after.skipped or "the stand-in refuses" in after.disagreements[0]


def test_the_differential_test_fails_on_a_timed_out_case_with_its_seed(tmp_path: Path
                                                                       ) -> None:
    with Reference("1.37", _peer(tmp_path, NEVER), timeout=0.2) as ref:
        outcomes = list(run("1.37", SEED, 1, ref))
    said = f"(?s)1 of 1 workloads timed out on kubelet 1.37:.*seed {SEED * 1_000_003}:"
    with pytest.raises(AssertionError, match=said):
        check_agreement("1.37", outcomes, 1)


def test_a_case_timeout_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--case-timeout", "0"])
    assert exit_.value.code == 2
    assert "--case-timeout must be more than 0 seconds" in capsys.readouterr().err


def test_the_reference_stderr_is_kept_where_asked(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # Where the goroutine stacks of a SIGQUIT land (PODRES_REFERENCE_STDERR).
    kept = tmp_path / "reference.stderr"
    monkeypatch.setenv("PODRES_REFERENCE_STDERR", str(kept))
    body = ("for line in sys.stdin:\n    print('stacks here', file=sys.stderr, flush=True)\n"
            "    print(json.dumps({'ok': True}), flush=True)\n")
    with Reference("1.37", _peer(tmp_path, body), timeout=5) as ref:
        assert ref.request({"op": "state"}) == {"ok": True}
    assert kept.read_text() == "stacks here\n"


def test_a_reference_that_exits_mid_case_is_a_disagreement_and_the_run_goes_on(
        tmp_path: Path) -> None:
    # Exits as a Go panic does (code 2) on its first request ever, then refuses setups.
    mark = tmp_path / "crashed"
    body = (f"for line in sys.stdin:\n"
            f"    if not os.path.exists({str(mark)!r}):\n"
            f"        open({str(mark)!r}, 'w').close()\n"
            f"        sys.exit(2)\n"
            f"    print(json.dumps({{'ok': False, 'error': 'the stand-in refuses'}}), "
            f"flush=True)\n")
    with Reference("1.37", _peer(tmp_path, body), timeout=5) as ref:
        crashed, after = run("1.37", SEED, 2, ref)
    assert not crashed.agrees and not crashed.timed_out and crashed.op == "crash"
    assert crashed.case.seed == SEED * 1_000_003
    assert crashed.disagreements[0].startswith(
        "the kubelet 1.37 reference exited during setup (code 2); restarted")
    assert after.skipped or "the stand-in refuses" in after.disagreements[0]
