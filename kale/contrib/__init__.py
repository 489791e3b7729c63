"""Features Kale ships as hooks: each is a module that plugs into
:mod:`kale.hooks`, turned on by a setting, and imports its optional library
only then.

- :mod:`~kale.contrib.metrics`: Prometheus metrics (``METRICS_PORT``,
  ``kale worker --metrics-port``; extra ``kale-sqs[metrics]``), served by
  :mod:`~kale.contrib.exposition`, one endpoint per worker or per supervisor;
- :mod:`~kale.contrib.queue_metrics`: queue gauges for a web app's
  ``/metrics`` (``kale_queue_messages``);
- :mod:`~kale.contrib.tracing`: OpenTelemetry spans from publish to settle
  (``TRACING``; extra ``kale-sqs[otel]``).

Nothing here is imported while its setting is off: the core names the hooks
by dotted path (:data:`kale.hooks.FEATURE_HOOKS`).

:mod:`~kale.contrib.django` is of another kind: Kale in a Django project (an
app of ``INSTALLED_APPS``; extra ``kale-sqs[django]``), an entry point over
the rest of Kale as the command line is.
"""
