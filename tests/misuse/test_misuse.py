"""Every subcommand misused as a newcomer would: missing files, unreachable sources, bad
values and an unwritable state directory (a path under a regular file: the tests run as
root, whom permissions do not stop). Each run is a real process (``python -m
exporter.cli``) with HOME and XDG_STATE_HOME inside a scratch directory, and must end with
a non-zero exit, exactly one line on stderr, no traceback, and no file created anywhere in
the scratch directory."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "tests" / "data" / "scenarios" / "sidecar-hybrid"
UNREACHABLE_PG = "postgresql+psycopg://nobody@127.0.0.1:1/history"
# Where the history store lives by default for root, outside any scratch directory: no case
# may create it.
ROOT_STATE = Path("/var/lib/podres-exporter")
TIMEOUT = 30.0  # a command that should have refused but runs on is cut off here


@dataclass
class Scratch:
    """The scratch directory a case runs in, and what the case set up in it."""

    root: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def not_a_dir(self) -> Path:
        """A regular file: any path under it cannot be created, even by root."""
        path = self.root / "plainfile"
        path.write_text("not a directory\n")
        return path

    def tree(self) -> set[str]:
        return {str(p.relative_to(self.root)) for p in self.root.rglob("*")}


Args = Callable[[Scratch], list[str]]


def fixed(*argv: str) -> Args:
    return lambda _: list(argv)


def bad_yaml(s: Scratch) -> Path:
    path = s.root / "bad.yaml"
    path.write_text("kind: [unclosed\n")
    return path


def alias_bomb(s: Scratch) -> Path:
    from tests.history.test_fleet_plan_route import alias_bomb as body

    path = s.root / "bomb.yaml"
    path.write_text(body())
    return path


def bad_fixture(s: Scratch) -> Path:
    path = s.root / "fixture"
    path.mkdir()
    (path / "list.json").write_text("{not json")
    return path


def no_store(s: Scratch) -> list[str]:
    """A history store that does not exist, named explicitly: as root the default store is
    /var/lib/podres-exporter/history.db, outside the scratch directory."""
    return ["--history.url", f"sqlite:///{s.root}/state/podres-exporter/history.db"]


def a_store(s: Scratch) -> list[str]:
    """An existing, empty history store (written by the exporter's own code)."""
    from exporter.history import open_store

    path = s.root / "history.db"
    if not path.exists():
        open_store(f"sqlite:///{path}").close()
    return ["--history.url", f"sqlite:///{path}"]


def empty_dir(s: Scratch) -> Path:
    path = s.root / "empty"
    path.mkdir()
    return path


OFF = ["--history.url", "off"]
SOCKET = ["--podresources.socket", "/nonexistent/podres/kubelet.sock",
          "--podresources.timeout", "1s"]

# (id, argv builder, a word the one stderr line must contain)
CASES: list[tuple[str, Args, str]] = [
    # -- the CLI itself
    ("no-command", fixed(), "required"),
    ("unknown-command", fixed("frobnicate"), "invalid choice"),
    ("unknown-flag", fixed("snapshot", "--bogus"), "unrecognized"),
    # -- serve
    ("serve-poll-zero", fixed("serve", *OFF, "--poll.interval", "0s"), "at least"),
    ("serve-poll-negative", fixed("serve", *OFF, "--poll.interval", "-5s"), "negative"),
    ("serve-bad-address", fixed("serve", *OFF, "--web.listen-address", "nonsense"),
     "listen-address"),
    ("serve-missing-web-config",
     fixed("serve", "--web.config.file", "/nonexistent/web.yml", "--history.url", "off"),
     "web.yml"),
    ("serve-bad-web-config",
     lambda s: ["serve", "--web.config.file", str(bad_yaml(s)), "--history.url", "off"],
     "yaml"),
    ("serve-history-under-file",
     lambda s: ["serve", "--history.url", f"sqlite:///{s.not_a_dir}/state/history.db",
                "--web.listen-address", "127.0.0.1:0", *SOCKET], "history"),
    ("serve-history-missing-dir",
     lambda s: ["serve", "--history.url", f"sqlite:///{s.root}/no/such/dir/h.db",
                "--web.listen-address", "127.0.0.1:0", *SOCKET], "no/such/dir"),
    ("serve-history-unknown-scheme",
     fixed("serve", "--history.url", "mysql://x/y", "--web.listen-address", "127.0.0.1:0"),
     "history"),
    ("serve-missing-topology",
     fixed("serve", "--topology", "/nonexistent/topology.json", "--history.url", "off",
           "--web.listen-address", "127.0.0.1:0", *SOCKET), "topology.json"),
    ("serve-kubelet-url-scheme",
     fixed("serve", "--kubelet.url", "banana://x", "--history.url", "off",
           "--web.listen-address", "127.0.0.1:0", *SOCKET), "kubelet.url"),
    ("serve-port-in-use", lambda s: ["serve", "--history.url", "off", "--web.listen-address",
                                     f"127.0.0.1:{s.env['BUSY_PORT']}", *SOCKET], "address"),
    # -- demo
    ("demo-bad-shape", fixed("demo", "--topology.shape", "0x0x0"), "topology"),
    ("demo-bad-policy-option", fixed("demo", "--cpu-policy-options", "nonsense"), "nonsense"),
    ("demo-port-in-use", lambda s: ["demo", "--web.listen-address",
                                    f"127.0.0.1:{s.env['BUSY_PORT']}"], "address"),
    # -- snapshot
    ("snapshot-missing-fixture", fixed("snapshot", "--from", "/nonexistent/fixture"),
     "fixture"),
    ("snapshot-empty-fixture", lambda s: ["snapshot", "--from", str(empty_dir(s))],
     "list.json"),
    ("snapshot-bad-fixture", lambda s: ["snapshot", "--from", str(bad_fixture(s))],
     "list.json"),
    ("snapshot-unreachable-socket", fixed("snapshot", "--sysfs", "/sys", *SOCKET),
     "kubelet.sock"),
    ("snapshot-missing-topology",
     fixed("snapshot", "--from", str(SCENARIO), "--topology", "/nonexistent/t.json"),
     "t.json"),
    # -- record
    ("record-unreachable-socket", lambda s: ["record", str(s.root / "capture"), *SOCKET],
     "kubelet.sock"),
    ("record-no-directory", fixed("record"), "required"),
    # -- sim
    ("sim-missing-fixture", lambda s: ["sim", "--from", "/nonexistent/fixture",
                                       "--socket", str(s.root / "k.sock")], "fixture"),
    ("sim-socket-under-file", lambda s: ["sim", "--from", str(SCENARIO), "--socket",
                                         str(s.not_a_dir / "k.sock")], "k.sock"),
    ("sim-bad-shape", lambda s: ["sim", "--topology.shape", "banana",
                                 "--socket", str(s.root / "k.sock")], "banana"),
    ("sim-missing-manifests", lambda s: ["sim", "--topology.shape", "1x4x1",
                                         "--manifests", "/nonexistent/m.yaml",
                                         "--socket", str(s.root / "k.sock")], "m.yaml"),
    # -- plan
    ("plan-missing-file", fixed("plan", "-f", "/nonexistent/m.yaml"), "m.yaml"),
    ("plan-empty-dir", lambda s: ["plan", "-f", str(empty_dir(s))], "empty"),
    ("plan-bad-yaml", lambda s: ["plan", "-f", str(bad_yaml(s))], "yaml"),
    # A YAML alias bomb (10**9 pod templates in 700 bytes) ran past 25 s and grew without
    # bound (issue 33, D1).
    ("plan-alias-bomb", lambda s: ["plan", "-f", str(alias_bomb(s))], "alias"),
    ("plan-fleet-alias-bomb", lambda s: ["plan", "--fleet", "-f", str(alias_bomb(s)),
                                         "--history.url", f"sqlite:///{s.root}/h.db"],
     "alias"),
    ("explain-alias-bomb", lambda s: ["explain", "-f", str(alias_bomb(s))], "alias"),
    # -- doctor
    ("doctor-missing-fixture", fixed("doctor", "--from", "/nonexistent/fixture"), "fixture"),
    ("doctor-kubelet-url-scheme", fixed("doctor", "--kubelet.url", "banana://x", *SOCKET),
     "kubelet.url"),
    # -- history
    ("history-no-subcommand", fixed("history"), "required"),
    ("history-events-no-store", lambda s: ["history", "events", *no_store(s)], "exist"),
    ("history-prune-no-store", lambda s: ["history", "prune", *no_store(s)], "exist"),
    ("history-prune-unreachable-pg",
     fixed("history", "prune", "--history.url", UNREACHABLE_PG), "127.0.0.1"),
    ("history-at-bad-time", lambda s: ["history", "at", "banana", *a_store(s)], "banana"),
    ("history-at-out-of-range",
     lambda s: ["history", "at", "9999-12-31T23:59:59-00:01", *a_store(s)], "9999"),
    ("history-events-out-of-range",
     lambda s: ["history", "events", "--since", "0001-01-01T00:00:00+00:01", *a_store(s)],
     "0001"),
    ("history-events-store-under-file",
     lambda s: ["history", "events", "--history.url",
                f"sqlite:///{s.not_a_dir}/history.db"], "history"),
    # -- api
    ("api-no-store", lambda s: ["api", "--history.url", f"sqlite:///{s.root}/none/h.db",
                                "--web.listen-address", "127.0.0.1:0"], "h.db"),
    ("api-unreachable-pg", fixed("api", "--history.url", UNREACHABLE_PG,
                                 "--web.listen-address", "127.0.0.1:0"), "127.0.0.1"),
]

# Real bugs in files other helpers own, one case each, for the lead to fix after merging.
XFAIL: dict[str, str] = {}


def _cases() -> list[object]:
    return [pytest.param(args, needle, id=name,
                         marks=[pytest.mark.xfail(strict=True, reason=XFAIL[name])]
                         if name in XFAIL else [])
            for name, args, needle in CASES]


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Scratch]:
    scratch = Scratch(tmp_path)
    (tmp_path / "home").mkdir()
    (tmp_path / "cwd").mkdir()
    state = str(tmp_path / "state")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PODRES_")}
    env.update(HOME=str(tmp_path / "home"), XDG_STATE_HOME=state, PYTHONPATH=str(REPO),
               GRPC_VERBOSITY="ERROR", PYTHONDONTWRITEBYTECODE="1")
    scratch.env = env
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        env["BUSY_PORT"] = str(held.getsockname()[1])
        yield scratch


@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize(("args", "needle"), _cases())
def test_misuse_is_one_line_and_creates_nothing(scratch: Scratch, args: Args,
                                                needle: str) -> None:
    argv = args(scratch)
    before = scratch.tree()
    root_state_before = ROOT_STATE.exists()
    try:
        run = subprocess.run([sys.executable, "-m", "exporter.cli", *argv],
                             cwd=scratch.root / "cwd", env=scratch.env, capture_output=True,
                             text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"still running after {TIMEOUT}s: {argv}\n{exc.stderr}") from None
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert "Traceback" not in run.stderr, run.stderr
    assert run.returncode != 0, (run.returncode, run.stdout[-500:], run.stderr)
    assert len(lines) == 1, run.stderr
    assert needle.lower() in lines[0].lower(), lines[0]
    assert scratch.tree() == before, sorted(scratch.tree() - before)
    assert ROOT_STATE.exists() == root_state_before, f"{argv} created {ROOT_STATE}"
