"""The ``serve`` and ``demo`` commands as an operator runs them: subprocesses, flags, exit
codes and stderr; and the ``pods`` collector's flags."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import StartSim
from tests.service.conftest import (
    CLI,
    TOKEN,
    RunServe,
    parse_exposition,
    scenario_root,
    series,
    value,
    without_pods,
)

POD_FAMILIES = ("podres_pod_cpus", "podres_pod_reclaimed_cpus", "podres_container_cpus",
                "podres_pod_memory_bytes")


def run_cli(*argv: str, env: dict[str, str] | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ, GRPC_VERBOSITY="ERROR")
    full_env.update(env or {})
    return subprocess.run([CLI, *argv], capture_output=True, text=True, timeout=timeout,
                          env=full_env, check=False)


def assert_one_error_line(run: subprocess.CompletedProcess[str], *, exact: bool,
                          contains: str) -> None:
    """Non-zero, no traceback, one error line naming the problem. ``exact``: stderr is that
    line and nothing else (argparse's own errors are preceded by the usage synopsis)."""
    assert run.returncode != 0
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    errors = [line for line in lines if "error:" in line]
    assert len(errors) == 1, run.stderr
    assert errors[0] == lines[-1]
    assert contains in errors[0], errors[0]
    if exact:
        assert len(lines) == 1, run.stderr


@pytest.mark.parametrize(("address", "message"), [
    ("nonsense", "expected [HOST]:PORT"),
    ("127.0.0.1:99999", "port out of range"),
    ("127.0.0.1:http", "port is not a number"),
    ("[::1", "[::1"),
    ("127.0.0.1:", "port is not a number"),
])
def test_bad_listen_address(address: str, message: str, short_tmp: Path) -> None:
    run = run_cli("serve", "--web.listen-address", address, "--history.url", "off",
                  "--podresources.socket", str(short_tmp / "kubelet.sock"))
    assert_one_error_line(run, exact=True, contains=message)


def test_address_in_use(short_tmp: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = run_cli("serve", "--web.listen-address", f"127.0.0.1:{port}",
                      "--history.url", "off",
                      "--podresources.socket", str(short_tmp / "kubelet.sock"))
    assert_one_error_line(run, exact=True, contains="cannot listen on")


@pytest.mark.parametrize(("argv", "message"), [
    (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["--poll.interval", "5x"], "invalid duration '5x'"),
    (["--podresources.staleness", "1 minute"], "invalid duration"),
    (["--collector.pods.max-series", "-1"], "must be positive"),
    (["--log.format", "xml"], "invalid choice: 'xml'"),
    # 0s polled in a busy loop; a negative value used to read as a missing argument.
    (["--poll.interval", "0s"], "invalid duration '0s': must be at least 100ms"),
    (["--poll.interval", "-5s"], "invalid duration '-5s': must not be negative"),
    (["--history.prune-interval", "0s"], "must be at least 1m"),
    (["--kubelet.url", "banana://x"], "invalid URL 'banana://x'"),
])
def test_bad_flags(argv: list[str], message: str) -> None:
    run = run_cli("serve", *argv)
    assert run.returncode == 2
    assert_one_error_line(run, exact=False, contains=message)


@pytest.mark.parametrize(("value", "message"), [
    ("often", "invalid duration 'often'"),
    ("0s", "invalid duration '0s': must be at least 100ms"),
])
def test_bad_environment_variable(value: str, message: str) -> None:
    run = run_cli("serve", env={"PODRES_POLL_INTERVAL": value})
    assert run.returncode == 2
    assert_one_error_line(run, exact=False, contains=message)


async def test_pods_collector_capped(start_sim: StartSim, run_serve: RunServe) -> None:
    directory = scenario_root() / "database-pod-scope"
    sim = await start_sim(directory, http=True, token=TOKEN)
    full = await run_serve(sim, "--topology", str(directory / "topology.json"),
                           "--poll.interval", "1m")
    capped = await run_serve(sim, "--topology", str(directory / "topology.json"),
                             "--poll.interval", "1m", "--collector.pods.max-series", "3")
    full_s = await full.wait_for(lambda s: value(s, "podres_up") == 1.0, what="poll")
    capped_s = await capped.wait_for(lambda s: value(s, "podres_up") == 1.0, what="poll")

    def pod_series(samples: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> set[
            tuple[str, frozenset[tuple[str, str]]]]:
        return {k for k in samples if k[0] in POD_FAMILIES}

    total = len(pod_series(full_s))
    assert total > 3
    kept = pod_series(capped_s)
    assert len(kept) == 3
    assert kept <= pod_series(full_s)  # a subset, with the same values
    assert all(capped_s[k] == full_s[k] for k in kept)
    assert value(capped_s, "podres_pods_series_dropped_total") == total - 3
    assert value(full_s, "podres_pods_series_dropped_total") == 0.0
    # Node-level families are never capped.
    assert series(capped_s, "podres_cpus") == series(full_s, "podres_cpus")


async def test_pods_collector_off(start_sim: StartSim, run_serve: RunServe) -> None:
    directory = scenario_root() / "database-pod-scope"
    sim = await start_sim(directory, http=True, token=TOKEN)
    served = await run_serve(sim, "--topology", str(directory / "topology.json"),
                             "--poll.interval", "1m", "--no-collector.pods")
    samples = await served.wait_for(lambda s: value(s, "podres_up") == 1.0, what="poll")
    text = await served.metrics_text()
    assert not [k for k in samples if k[0] in POD_FAMILIES]
    for family in POD_FAMILIES:
        assert family not in text
    assert series(samples, "podres_cpus")
    assert series(samples, "podres_containers")


def test_demo_subprocess() -> None:
    """``podres-exporter demo`` as the README runs it: the printed URL serves non-zero
    pod_shared and pod_exclusive containers; Ctrl-C stops it cleanly."""
    process = subprocess.Popen(
        [CLI, "demo", "--web.listen-address", "127.0.0.1:0", "--duration", "20s",
         "--poll.interval", "1s"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, GRPC_VERBOSITY="ERROR"))
    try:
        url = None
        assert process.stdout is not None
        for line in process.stdout:
            match = re.search(r"metrics\s+(https?://\S+)/metrics", line)
            if match:
                url = match.group(1)
                break
        assert url, "demo printed no metrics URL"
        samples = asyncio.run(_scrape_until_shared_and_exclusive(url))
        for assignment in ("pod_shared", "pod_exclusive"):
            got = value(samples, "podres_containers", resource="cpu", assignment=assignment)
            assert got is not None and got > 0, assignment
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
        assert process.returncode == 0, err
        assert "Traceback" not in err
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


async def _scrape_until_shared_and_exclusive(
        url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        for _ in range(300):
            async with session.get(url + "/metrics") as response:
                assert response.status == 200
                samples = parse_exposition(await response.text())
            if all((value(samples, "podres_containers", resource="cpu", assignment=a) or 0) > 0
                   for a in ("pod_shared", "pod_exclusive")):
                return samples
            await asyncio.sleep(0.05)
    return samples


async def test_serve_process_sighup_polls_now_and_sigterm_stops(
        start_sim: StartSim, short_tmp: Path) -> None:
    """A real ``serve`` process with an hour-long interval: SIGHUP makes it poll at once
    (the deletion shows up), SIGTERM stops it with status 0 and one last line naming it;
    logs are JSON lines."""
    directory = scenario_root() / "database-pod-scope"
    sim = await start_sim(directory, http=True, token=TOKEN)
    token_file = short_tmp / "token"
    token_file.write_text(TOKEN)
    process = subprocess.Popen(
        [CLI, "serve", "--web.listen-address", "127.0.0.1:0", "--log.format", "json",
         "--history.url", "off", "--poll.interval", "1h",
         "--podresources.socket", sim.socket_path, "--topology",
         str(directory / "topology.json"), "--kubelet.url", str(sim.http_url),
         "--kubelet.ca-file", str(sim.cert_path), "--kubelet.token-file", str(token_file)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, GRPC_VERBOSITY="ERROR"))
    loop = asyncio.get_running_loop()
    try:
        assert process.stderr is not None
        line = await asyncio.wait_for(loop.run_in_executor(None, process.stderr.readline), 60)
        record = json.loads(line)
        assert record["msg"] == "listening", record
        url = record["url"]
        async with aiohttp.ClientSession() as session:
            async def scrape() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
                async with session.get(url + "/metrics") as response:
                    return parse_exposition(await response.text())

            def worker(s: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> bool:
                return bool(series(s, "podres_pod_cpus", namespace="batch", pod="worker"))

            for _ in range(600):
                if worker(await scrape()):
                    break
                await asyncio.sleep(0.05)
            assert worker(await scrape())
            sim.set_state(without_pods(sim.state, ("batch", "worker")))
            process.send_signal(signal.SIGHUP)
            for _ in range(600):
                if not worker(await scrape()):
                    break
                await asyncio.sleep(0.05)
            assert not worker(await scrape()), "SIGHUP did not trigger a poll"
        process.send_signal(signal.SIGTERM)
        _, err = await loop.run_in_executor(None, lambda: process.communicate(timeout=30))
        assert process.returncode == 0, err
        records = [json.loads(text) for text in err.splitlines()]  # one JSON object each
        # The last line says what stopped it and how long stopping took.
        last = records[-1]
        assert last["msg"] == "stopped" and last["reason"] == "SIGTERM", last
        assert 0 <= last["seconds"] < 10, last
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
