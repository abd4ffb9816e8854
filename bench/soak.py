"""Memory soak: ``python -m bench.soak [--minutes 30] [--debug]``.

Runs a real ``podres-exporter serve`` process with a SQLite history store against the demo's
simulated node (run in this process), which changes every ``--churn-interval`` (one pod
added or removed); ``serve`` polls every ``--poll-interval`` and a scraper fetches
``/metrics`` every ``--scrape-interval``. The resident set (VmRSS) of ``serve`` is sampled
every ``--sample-interval``. After ``--warmup-minutes`` the growth is measured two ways:
the least-squares slope over the rest of the run times its length, and the newest sample
minus the first one after warm-up. Target: both ≤ 1 MiB. A run of more than an hour
(``make soak`` runs 90 minutes) is judged on its last hour instead (see ``last_hour``): a
30-minute run cannot tell a plateau from a slow leak.

``--debug`` runs ``serve`` under tracemalloc (RSS is then meaningless: the tracing costs
memory of its own): at the end of warm-up and then every ``--debug-every`` seconds, the
child writes the allocation sites that grew most since the end of warm-up (tracing starts
there; a site's count difference is its number of live blocks), and the memory
tracemalloc cannot see: SQLite's own allocations and glibc's heap, in use and free but
kept, and the resident set by kind of mapping; to ``--debug-out`` (JSON lines).

Not run by CI (it takes an hour and a half); ``make soak``, and
``make soak SOAK_ARGS=--history-off``. Prints a table of samples and, as its
last line, one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import ctypes.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

GROWTH_TARGET_MIB = 1.0
READY_TIMEOUT = 60.0


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def slope_per_minute(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MiB) points, in MiB per minute."""
    if len(points) < 2:
        return 0.0
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    if not den:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den * 60


# -- the debug child ---------------------------------------------------------------------

def rss_by_kind() -> dict[str, float]:
    """This process's resident memory by kind of mapping, in MiB: the main heap (brk),
    anonymous mappings (thread malloc arenas, Python's object arenas, big blocks) and
    files (code, and SQLite's shared-memory index)."""
    kinds = {"heap": 0, "anon": 0, "file": 0}
    kind = "anon"
    with open("/proc/self/smaps", encoding="ascii", errors="replace") as f:
        for line in f:
            head = line.split(maxsplit=6)
            if "-" in head[0] and not head[0].endswith(":"):
                name = head[5].strip() if len(head) > 5 else ""
                kind = "heap" if name == "[heap]" else "file" if name.startswith("/") \
                    else "anon"
            elif head[0] == "Rss:":
                kinds[kind] += int(head[1])
    return {f"rss_{k}_mib": round(v / 1024, 3) for k, v in kinds.items()}


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def native_memory() -> dict[str, float]:
    """Memory tracemalloc does not see: SQLite's own allocations (page cache, statements,
    schema) and glibc's heap (in use, and free but kept), in MiB."""
    out: dict[str, float] = {}
    with contextlib.suppress(OSError, AttributeError):
        sqlite = ctypes.CDLL(ctypes.util.find_library("sqlite3") or "libsqlite3.so.0")
        sqlite.sqlite3_memory_used.restype = ctypes.c_int64
        out["sqlite_used_mib"] = round(sqlite.sqlite3_memory_used() / 2**20, 3)
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallinfo2.restype = _Mallinfo2
        info = libc.mallinfo2()
        out["malloc_in_use_mib"] = round((info.uordblks + info.hblkhd) / 2**20, 3)
        out["malloc_free_kept_mib"] = round(info.fordblks / 2**20, 3)
        out["malloc_arena_mib"] = round(info.arena / 2**20, 3)
    out["rss_mib"] = round(rss_mib(os.getpid()), 3)
    out.update(rss_by_kind())
    return out


def _debug_probe(out: Path, warmup: float, every: float, frames: int) -> None:
    """In the ``serve`` process: record what grows after warm-up."""
    import gc
    import tracemalloc

    started = time.monotonic()

    def run() -> None:
        time.sleep(warmup)
        # Started only now: what is traced from here on and still alive later is growth,
        # and start-up is not slowed down by the tracing.
        tracemalloc.start(frames)
        base = tracemalloc.take_snapshot()
        with out.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"t": round(time.monotonic() - started),
                                "event": "baseline", **native_memory()}) + "\n")
        while True:
            time.sleep(every)
            # No gc.collect() here: garbage the collector has not reached yet is part of
            # what the process holds.
            snap = tracemalloc.take_snapshot()
            top = snap.compare_to(base, "traceback")[:15]
            with out.open("a", encoding="utf-8") as f:
                f.write(json.dumps({
                    "t": round(time.monotonic() - started),
                    "traced_mib": round(tracemalloc.get_traced_memory()[0] / 2**20, 3),
                    **native_memory(),
                    "gc_count": gc.get_count(), "gc_threshold": gc.get_threshold(),
                    "gc_stats": gc.get_stats(),
                    "sites_grown": [{"size_diff_kib": round(s.size_diff / 1024, 1),
                                     "count_diff": s.count_diff,
                                     "where": [f"{fr.filename}:{fr.lineno}"
                                               for fr in s.traceback][-frames:]}
                                    for s in top],
                }) + "\n")

    threading.Thread(target=run, name="soak-debug", daemon=True).start()


