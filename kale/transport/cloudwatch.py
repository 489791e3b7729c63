"""The age of each queue's oldest message from CloudWatch over boto3, the
autoscaling signal's source when task records are off; a queue whose age
cannot be read has none, the reason logged (docs/explanation/internals-transport.md,
"The AWS modules").
"""
from __future__ import annotations

import datetime
import logging
from typing import Any, Optional, Sequence

import botocore.exceptions

from kale import config as kale_config
from kale.transport.endpoint import endpoint_url, is_local
from kale.transport.sqs import aws_client, one_line

logger = logging.getLogger(__name__)

#: How far back GetMetricData looks for the latest minute SQS reported.
WINDOW_SEC = 600
METRIC = 'ApproximateAgeOfOldestMessage'


def _latest_ages(answer: dict[str, Any], sqs_names: Sequence[str]) -> dict[str, float]:
    """The latest value of each query of the answer that has one, by SQS name."""
    ages = {}
    for result in answer.get('MetricDataResults', []):
        values = result.get('Values') or []
        stamps = result.get('Timestamps') or []
        if values:
            latest = max(range(len(values)), key=lambda i: stamps[i] if i < len(stamps) else 0)
            ages[sqs_names[int(result['Id'][1:])]] = float(values[latest])
    return ages


def oldest_message_ages(sqs_names: Sequence[str], now: datetime.datetime, client: Any = None,
                        config: Optional[kale_config.Config] = None) -> dict[str, float]:
    """The latest ``ApproximateAgeOfOldestMessage`` of each queue with one, in seconds, by SQS name."""
    if not sqs_names:
        return {}
    try:
        if client is None:
            if config is None:
                raise TypeError('oldest_message_ages needs a client or a configuration')
            endpoint = endpoint_url(config)
            client = aws_client('cloudwatch', endpoint if is_local(endpoint) else '', config,
                                retries={'mode': 'standard', 'max_attempts': 2})
        answer = client.get_metric_data(   # one query per queue, its id q<index in sqs_names>
            MetricDataQueries=[{'Id': 'q%d' % number, 'ReturnData': True, 'MetricStat': {
                'Metric': {'Namespace': 'AWS/SQS', 'MetricName': METRIC,
                           'Dimensions': [{'Name': 'QueueName', 'Value': name}]},
                'Period': 60, 'Stat': 'Maximum'}} for number, name in enumerate(sqs_names)],
            StartTime=now - datetime.timedelta(seconds=WINDOW_SEC),
            EndTime=now + datetime.timedelta(seconds=60),     # the minute under way too
            ScanBy='TimestampDescending')
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError, ValueError) as exc:
        logger.info('CloudWatch %s not read: %s', METRIC, one_line(str(exc)))
        return {}
    return _latest_ages(answer, sqs_names)
