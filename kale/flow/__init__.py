"""Flow control across the fleet: rate limits and concurrency limits per key.

A task class says ``rate_limit = '100/m'`` (:data:`kale.flow.spec.UNITS`)
and/or ``concurrency_limit = N``; ``rate_limit_key(self, *args, **kwargs)``
and ``concurrency_key(self, *args, **kwargs)`` split the limit per key (a
customer, say). A token bucket per key and the leases of the runs holding
a concurrency slot are kept in RATE_LIMIT_URL's database, else the task
records' (the store's flow facet, :mod:`kale.store.flow`, which decides an
ask). A worker asks before it runs (:mod:`kale.worker.flow`); a message
refused is released unrun, not counted as a failure, with a delay until a
token should be there. :mod:`kale.flow.spec` parses what a class asks for,
:mod:`kale.flow.bucket` holds the token bucket's arithmetic.
"""