def child_main(argv: list[str]) -> int:
    """``python -m bench.soak --child OUT WARMUP EVERY -- serve ARGS``."""
    out, warmup, every = Path(argv[0]), float(argv[1]), float(argv[2])
    _debug_probe(out, warmup, every, frames=8)
    from exporter.cli import main

    return main(argv[4:])


# -- the soak ----------------------------------------------------------------------------

async def wait_ready(session: aiohttp.ClientSession, url: str, proc: subprocess.Popen[bytes]
                     ) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"serve exited with {proc.returncode}")
        with contextlib.suppress(aiohttp.ClientError):
            async with session.get(url + "/metrics") as resp:
                if resp.status == 200:
                    return
        await asyncio.sleep(0.2)
    raise SystemExit("serve did not answer within a minute")


async def scrape_loop(session: aiohttp.ClientSession, url: str, interval: float,
                      counts: Counter[str]) -> None:
    while True:
        start = time.monotonic()
        try:
            async with session.get(url + "/metrics") as resp:
                await resp.read()
                counts[str(resp.status)] += 1
        except aiohttp.ClientError:
            counts["error"] += 1
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - start)))


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_command(args: argparse.Namespace, sim: Any, workdir: Path, port: int
                  ) -> list[str]:
    history = "off" if args.history_off else f"sqlite:///{workdir / 'history.db'}"
    serve = [
        "serve",
        "--podresources.socket", sim.socket_path,
        "--kubelet.url", str(sim.http_url),
        "--kubelet.ca-file", str(sim.cert_path),
        "--kubelet.token-file", "",
        "--topology", str(sim.topology_file),
        "--web.listen-address", f"127.0.0.1:{port}",
        "--poll.interval", f"{args.poll_interval}s",
        "--history.url", history,
        "--history.summary-interval", f"{args.summary_interval}s",
        "--node-name", "soak-node",
    ]
    if args.debug:
        return [sys.executable, "-m", "bench.soak", "--child", str(args.debug_out),
                str(args.warmup_minutes * 60), str(args.debug_every), "--", *serve]
    return [sys.executable, "-m", "exporter.cli", *serve]


async def soak(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from exporter.demo.node import start_demo_node

    sim, description = await start_demo_node(workdir, args.topology,
                                             churn=args.churn_interval)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, GRPC_VERBOSITY="ERROR")
    proc = subprocess.Popen(serve_command(args, sim, workdir, port), env=env,
                            stdout=subprocess.DEVNULL)
    counts: Counter[str] = Counter()
    samples: list[tuple[float, float]] = []
    try:
        async with aiohttp.ClientSession() as session:
            await wait_ready(session, url, proc)
            print(f"soak: serve pid {proc.pid} on {url}; simulated node: {description}; "
                  f"{args.minutes:g} min, warm-up {args.warmup_minutes:g} min", flush=True)
            scraper = asyncio.create_task(scrape_loop(session, url, args.scrape_interval,
                                                      counts))
            start = time.monotonic()
            end = start + args.minutes * 60
            while time.monotonic() < end:
                if proc.poll() is not None:
                    raise SystemExit(f"serve exited with {proc.returncode}")
                t = time.monotonic() - start
                samples.append((t, rss_mib(proc.pid)))
                print(f"  {t / 60:6.2f} min  RSS {samples[-1][1]:8.2f} MiB", flush=True)
                await asyncio.sleep(args.sample_interval)
            scraper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await scraper
            async with session.get(url + "/metrics") as resp:
                metrics = await resp.text()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        await sim.stop()
    return summarise(args, samples, counts, metrics)


