"""Attackers of the churn test (test_connection_flood.py), in a process of their own so that
their handshakes do not share the server's event loop: ``COUNT`` clients that each
connect (completing a TLS handshake, unless CAFILE is ``-``: plain HTTP), send half a
request, wait to be dropped and reconnect at once, until stdin closes. Loopback only;
prints the count of connections made (TLS: completed handshakes) every 50, and at the
end."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import sys

HALF_REQUEST = b"GET /metrics HTTP/1.1\r\nHost: victim\r\nUser-Agent: slow"


async def _dropped(reader: asyncio.StreamReader) -> None:
    with contextlib.suppress(OSError, ssl.SSLError):  # reset by the server: as expected
        await reader.read()


async def attacker(port: int, context: ssl.SSLContext | None, stop: asyncio.Event,
                   seen: list[int]) -> None:
    while not stop.is_set():
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(
                "127.0.0.1", port, ssl=context), 10)
        except (OSError, TimeoutError, ssl.SSLError):
            await asyncio.sleep(0.01)
            continue
        seen[0] += 1
        if seen[0] % 50 == 0:
            print(seen[0], flush=True)  # the test waits for the churn to be on
        try:
            writer.write(HALF_REQUEST)
            stopping = asyncio.ensure_future(stop.wait())
            dropped = asyncio.ensure_future(_dropped(reader))
            await asyncio.wait({stopping, dropped}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            dropped.cancel()
        except (OSError, ssl.SSLError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


async def main(port: int, cafile: str, count: int) -> None:
    context = None if cafile == "-" else ssl.create_default_context(cafile=cafile)
    stop = asyncio.Event()
    seen = [0]
    loop = asyncio.get_running_loop()
    loop.add_reader(sys.stdin.fileno(), lambda: stop.set() if not sys.stdin.read(1) else None)
    tasks = [asyncio.ensure_future(attacker(port, context, stop, seen)) for _ in range(count)]
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    print(seen[0], flush=True)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2], int(sys.argv[3])))
