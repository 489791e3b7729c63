"""`python -m bench.apublish`: publishing from asyncio code, three ways, one run.

    python -m bench.apublish --endpoint-url http://127.0.0.1:PORT --tasks 2000 --concurrency 50

- ``kale apublish``: ``await NoopTask.apublish(None, i)``, ``--concurrency``
  at once (Kale's thread pool over boto3);
- ``raw boto3, threads``: ``send_message`` on the same number of threads
  from ``loop.run_in_executor`` (the bound Kale's way can reach);
- ``raw aiobotocore``: ``await client.send_message(...)`` on an asyncio SQS
  client, when aiobotocore is installed (it pins botocore to its own
  release, so it usually needs an environment of its own: see
  bench/README.md).

Each prints tasks/s and CPU µs per task (this process: every thread).
"""
from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import os
import sys
import tempfile
import time
import uuid
from typing import Any, Awaitable, Callable, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BODY = 'x' * 400


async def timed(n: int, concurrency: int, send: Callable[[int], Awaitable[Any]]) -> tuple:
    """``n`` sends, ``concurrency`` at once: (tasks/s, CPU µs per task)."""
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with gate:
            await send(i)
    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one(i) for i in range(n)))
    seconds, cpu_sec = time.perf_counter() - started, time.process_time() - cpu
    return n / seconds, cpu_sec * 1e6 / n


def kale_way(endpoint: str, queue: str) -> Callable[[int], Awaitable[Any]]:
    config = os.path.join(tempfile.mkdtemp(prefix='kale-apublish-'), 'queues.yaml')
    with open(config, 'w') as f:
        f.write('bench_default: {priority: 40, batch_size: 10, visibility_timeout_sec: 60, '
                'long_poll_time_sec: 1, num_iterations: 10}\n')
    os.environ.update({'KALE_SETTINGS_MODULE': 'bench.settings', 'KALE_BENCH_ENDPOINT': endpoint,
                       'KALE_BENCH_PREFIX': queue + '-', 'KALE_BENCH_ACCESS_KEY': 'bench',
                       'KALE_BENCH_SECRET_KEY': 'bench', 'KALE_BENCH_QUEUE_CONFIG': config})
    from bench import tasks
    from kale.conf import settings
    settings.reload()
    tasks.NoopTask.publish(None, 0)         # creates the queue, warms the client
    return lambda i: tasks.NoopTask.apublish(None, i)


def raw_threads(endpoint: str, queue: str, threads: int) -> Callable[[int], Awaitable[Any]]:
    import boto3
    client = boto3.client('sqs', endpoint_url=endpoint, region_name='us-east-1',
                          aws_access_key_id='bench', aws_secret_access_key='bench',
                          config=__import__('botocore.config').config.Config(
                              max_pool_connections=threads))
    url = client.create_queue(QueueName=queue + '-raw')['QueueUrl']
    pool = concurrent.futures.ThreadPoolExecutor(threads)

    def send(i: int) -> Awaitable[Any]:
        return asyncio.get_running_loop().run_in_executor(
            pool, lambda: client.send_message(QueueUrl=url, MessageBody=BODY))
    return send


async def raw_aiobotocore(endpoint: str, queue: str, n: int, concurrency: int) -> Optional[tuple]:
    try:
        from aiobotocore.config import AioConfig
        from aiobotocore.session import get_session
    except ImportError:
        return None
    session = get_session()
    async with session.create_client('sqs', endpoint_url=endpoint, region_name='us-east-1',
                                     aws_access_key_id='bench', aws_secret_access_key='bench',
                                     config=AioConfig(max_pool_connections=concurrency)) as client:
        url = (await client.create_queue(QueueName=queue + '-aio'))['QueueUrl']
        return await timed(n, concurrency, lambda i: client.send_message(QueueUrl=url,
                                                                         MessageBody=BODY))


async def measure(args: argparse.Namespace) -> dict[str, Optional[tuple]]:
    queue = 'apublish-%s' % uuid.uuid4().hex[:8]
    results: dict[str, Optional[tuple]] = {}
    results['kale apublish'] = await timed(args.tasks, args.concurrency,
                                           kale_way(args.endpoint_url, queue))
    results['raw boto3, threads'] = await timed(
        args.tasks, args.concurrency, raw_threads(args.endpoint_url, queue, args.concurrency))
    results['raw aiobotocore'] = await raw_aiobotocore(args.endpoint_url, queue, args.tasks,
                                                       args.concurrency)
    return results


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog='python -m bench.apublish',
                                     description=__doc__.split('\n')[0])
    parser.add_argument('--endpoint-url', required=True, metavar='URL')
    parser.add_argument('--tasks', type=int, default=2000)
    parser.add_argument('--concurrency', type=int, default=16,
                        help='publishes at once (default 16: Kale\'s apublish threads)')
    args = parser.parse_args(argv)
    sys.path.insert(0, ROOT)
    results = asyncio.run(measure(args))
    print('%d publishes, %d at once, to %s' % (args.tasks, args.concurrency, args.endpoint_url))
    for name, figures in results.items():
        if figures is None:
            print('  %-20s  (aiobotocore is not installed here)' % name)
        else:
            print('  %-20s  %7.0f tasks/s  %6.0f µs CPU per task' % (name, *figures))
    return 0


if __name__ == '__main__':
    sys.exit(main())