def summarise(args: argparse.Namespace, samples: list[tuple[float, float]],
              counts: Counter[str], metrics: str) -> dict[str, Any]:
    warm = [p for p in samples if p[0] >= args.warmup_minutes * 60]
    measured_min = (warm[-1][0] - warm[0][0]) / 60 if len(warm) > 1 else 0.0
    slope = slope_per_minute(warm)
    pending = next((line.split()[-1] for line in metrics.splitlines()
                    if line.startswith("podres_history_pending_writes")), None)
    figures: dict[str, Any] = {
        "minutes": args.minutes, "warmup_minutes": args.warmup_minutes,
        "churn_interval_s": args.churn_interval, "poll_interval_s": args.poll_interval,
        "scrape_interval_s": args.scrape_interval,
        "history": "off" if args.history_off else "sqlite", "debug": args.debug,
        "scrapes": dict(counts), "history_pending_writes_at_end": pending,
        "rss_start_mib": round(samples[0][1], 2) if samples else None,
        "rss_warm_mib": round(warm[0][1], 2) if warm else None,
        "rss_end_mib": round(samples[-1][1], 2) if samples else None,
        "rss_max_mib": round(max(p[1] for p in samples), 2) if samples else None,
        "measured_minutes": round(measured_min, 2),
        "slope_mib_per_min": round(slope, 4),
        "fitted_growth_mib": round(slope * measured_min, 3),
        "growth_after_warmup_mib": round(warm[-1][1] - warm[0][1], 3) if warm else None,
        # Over a run shorter than the 30-minute soak, the slope extended to 20 minutes.
        "projected_growth_20min_mib": round(slope * 20, 3),
    }
    figures.update(last_hour(samples))
    figures["target_mib"] = GROWTH_TARGET_MIB
    if figures["last_hour_growth_mib"] is not None:
        # A run of more than an hour is judged on its last hour: a plateau reached after a
        # slow warm-up passes, a leak of any rate shows there.
        figures["target_met"] = max(figures["last_hour_growth_mib"],
                                    figures["last_hour_fitted_mib"]) <= GROWTH_TARGET_MIB
    else:
        figures["target_met"] = bool(warm) and max(
            figures["projected_growth_20min_mib"], figures["growth_after_warmup_mib"]
        ) <= GROWTH_TARGET_MIB
    return figures


def last_hour(samples: list[tuple[float, float]], window: float = 300.0) -> dict[str, Any]:
    """Growth over the last hour of a run longer than an hour: the median of the last
    ``window`` seconds of samples minus the median of the first ``window`` seconds of that
    hour (medians, so that one sample taken mid-recompute does not decide), and the fitted
    slope over the hour times an hour. ``None`` for a shorter run."""
    if not samples or samples[-1][0] - samples[0][0] < 3600 + window:
        return {"last_hour_growth_mib": None, "last_hour_fitted_mib": None,
                "last_hour_start_mib": None, "last_hour_end_mib": None}
    end = samples[-1][0]
    hour = [p for p in samples if p[0] >= end - 3600]
    first = statistics.median(y for t, y in hour if t < hour[0][0] + window)
    last = statistics.median(y for t, y in hour if t >= end - window)
    return {"last_hour_growth_mib": round(last - first, 3),
            "last_hour_fitted_mib": round(slope_per_minute(hour) * 60, 3),
            "last_hour_start_mib": round(first, 2), "last_hour_end_mib": round(last, 2)}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--warmup-minutes", type=float, default=None,
                        help="excluded from the growth figures (default 10, or a third of a "
                             "shorter run)")
    parser.add_argument("--churn-interval", type=float, default=2.0)
    parser.add_argument("--poll-interval", type=float, default=1.0)
    parser.add_argument("--scrape-interval", type=float, default=1.0)
    parser.add_argument("--summary-interval", type=float, default=10.0,
                        help="serve's --history.summary-interval (the demo's)")
    parser.add_argument("--sample-interval", type=float, default=10.0)
    parser.add_argument("--topology", default="2x8x2")
    parser.add_argument("--history-off", action="store_true",
                        help="the same with --history.url off, for comparison")
    parser.add_argument("--debug", action="store_true",
                        help="trace allocations in serve (see the description)")
    parser.add_argument("--debug-every", type=float, default=60.0)
    parser.add_argument("--debug-out", type=Path, default=Path("soak-debug.jsonl"))
    args = parser.parse_args(argv)
    if args.warmup_minutes is None:
        args.warmup_minutes = min(10.0, args.minutes / 3)
    return args


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        sys.exit(child_main(sys.argv[2:]))
    args = parse_args(sys.argv[1:])
    if args.debug:
        args.debug_out = args.debug_out.resolve()
        args.debug_out.unlink(missing_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="soak-", dir="/tmp"))
    try:
        figures = asyncio.run(soak(args, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.debug:
        print(f"allocation growth written to {args.debug_out}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
