"""The command line: bad input gives a non-zero exit and one clear line (no traceback), and
every flag reads its PODRES_ environment variable."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.cli import build_parser, main
from exporter.flags import env_name, parse_duration
from exporter.options import HistoryOptions, WebOptions
from foundation.helpers import REPO, SCENARIOS, arun_cli, assert_one_clear_line, run_cli

HYBRID = SCENARIOS / "sidecar-hybrid"


@pytest.fixture
def fixture_copy(short_tmp: Path) -> Path:
    target = short_tmp / "node"
    shutil.copytree(HYBRID, target)
    return target


@pytest.mark.parametrize(("file", "content", "needle"), [
    ("list.json", "{not json", "invalid JSON"),
    ("list.json", '{"podResources": [{"name": 5, "bogus": 1}]}', "ListPodResourcesResponse"),
    ("list.json", "[]", "ListPodResourcesResponse"),
    ("allocatable.json", '{"cpuIds": ["x"]}', "AllocatableResourcesResponse"),
    ("topology.json", '{"cpus": [{"id": "a"}]}', "bad CPU entry"),
    ("topology.json", '{"cpus": [{"id": 1}, {"id": 1}]}', "duplicate"),
    ("topology.json", "[1, 2]", "'cpus' list"),
    ("configz.json", '{"kubeletconfig": {"reservedSystemCPUs": "0-x"}}', "reservedSystemCPUs"),
    ("configz.json", "[]", "expected a JSON object"),
    # Values the kubelet refuses to start with: it never serves them.
    ("configz.json", '{"kubeletconfig": {"kubeReserved": {"cpu": "abc"}}}',
     "kubeReserved.cpu: not a quantity: 'abc'"),
    ("configz.json", '{"kubeletconfig": {"systemReserved": "2"}}', "systemReserved"),
    ("configz.json", '{"kubeletconfig": {"reservedSystemCPUs": 5000}}',
     'reservedSystemCPUs: expected a CPU list such as "0-1", got 5000'),
    ("configz.json", '{"kubeletconfig": {"reservedSystemCPUs": "9223372036854775807"}}',
     "reservedSystemCPUs"),
    ("pods.json", '{"items": [{"metadata": {}, "spec": {"containers": [{}]}}]}',
     "container without a name"),
    ("pods.json", '{"items": [{"spec": {"containers": [{"name": "a", "resources": '
     '{"limits": {"cpu": "lots"}}}]}}]}', "not a quantity"),
    ("list.json", b"\xff\xfe\x00", "not UTF-8"),
])
def test_malformed_fixture_files(fixture_copy: Path, file: str, content: str | bytes,
                                 needle: str) -> None:
    path = fixture_copy / file
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    run = run_cli("snapshot", "--from", str(fixture_copy))
    assert run.code == 2
    line = assert_one_clear_line(run, needle, "podres-exporter snapshot: error")
    assert file in line


def test_missing_fixture_dir(short_tmp: Path) -> None:
    run = run_cli("snapshot", "--from", str(short_tmp / "absent"))
    assert_one_clear_line(run, "not a fixture directory")


def test_fixture_dir_without_list(short_tmp: Path) -> None:
    run = run_cli("snapshot", "--from", str(short_tmp))
    assert_one_clear_line(run, "list.json is missing")


async def test_topology_file_missing_is_an_error(start_sim: Any) -> None:
    """Without it the ledger would silently describe the host's CPUs."""
    sim = await start_sim(HYBRID)
    run = await arun_cli("snapshot", "--output", "json", "--podresources.socket",
                         sim.socket_path, "--topology", "/nonexistent/topology.json")
    assert_one_clear_line(run, "--topology /nonexistent/topology.json: file does not exist")
    assert run.out == ""


async def test_live_topology_file_problems_are_warnings(start_sim: Any, short_tmp: Path
                                                        ) -> None:
    sim = await start_sim(HYBRID)
    bad = short_tmp / "topology.json"
    bad.write_text("{nope")
    run = await arun_cli("snapshot", "--output", "json", "--podresources.socket",
                         sim.socket_path, "--topology", str(bad))
    assert run.code == 0 and "Traceback" not in run.err
    assert run.err_lines and all("warning" in line and "invalid JSON" in line
                                 for line in run.err_lines)
    assert json.loads(run.out)["cpu_pools_by_numa"] == {}


