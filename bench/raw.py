"""The baseline: plain SQS calls with no framework, on the same endpoint.

:class:`RawQueues` speaks boto3 directly (or, for ``--transport memory``, the
in-memory transport directly). ``python -m bench.raw`` is the baseline's
consumer process: a plain receive(10) + delete_message_batch loop.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any, Callable, Optional, Sequence

import boto3

from bench.counter import RequestCounter
from bench.hooks import peak_rss_mb
from kale.transport import OutgoingMessage
from kale.transport.memory import MemoryTransport


def boto3_client(endpoint: str, region: str = 'us-east-1', access_key: str = '',
                 secret_key: str = '') -> Any:
    return boto3.client('sqs', endpoint_url=endpoint or None, region_name=region,
                        aws_access_key_id=access_key or None,
                        aws_secret_access_key=secret_key or None)


class RawQueues:
    """send / receive / delete on full queue names, with nothing on top."""

    def __init__(self, client: Any = None, memory: Optional[MemoryTransport] = None):
        self.client = client
        self.memory = memory
        #: Message attributes every message sent carries: the same as Kale's,
        #: so both consumers receive identical messages.
        self.attributes: dict[str, Any] = {}
        self._urls: dict[str, str] = {}

    def url(self, name: str) -> str:
        if name not in self._urls:
            self._urls[name] = self.client.get_queue_url(QueueName=name)['QueueUrl']
        return self._urls[name]

    def _sqs_attributes(self) -> dict[str, dict[str, str]]:
        return {name: {'DataType': 'Number' if isinstance(value, int) else 'String',
                       'StringValue': str(value)} for name, value in self.attributes.items()}

    def send(self, name: str, body: str) -> None:
        if self.memory is not None:
            self.memory.send(name, OutgoingMessage(body, self.attributes))
        else:
            self.client.send_message(QueueUrl=self.url(name), MessageBody=body,
                                     MessageAttributes=self._sqs_attributes())

    def send_batch(self, name: str, bodies: Sequence[str]) -> None:
        for start in range(0, len(bodies), 10):
            chunk = bodies[start:start + 10]
            if self.memory is not None:
                self.memory.send_batch(name, [OutgoingMessage(body, self.attributes)
                                              for body in chunk])
            else:
                self.client.send_message_batch(QueueUrl=self.url(name), Entries=[
                    {'Id': str(i), 'MessageBody': body, 'MessageAttributes': self._sqs_attributes()}
                    for i, body in enumerate(chunk)])

    def receive(self, name: str, wait_sec: int = 0, visibility_sec: int = 60) -> list[tuple[str, str]]:
        """[(receipt handle, body)] of up to 10 messages."""
        if self.memory is not None:
            return [(m.receipt_handle, m.body)
                    for m in self.memory.receive(name, 10, wait_sec, visibility_sec)]
        response = self.client.receive_message(QueueUrl=self.url(name), MaxNumberOfMessages=10,
                                               WaitTimeSeconds=wait_sec,
                                               VisibilityTimeout=visibility_sec)
        return [(m['ReceiptHandle'], m['Body']) for m in response.get('Messages', [])]

    def delete(self, name: str, handles: Sequence[str]) -> None:
        if not handles:
            return
        if self.memory is not None:
            self.memory.delete_batch(name, handles)
        else:
            self.client.delete_message_batch(QueueUrl=self.url(name), Entries=[
                {'Id': str(i), 'ReceiptHandle': h} for i, h in enumerate(handles)])

    def drain(self, name: str) -> int:
        """Receive and delete until the queue answers empty."""
        total = 0
        while True:
            batch = self.receive(name)
            if not batch:
                return total
            self.delete(name, [handle for handle, _ in batch])
            total += len(batch)


def drain_loop(raw: RawQueues, names: Sequence[str], expect: int,
               timeout: float = 300) -> dict[str, float]:
    """The baseline consumer: receive(10) then delete_message_batch, queue by
    queue, until ``expect`` messages were handled. Time and CPU (this process's,
    every thread) run from the start to the last batch received."""
    started, cpu_started = time.time(), time.process_time()
    handled, last, cpu_last = 0, started, cpu_started
    deadline = time.monotonic() + timeout
    while handled < expect and time.monotonic() < deadline:
        for name in names:
            while True:
                batch = raw.receive(name)
                if not batch:
                    break
                last, cpu_last = time.time(), time.process_time()
                raw.delete(name, [handle for handle, _ in batch])
                handled += len(batch)
    return {'started': started, 'last_run': last, 'tasks': handled,
            'cpu_sec': cpu_last - cpu_started}


class IdlePollers:
    """One thread per queue, each long-polling in a loop for its queue's own
    long poll (``waits_sec``, one per name): the baseline's idle worker.
    ``on_message(body, at)`` is called for each message received."""

    def __init__(self, raw: RawQueues, names: Sequence[str], waits_sec: Sequence[int],
                 on_message: Callable[[str, float], None] = lambda body, at: None):
        self.raw = raw
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._poll, args=(name, wait_sec, on_message),
                                         daemon=True)
                        for name, wait_sec in zip(names, waits_sec, strict=True)]

    def start(self) -> 'IdlePollers':
        for thread in self.threads:
            thread.start()
        return self

    def stop(self) -> None:
        """Stop after the polls under way (threads are daemons: nothing waits for them)."""
        self.stopping.set()

    def _poll(self, name: str, wait_sec: int, on_message: Callable[[str, float], None]) -> None:
        while not self.stopping.is_set():
            try:
                batch = self.raw.receive(name, wait_sec=wait_sec)
            except Exception:        # the endpoint went away at the end of a run
                return
            at = time.time()
            for _, body in batch:
                on_message(body, at)
            if batch and not self.stopping.is_set():
                self.raw.delete(name, [handle for handle, _ in batch])


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The baseline consumer process; prints its figures as JSON."""
    parser = argparse.ArgumentParser(description='raw boto3 receive + delete loop')
    parser.add_argument('--endpoint', required=True)
    parser.add_argument('--queues', required=True, help='full SQS names, comma-separated')
    parser.add_argument('--expect', type=int, required=True)
    parser.add_argument('--access-key', default='')
    parser.add_argument('--secret-key', default='')
    args = parser.parse_args(argv)
    client = boto3_client(args.endpoint, access_key=args.access_key, secret_key=args.secret_key)
    counter = RequestCounter().attach(client)
    raw = RawQueues(client)
    names = args.queues.split(',')
    for name in names:
        raw.url(name)
    report: dict[str, Any] = dict(drain_loop(raw, names, args.expect))
    report['requests'] = counter.events
    report['peak_rss_mb'] = peak_rss_mb()
    json.dump(report, sys.stdout)
    return 0


if __name__ == '__main__':
    sys.exit(main())
