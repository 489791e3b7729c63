"""A TCP proxy that adds a fixed latency to every request, so an SQS endpoint
on this machine answers as if it were a network hop away.

    python -m bench.proxy LISTEN_PORT UPSTREAM_PORT DELAY_MS

Bytes from a client reach the upstream ``DELAY_MS`` after they arrived, in
order; the delay is measured from each chunk's arrival, so chunks sent back
to back are not delayed one after another. Answers go back at once. Both
ends are on 127.0.0.1.
"""
from __future__ import annotations

import asyncio
import sys
import time
from typing import Optional

#: How much one read takes from a socket.
CHUNK_BYTES = 65536


async def forward_late(source: asyncio.StreamReader, sink: asyncio.StreamWriter,
                       delay_sec: float) -> None:
    """Copy ``source`` to ``sink``, each chunk ``delay_sec`` after it arrived."""
    due: asyncio.Queue[Optional[tuple[float, bytes]]] = asyncio.Queue()

    async def send() -> None:
        while True:
            item = await due.get()
            if item is None:
                break
            at, data = item
            wait = at - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            sink.write(data)
            await sink.drain()

    sender = asyncio.ensure_future(send())
    try:
        while True:
            data = await source.read(CHUNK_BYTES)
            if not data:
                break
            due.put_nowait((time.monotonic() + delay_sec, data))
    finally:
        due.put_nowait(None)
        try:
            await sender
        finally:
            sink.close()


async def forward(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copy ``source`` to ``sink`` as it comes."""
    try:
        while True:
            data = await source.read(CHUNK_BYTES)
            if not data:
                break
            sink.write(data)
            await sink.drain()
    finally:
        sink.close()


async def serve(listen_port: int, upstream_port: int, delay_sec: float,
                started: Optional[asyncio.Event] = None) -> None:
    """Accept on 127.0.0.1:``listen_port`` until cancelled."""
    async def connect(client_reader: asyncio.StreamReader,
                      client_writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(
                '127.0.0.1', upstream_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(forward_late(client_reader, upstream_writer, delay_sec),
                             forward(upstream_reader, client_writer), return_exceptions=True)

    server = await asyncio.start_server(connect, '127.0.0.1', listen_port)
    if started is not None:
        started.set()
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print('usage: python -m bench.proxy LISTEN_PORT UPSTREAM_PORT DELAY_MS', file=sys.stderr)
        return 2
    try:
        listen_port, upstream_port, delay_ms = int(argv[0]), int(argv[1]), float(argv[2])
    except ValueError:
        print('bench.proxy: ports must be integers and DELAY_MS a number, got %s'
              % ' '.join(argv), file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(listen_port, upstream_port, delay_ms / 1000.0))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