@pytest.mark.parametrize(("args", "needle"), [
    (["snapshot", "--bogus"], "unrecognized arguments: --bogus"),
    (["snapshot", "--output", "yaml"], "invalid choice"),
    (["snapshot", "--podresources.timeout", "5x"], "invalid duration"),
    (["snapshot", "--podresources.timeout", ""], "invalid duration"),
    (["snapshot", "--podresources.max-receive-bytes", "-1"], "must be positive"),
    (["snapshot", "--podresources.max-receive-bytes", "lots"], "not a whole number"),
    (["frobnicate"], "invalid choice"),
    ([], "required"),
])
def test_bad_flags(args: list[str], needle: str) -> None:
    run = run_cli(*args)
    assert run.code == 2
    assert_one_clear_line(run, needle)


@pytest.mark.parametrize(("text", "seconds"), [
    ("500ms", 0.5), ("15s", 15), ("1m", 60), ("2h", 7200), ("30d", 30 * 86400),
    ("1h30m", 5400), ("0.5s", 0.5),
])
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "5x", "s", "-1s", "1s 2s", "1.s", "1e3s"])
def test_parse_duration_rejects(text: str) -> None:
    import argparse

    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration(text)


def test_env_names() -> None:
    assert env_name("--podresources.socket") == "PODRES_PODRESOURCES_SOCKET"
    assert env_name("--kubelet.insecure-skip-verify") == "PODRES_KUBELET_INSECURE_SKIP_VERIFY"


def test_env_vars_are_honoured() -> None:
    run = run_cli("snapshot", env={"PODRES_FROM": str(HYBRID), "PODRES_OUTPUT": "json"})
    assert run.code == 0, run.err
    assert json.loads(run.out)["reclaimed_cpus"] == 1


def test_env_var_socket_is_used(short_tmp: Path) -> None:
    path = short_tmp / "from-env.sock"
    run = run_cli("snapshot", env={"PODRES_PODRESOURCES_SOCKET": str(path),
                                   "PODRES_TOPOLOGY": str(HYBRID / "topology.json")})
    assert_one_clear_line(run, str(path), "does not exist")


def test_flag_beats_env_var() -> None:
    run = run_cli("snapshot", "--from", str(HYBRID), "--output", "table",
                  env={"PODRES_OUTPUT": "json", "PODRES_FROM": "/nonexistent"})
    assert run.code == 0, run.err
    assert run.out.startswith("Node ")


def test_bad_env_var_value_is_one_line() -> None:
    run = run_cli("snapshot", "--from", str(HYBRID),
                  env={"PODRES_PODRESOURCES_TIMEOUT": "soon"})
    assert run.code == 2
    assert_one_clear_line(run, "invalid duration")


async def test_env_vars_for_kubelet_flags(start_sim: Any, short_tmp: Path) -> None:
    folder = SCENARIOS / "database-pod-scope"
    sim = await start_sim(folder, http=True, token="t0k")
    token = short_tmp / "token"
    token.write_text("t0k")
    run = await arun_cli("snapshot", "--output", "json", env={
        "PODRES_PODRESOURCES_SOCKET": sim.socket_path, "PODRES_KUBELET_URL": sim.http_url,
        "PODRES_KUBELET_CA_FILE": str(sim.cert_path),
        "PODRES_KUBELET_TOKEN_FILE": str(token),
        "PODRES_TOPOLOGY": str(folder / "topology.json"), "PODRES_NODE_NAME": "node-7"})
    assert run.code == 0 and run.err == "", run.err
    doc = json.loads(run.out)
    assert doc["node"]["name"] == "node-7"
    assert {p["estimate_basis"] for p in doc["pods"]} == {"spec"}


async def test_insecure_skip_verify_env_boolean(start_sim: Any) -> None:
    folder = SCENARIOS / "database-pod-scope"
    sim = await start_sim(folder, http=True)
    run = await arun_cli("snapshot", "--output", "json", env={
        "PODRES_PODRESOURCES_SOCKET": sim.socket_path, "PODRES_KUBELET_URL": sim.http_url,
        "PODRES_KUBELET_INSECURE_SKIP_VERIFY": "true",
        "PODRES_TOPOLOGY": str(folder / "topology.json")})
    assert run.code == 0 and run.err == "", run.err


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith("podres-exporter ")
    run = run_cli("snapshot", "--help")
    assert run.code == 0 and "PODRES_PODRESOURCES_SOCKET" in run.out


