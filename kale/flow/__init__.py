"""Flow control across the fleet: rate limits and concurrency limits per key.

A task class says ``rate_limit = '100/m'`` (per second, minute, hour or
day, in the usual spellings: :data:`kale.flow.spec.UNITS`) and/or
``concurrency_limit = N``; ``rate_limit_key(self, *args, **kwargs)`` and
``concurrency_key(self, *args, **kwargs)`` split the limit per key (a
customer, say). Both are kept in a database, RATE_LIMIT_URL's, else the task
records' (RECORDS_URL): a token bucket per key, and leases that expire for
the runs holding a concurrency slot (the store's flow facet,
:mod:`kale.store.flow`). A worker asks before it runs
(:mod:`kale.worker.flow`, a step next to the cancel check); a message refused
is released, unrun and not counted as a failure, with a delay until a token
should be there.

- :mod:`kale.flow.spec`: what a class asks for, parsed strictly;
- :mod:`kale.flow.bucket`: the token bucket's arithmetic;
- :mod:`kale.store.flow`: what an ask decides, over the steps each store gives;
"""
