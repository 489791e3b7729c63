"""``kale outbox init`` and ``kale relay``: the outbox's tables, and the
process that sends what committed into them (see :mod:`kale.outbox`)."""
from __future__ import annotations

import argparse
import logging
import threading
from typing import Any

from kale.app import default_app
from kale.cli.options import arg, command, flag, group, on_stop_signals, port_number
from kale.exceptions import CommandError

logger = logging.getLogger('kale.outbox')


def _url(args: argparse.Namespace) -> str:
    url = args.url or default_app().config.OUTBOX_URL
    if not url:
        raise CommandError('no outbox database: give --url URL (the application\'s database, '
                           'a SQLAlchemy URL) or set OUTBOX_URL')
    return str(url)


def cmd_outbox_init(args: argparse.Namespace) -> int:
    from kale.store.sql.outbox_schema import SCHEMA_VERSION, init, open_database
    from kale.store.sql.records import safe_url
    url = _url(args)
    applied = init(open_database(url, '--url'))
    print('outbox of %s: %s (version %d)' % (safe_url(url), 'applied ' + '; '.join(applied)
                                             if applied else 'up to date', SCHEMA_VERSION))
    return 0


def cmd_relay(args: argparse.Namespace) -> int:
    from kale.outbox.relay import Relay, with_records
    from kale.store.sql.outbox_schema import open_database
    from kale.store.sql.records import safe_url
    url = _url(args)
    app = default_app()
    config = app.config
    relay = Relay(open_database(url, '--url'), app.broker, poll_sec=float(config.OUTBOX_POLL_SEC),
                  consumed_ttl_sec=config.CONSUMED_TTL_SEC, config=config, **with_records(app))
    if args.metrics_port is not None:
        _serve_metrics(relay, args.metrics_port)
    stop = threading.Event()
    on_stop_signals(logger, 'outbox relay', stop.set, relay.wake)
    logger.info('outbox relay: sending the outbox of %s', safe_url(url))
    relay.run(stop, until_empty=args.burst)
    logger.info('outbox relay: stopped after sending %d tasks%s', relay.counts.sent,
                ' (%d rows set aside in kale_outbox_rejected)' % relay.counts.rejected
                if relay.counts.rejected else '')
    return 0


#: The relay's metrics (name, kind, meaning); a counter is exposed with
#: ``_total`` after its name. The docs' metrics reference is made from this.
RELAY_METRICS = (
    ('kale_outbox_pending', 'gauge', 'Rows waiting in kale_outbox'),
    ('kale_outbox_lag_seconds', 'gauge', 'Age of the oldest row waiting in kale_outbox'),
    ('kale_outbox_sent', 'counter', 'Tasks the relay sent'),
    ('kale_outbox_rejected', 'counter', "Rows the relay set aside in kale_outbox_rejected, "
                                        "unsent: their publisher's MAC failed"),
)


def _serve_metrics(relay: Any, port: int) -> None:
    """kale_outbox_pending, kale_outbox_lag_seconds (read at each scrape),
    kale_outbox_sent_total and kale_outbox_rejected_total on
    http://METRICS_HOST:port/metrics."""
    try:
        from prometheus_client import CollectorRegistry, start_http_server
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    except ImportError:
        raise CommandError('--metrics-port needs prometheus_client: pip install '
                           '"kale-sqs[metrics]"') from None

    class Collector:
        def collect(self) -> Any:
            pending, lag = relay.pending()
            values = {'kale_outbox_pending': pending, 'kale_outbox_lag_seconds': lag or 0.0,
                      'kale_outbox_sent': relay.counts.sent,
                      'kale_outbox_rejected': relay.counts.rejected}
            for name, kind, text in RELAY_METRICS:
                family: Any = GaugeMetricFamily if kind == 'gauge' else CounterMetricFamily
                yield family(name, text, value=values[name])
    registry = CollectorRegistry()
    registry.register(Collector())
    start_http_server(port, addr=str(default_app().config.METRICS_HOST), registry=registry)


def add_commands(commands: 'argparse._SubParsersAction[argparse.ArgumentParser]') -> None:
    """Register ``kale outbox`` and ``kale relay``."""
    sub = group(commands, 'outbox', "the outbox's tables in your database",
                'Tasks published with kale.outbox.publish wait in the table kale_outbox of your '
                'own database until `kale relay` sends them.')
    command(sub, 'init', cmd_outbox_init, 'create or update the outbox tables',
            'Create kale_outbox and kale_consumed (and on PostgreSQL the trigger that wakes the '
            "relays), or bring them up to this Kale's version; safe to run again.",
            arg('--url', help='the database (a SQLAlchemy URL; default: OUTBOX_URL)'))
    command(commands, 'relay', cmd_relay, "send the outbox's committed tasks to SQS",
            'Send the rows committed into kale_outbox with SendMessageBatch, then delete them; '
            'at least once (a relay killed in between sends them again, with the same task '
            'ids). Several relays may run on PostgreSQL; one on SQLite. Stops on SIGTERM or '
            'Ctrl-C.', arg('--url', help='the database (default: OUTBOX_URL)'),
            arg('--metrics-port', type=port_number, metavar='N',
                help='serve kale_outbox_pending, kale_outbox_sent_total and '
                     'kale_outbox_lag_seconds on http://METRICS_HOST:N/metrics'),
            flag('--burst', 'exit once the outbox is empty'))