def test_node_name_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["snapshot", "--from", str(HYBRID), "-o", "json", "--node-name", "n1"]) == 0
    assert json.loads(capsys.readouterr().out)["node"]["name"] == "n1"


@pytest.mark.parametrize(("env", "expected"), [
    ({"NODE_NAME": "from-downward-api"}, "from-downward-api"),
    ({"NODE_NAME": "from-downward-api", "PODRES_NODE_NAME": "explicit"}, "explicit"),
    ({}, socket.gethostname()),
])
def test_node_name_defaults(env: dict[str, str], expected: str,
                            monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture[str]) -> None:
    """The name the history store uses is the Kubernetes node name the scrape configuration
    attaches as `node`: the downward API's NODE_NAME, else the host name (never empty)."""
    for var in ("NODE_NAME", "PODRES_NODE_NAME"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert main(["snapshot", "--from", str(HYBRID), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["node"]["name"] == expected


def test_hostile_names_in_table_output(short_tmp: Path) -> None:
    listing = {"podResources": [{"name": 'we"b\nnext', "namespace": "ns\u202e",
                                 "containers": [{"name": "c\tx", "cpuIds": ["1"]},
                                                {"name": "ünï😀"}]}]}
    (short_tmp / "list.json").write_text(json.dumps(listing))
    run = run_cli("snapshot", "--from", str(short_tmp))
    assert run.code == 0, run.err
    assert "we\"b\\nnext" in run.out and "ünï😀" in run.out
    run = run_cli("snapshot", "--from", str(short_tmp), "-o", "json")
    doc = json.loads(run.out)
    assert doc["pods"][0]["name"] == 'we"b\nnext'


# -- typed options: one declaration per flag, bounded durations, one topology meaning -----


def _main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``main`` in-process; argparse's own errors exit through SystemExit."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def _subparsers(parser: argparse.ArgumentParser, prefix: str = ""
                ) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix}{name}", sub
                yield from _subparsers(sub, f"{prefix}{name} ")


@pytest.mark.parametrize(("argv", "needle"), [
    (["serve", "--poll.interval", "0s"], "'0s': must be at least 100ms"),
    (["serve", "--poll.interval", "-5s"], "'-5s': must not be negative"),
    (["serve", "--poll.interval=-5s"], "'-5s': must not be negative"),
    (["serve", "--poll.interval", "2d"], "'2d': must be at most 1d"),
    (["serve", "--podresources.staleness", "0s"], "must be at least 1s"),
    (["serve", "--history.retention", "-1d"], "must not be negative"),
    (["serve", "--history.prune-interval", "1s"], "must be at least 1m"),
    (["serve", "--kubelet.metrics-interval", "0s"], "must be at least 1s"),
    (["snapshot", "--podresources.timeout", "0s"], "must be at least 10ms"),
    (["demo", "--poll.interval", "0s"], "must be at least 100ms"),
    (["demo", "--churn.interval", "-1s"], "must not be negative"),
    (["history", "prune", "--history.retention", "5s"], "must be at least 1m"),
    (["history", "events", "--limit", "0"], "must be positive"),
    (["sim", "--manifests-poll", "0s"], "must be at least 10ms"),
])
def test_durations_have_bounds_and_one_error_style(capsys: pytest.CaptureFixture[str],
                                                   argv: list[str], needle: str) -> None:
    code, _, err = _main(capsys, *argv)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert needle in lines[0] and "expected one argument" not in lines[0]
    command = " ".join(argv[:2] if argv[0] == "history" else argv[:1])
    assert lines[0].startswith(f"podres-exporter {command}: error: argument --")


@pytest.mark.parametrize(("argv", "needle"), [
    (["doctor", "--kubelet.url", "banana://x"], "invalid URL 'banana://x': expected https://"),
    (["snapshot", "--kubelet.url", "10.0.0.1:10250"], "expected https://HOST:PORT"),
    (["serve", "--web.listen-address", "[::1:9847"], "unbalanced [ ]"),
    (["doctor", "--kubelet.url", "https://127.0.0.1:1", "--topology", "/nonexistent/t.json"],
     "--topology /nonexistent/t.json: file does not exist"),
])
def test_bad_source_and_web_values(capsys: pytest.CaptureFixture[str], argv: list[str],
                                   needle: str) -> None:
    code, _, err = _main(capsys, *argv)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and needle in err, err


def test_help_shows_each_default_once() -> None:
    parser = build_parser()
    for name, sub in _subparsers(parser):
        text = sub.format_help()
        assert "default: None" not in text, name
        # One option's entry runs from its "  --flag" line to the next one.
        entries = re.split(r"\n  (?=-)", text)
        for entry in entries:
            assert entry.count("default:") <= 1, f"{name}: {entry}"


def test_help_shows_the_defaults_of_typed_flags() -> None:
    help_text = dict(_subparsers(build_parser()))["serve"].format_help()
    flat = " ".join(help_text.split())
    for shown in ("(default: 15s)", "(default: :9847)", "(default: 30d)", "(default: 1h)",
                  "(default: 5m)", "(default: True)", "(default: 50000)"):
        assert shown in flat, shown


def test_history_subcommands_have_descriptions() -> None:
    subs = dict(_subparsers(build_parser()))
    for name in ("history events", "history at", "history prune"):
        assert subs[name].description, name
    assert "--history.prune-interval" in subs["history prune"].description


def test_a_flag_means_the_same_in_every_command() -> None:
    """Shared flags are declared once: same destination, value type, choices and metavar
    wherever they appear (the help may say what the command does with it, and a command
    may change the default: demo listens on loopback)."""
    seen: dict[str, tuple[str, argparse.Action]] = {}
    shared = set()
    for name, sub in _subparsers(build_parser()):
        for action in sub._actions:
            if not action.option_strings or action.dest == "help":
                continue
            flag = action.option_strings[0]
            if flag not in seen:
                seen[flag] = (name, action)
                continue
            shared.add(flag)
            first_name, first = seen[flag]
            where = f"{flag} in {first_name} and {name}"
            assert (action.dest, action.type, action.choices, action.metavar) == \
                (first.dest, first.type, first.choices, first.metavar), where
    assert {"--web.listen-address", "--history.url", "--log.level", "--poll.interval",
            "--topology", "--podresources.socket", "--output"} <= shared


def test_api_and_serve_listen_on_the_documented_port() -> None:
    parser = build_parser()
    serve = WebOptions.from_args(parser.parse_args(["serve"]))
    api = WebOptions.from_args(parser.parse_args(["api"]))
    assert serve.bind() == api.bind() == (None, 9847)
    assert "**9847**" in (REPO / "README.md").read_text(encoding="utf-8")
    demo = WebOptions.from_args(parser.parse_args(["demo"]))
    assert demo.bind() == ("127.0.0.1", 9847)


def test_hidden_knobs_reach_their_consumers(short_tmp: Path) -> None:
    from exporter.commands._sources import source_options
    from exporter.commands.serve import _open_history

    args = build_parser().parse_args(["serve", "--kubelet.metrics-interval", "30s",
                                      "--kubelet.pods-refresh-interval", "5m",
                                      "--history.prune-interval", "2h", "--history.url",
                                      f"sqlite:///{short_tmp}/h.db"])
    assert source_options(args).metrics_interval == 30.0
    assert source_options(args).pods_interval == 300.0
    history = HistoryOptions.from_args(args)
    assert history.prune_interval == 7200.0
    opened = _open_history(history, "n1")
    assert opened is not None
    try:
        assert opened.writer.prune_interval == 7200.0
    finally:
        opened.store.close()


def test_options_groups_refuse_unknown_fields() -> None:
    with pytest.raises(ValueError, match="no option nope"):
        WebOptions.add_flags(argparse.ArgumentParser(), only=("nope",))


def test_topology_is_a_file_in_plan_too(capsys: pytest.CaptureFixture[str]) -> None:
    manifest = str(REPO / "tests" / "plan" / "data" / "motivating.yaml")
    topology = str(SCENARIOS / "database-pod-scope" / "topology.json")
    code, out, err = _main(capsys, "plan", "-f", manifest, "--topology", topology, "-o", "json")
    assert code == 0, err
    from_file = json.loads(out)
    assert from_file["pods"][0]["cpus"]
    code, out, _ = _main(capsys, "plan", "-f", manifest, "--topology.shape", "1x8x1",
                         "-o", "json")
    shaped = json.loads(out)
    # The pre-file spelling still gives the shape (with a deprecation warning,
    # tests/foundation/test_cli_output.py).
    code, out, _ = _main(capsys, "plan", "-f", manifest, "--topology", "1x8x1", "-o", "json")
    assert code == 0 and json.loads(out) == shaped


def test_plan_reads_the_topology_file_from_the_environment(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PODRES_TOPOLOGY", str(SCENARIOS / "database-pod-scope" /
                                              "topology.json"))
    manifest = str(REPO / "tests" / "plan" / "data" / "motivating.yaml")
    code, out, err = _main(capsys, "plan", "-f", manifest, "-o", "json")
    assert code == 0, err
    assert json.loads(out)["pods"][0]["cpus"]


