"""One burst worker over what is queued, in this process: the helper the
in-process tests share."""
from __future__ import annotations

from typing import Any, Optional, Sequence

from kale.worker import Worker


def work(broker: Any, hooks: Sequence[Any] = (), queues: Optional[Sequence[str]] = None,
         expect_exit: Optional[int] = 0) -> Worker:
    """Run a burst worker on ``queues`` (default: every configured one) with
    ``hooks``; asserts its exit code is ``expect_exit`` (None: any). Returns
    the worker."""
    worker = Worker(queue_names=list(queues) if queues is not None else None, burst=True,
                    broker=broker, hooks=list(hooks))
    code = worker.run()
    if expect_exit is not None:
        assert code == expect_exit, 'the worker exited %d, not %d' % (code, expect_exit)
    return worker
