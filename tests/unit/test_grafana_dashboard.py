"""The Grafana dashboard in example/grafana and the monitoring guide's PromQL query only
metrics Kale serves."""
import json
import os
import re

import pytest
from prometheus_client import CollectorRegistry

from kale.contrib.metrics import KaleMetrics
from kale.contrib.queue_metrics import QueueCollector
from tests.support.endpoint import ROOT

DASHBOARD = os.path.join(ROOT, 'example', 'grafana', 'kale-dashboard.json')
#: Metrics the monitoring guide names that come from elsewhere: the CloudWatch exporter's
#: ApproximateAgeOfOldestMessage.
OTHERS = {'aws_sqs_approximate_age_of_oldest_message_maximum'}
#: PromQL words that are not metric names.
KEYWORDS = {'by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'bool', 'and', 'or',
            'unless', 'offset', 'inf', 'nan'}


def served_names():
    """Every sample name Kale's workers, publishers and queue gauges can serve."""
    registry = CollectorRegistry()
    KaleMetrics(registry)
    families = list(registry.collect()) + QueueCollector(broker=None).describe()
    suffixes = {'counter': ('_total',), 'histogram': ('_bucket', '_count', '_sum'),
                'gauge': ('',)}
    return {family.name + suffix for family in families for suffix in suffixes[family.type]}


def metric_names(expr):
    """The metric names in a PromQL expression: what is left once strings,
    label matchers, ranges, grouping clauses, functions and numbers are gone."""
    expr = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)
    expr = re.sub(r'\{[^}]*\}|\[[^\]]*\]', ' ', expr)
    expr = re.sub(r'\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)', ' ', expr)
    names = set()
    for match in re.finditer(r'[A-Za-z_:][A-Za-z0-9_:]*', expr):
        word = match.group()
        before, after = expr[:match.start()].rstrip(), expr[match.end():].lstrip()
        if after.startswith('(') or word.lower() in KEYWORDS or before.endswith('$'):
            continue
        if re.fullmatch(r'\d*(?:ms|s|m|h|d|w|y)?', word):
            continue
        names.add(word)
    return names


def dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def targets(panels):
    for panel in panels:
        yield from panel.get('targets', [])
        yield from targets(panel.get('panels', []))


def test_the_metric_name_finder_finds_names_and_only_names():
    expr = ('histogram_quantile(0.95, sum by (le, queue) (rate(kale_task_latency_seconds_bucket'
            '{queue=~"$queue",task!="a b"}[$__rate_interval]))) / on (queue) kale_queue_up')
    assert metric_names(expr) == {'kale_task_latency_seconds_bucket', 'kale_queue_up'}


def test_the_dashboard_is_grafana_json_with_panels_on_a_prometheus_source():
    found = dashboard()
    assert found['title'] and found['uid'] and found['schemaVersion'] >= 30
    variables = {variable['name']: variable for variable in found['templating']['list']}
    assert variables['datasource']['query'] == 'prometheus'
    panels = [panel for panel in found['panels'] if panel['type'] != 'row']
    assert len(panels) >= 8
    for panel in panels:
        assert panel['targets'] and panel['datasource']['uid'] == '${datasource}', panel['title']
        assert {'x', 'y', 'w', 'h'} <= set(panel['gridPos'])
    assert len({panel['id'] for panel in found['panels']}) == len(found['panels'])


def test_every_metric_the_dashboard_queries_is_one_kale_serves():
    served = served_names()
    found = dashboard()
    queried = set()
    for target in targets(found['panels']):
        names = metric_names(target['expr'])
        assert names, target['expr']
        queried |= names
    for variable in found['templating']['list']:
        if variable['type'] == 'query':
            queried |= {re.match(r'label_values\((\w+)', variable['definition']).group(1)}
    assert queried <= served, queried - served


@pytest.mark.parametrize('needed', [
    'kale_tasks_total', 'kale_task_duration_seconds_bucket', 'kale_task_latency_seconds_bucket',
    'kale_queue_messages', 'kale_queue_oldest_task_age_seconds', 'kale_sqs_requests_total',
    'kale_published_total', 'kale_worker_busy_seconds_total'])
def test_the_dashboard_shows(needed):
    exprs = ' '.join(target['expr'] for target in targets(dashboard()['panels']))
    assert needed in metric_names(exprs)


def monitoring_queries():
    with open(os.path.join(ROOT, 'docs', 'how-to', 'monitoring.md')) as f:
        section = f.read()
    return re.findall(r'```promql\n(.*?)```', section, re.S)


def test_the_readme_queries_use_metrics_kale_serves_or_cloudwatch():
    blocks = monitoring_queries()
    assert len(blocks) >= 5
    served = served_names()
    for block in blocks:
        for line in block.splitlines():
            expr = line.split('#', 1)[0].strip()
            if expr:
                assert metric_names(expr) <= served | OTHERS, expr