@pytest.mark.parametrize(("argv", "needle"), [
    (["--topology", "/nonexistent/topology.json"], "--topology.shape SOCKETSxCORESxTHREADS"),
    (["--topology", "/dev/null", "--topology.shape", "1x4x1"], "not both"),
    (["--topology.shape", "1x4"], "SOCKETSxCORESxTHREADS"),
])
def test_plan_topology_mistakes(capsys: pytest.CaptureFixture[str], argv: list[str],
                                needle: str) -> None:
    manifest = str(REPO / "tests" / "plan" / "data" / "motivating.yaml")
    code, _, err = _main(capsys, "plan", "-f", manifest, *argv)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and needle in err, err


def test_sim_refuses_a_socket_in_use(short_tmp: Path, capsys: pytest.CaptureFixture[str]
                                     ) -> None:
    import socket

    path = short_tmp / "live.sock"
    with socket.socket(socket.AF_UNIX) as live:
        live.bind(str(path))
        live.listen()
        code, _, err = _main(capsys, "sim", "--from", str(HYBRID), "--socket", str(path))
        assert code == 2 and "another process is serving it" in err, err
        assert path.exists()  # not taken over
    plain = short_tmp / "notes.txt"
    plain.write_text("keep me")
    code, _, err = _main(capsys, "sim", "--from", str(HYBRID), "--socket", str(plain))
    assert code == 2 and "exists and is not a socket" in err, err
    assert plain.read_text() == "keep me"


def test_sim_names_the_flags_a_client_needs(short_tmp: Path) -> None:
    from exporter.commands.sim import client_flags

    info = {"socket": "k.sock", "https": "https://127.0.0.1:4443", "ca_file": "/t/ca.pem"}
    flags = client_flags(info, "/f/topology.json")
    assert flags.startswith(f"--podresources.socket {Path('k.sock').resolve()} ")
    assert "--kubelet.url https://127.0.0.1:4443 --kubelet.ca-file /t/ca.pem" in flags
    assert "--topology /f/topology.json" in flags
    args = build_parser().parse_args(["serve", *shlex.split(flags)])
    assert vars(args)["topology"] == "/f/topology.json"
    assert "--topology" not in client_flags({**info, "https": None}, None)


def test_a_bad_choice_from_the_environment_is_one_line(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """argparse checks choices only on the command line: the options check the rest."""
    monkeypatch.setenv("PODRES_LOG_LEVEL", "verbose")
    code, _, err = _main(capsys, "serve", "--history.url", "off")
    assert code == 2
    assert err.strip() == ("podres-exporter serve: error: --log.level 'verbose' (from "
                           "PODRES_LOG_LEVEL): invalid choice (choose from debug, info, "
                           "warn, error)")


@pytest.mark.parametrize(("seconds", "text"), [
    (0.01, "10ms"), (0.1, "100ms"), (1.5, "1500ms"), (15.0, "15s"), (60.0, "1m"),
    (300.0, "5m"), (3600.0, "1h"), (86400.0, "1d"), (30 * 86400.0, "30d"), (90.0, "90s"),
])
def test_format_duration_is_read_back(seconds: float, text: str) -> None:
    from exporter.flags import format_duration

    assert format_duration(seconds) == text
    assert parse_duration(text) == pytest.approx(seconds)
