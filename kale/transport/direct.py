"""The hot SQS requests sent without botocore's request pipeline, at half its
client CPU: docs/explanation/internals-transport.md, "The direct requests",
and docs/explanation/performance.md.
"""
from __future__ import annotations

import json
import logging
import re
import types
from typing import Any, Optional

import botocore
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.client import BaseClient

from kale.transport import responses
from kale.version import BOTOCORE_TESTED

logger = logging.getLogger(__name__)

#: The requests sent directly.
OPERATIONS = responses.OPERATIONS

#: BOTOCORE_TESTED as a requirement, for messages.
TESTED_RANGE = 'botocore>=%s,<%s' % BOTOCORE_TESTED

#: BaseClient's own attributes (a live view): where tracers wrap _make_api_call.
_BASE_CLIENT = vars(BaseClient)


class ErrorAnswer(Exception):
    """A direct request was answered, but not with a success read here: the
    HTTP ``status`` (200 for a body that is not a JSON object)."""

    def __init__(self, status: int):
        super().__init__('answered HTTP %d%s' % (
            status, ' with a body that is not a JSON object' if status == 200 else ''))
        self.status = status


def release(version: str) -> tuple[int, ...]:
    """The numbers of a version: ``'1.44.8'`` is (1, 44, 8); anything else
    ends them (``'1.45.0rc1'`` is (1, 45, 0))."""
    numbers = re.match(r'\d+(\.\d+)*', version)
    return tuple(int(number) for number in numbers.group().split('.')) if numbers else ()


def tested_botocore(version: str) -> bool:
    """Whether the direct requests are tested with botocore ``version`` (:data:`BOTOCORE_TESTED`)."""
    first, beyond = (release(bound) for bound in BOTOCORE_TESTED)
    return first <= release(version) < beyond


def botocores_own(function: Any) -> bool:
    """Whether ``function`` (``BaseClient._make_api_call`` now) is botocore's
    own, not a tracer's wrapper: tracers' are wrapt proxies, and a
    ``functools.wraps`` wrapper is a function of another module than botocore's."""
    return type(function) is types.FunctionType \
        and str(function.__globals__.get('__name__', '')).partition('.')[0] == 'botocore'


class DirectRequests:
    """The hot requests of one boto3 SQS client (built by Kale)."""

    def __init__(self, client: Any):
        meta = client.meta
        model = meta.service_model
        self._events = meta.events
        self._url = meta.endpoint_url.rstrip('/') + '/'
        self._region = meta.region_name
        self._signing_name = model.signing_name
        # The parts of botocore that are not its public API; one missing
        # (AttributeError) leaves the client to botocore (see of()).
        self._send = client._endpoint.http_session.send
        self._signer = client._request_signer
        if not hasattr(self._signer, '_credentials'):           # read by _credentials()
            raise AttributeError('%s has no _credentials' % type(self._signer).__name__)
        if '_make_api_call' not in _BASE_CLIENT:                # watched by call()
            raise AttributeError('BaseClient has no _make_api_call')
        #: What BaseClient._make_api_call was at the last look, and whether
        #: that is a tracer's wrapper (the requests then go through botocore).
        self._api_call: tuple[Any, bool] = (None, False)
        self._models = {name: model.operation_model(name) for name in OPERATIONS}
        content_type = 'application/x-amz-json-%s' % model.metadata.get('jsonVersion', '1.0')
        self._headers = {name: {'Content-Type': content_type, 'User-Agent': meta.config.user_agent,
                                'X-Amz-Target': '%s.%s' % (model.metadata['targetPrefix'], name)}
                         for name in OPERATIONS}

    @classmethod
    def of(cls, client: Any) -> Optional['DirectRequests']:
        """The direct requests of ``client``, or None when they cannot be built
        here (a WARNING line for an untested botocore or a client unlike it)."""
        version = botocore.__version__
        if not tested_botocore(version):
            logger.warning('botocore %s is not among the versions the direct SQS requests are '
                           'tested with (%s): every SQS request goes through botocore', version, TESTED_RANGE)
            return None
        try:
            meta = client.meta
            model = meta.service_model
            if model.protocol != 'json' or meta.config.signature_version not in (None, 'v4') \
                    or not meta.config.user_agent or not meta.endpoint_url:
                return None
            return cls(client)              # raises for a client unlike botocore's
        except (AttributeError, KeyError, TypeError) as exc:
            logger.warning('the direct SQS requests cannot be built on this client of botocore %s '
                           '(%s: %s; tested with %s): every SQS request goes through botocore',
                           version, type(exc).__name__, exc, TESTED_RANGE)
            return None

    def _traced(self, api_call: Any) -> bool:
        """Whether ``api_call`` (BaseClient._make_api_call now) is a tracer's; said once a change."""
        traced = not botocores_own(api_call)
        was_traced = self._api_call[1]
        self._api_call = (api_call, traced)
        if traced != was_traced:
            logger.info('BaseClient._make_api_call %s: the hot SQS requests go %s',
                        'is wrapped (a tracer)' if traced else 'is botocore\'s own again',
                        'through botocore' if traced else 'directly')
        return traced

    def call(self, operation: str, params: dict[str, Any]) -> Optional[dict[str, Any]]:
        """The answer of ``operation`` with ``params`` as botocore's client gives
        it, or None when it was not sent (botocore is to make it)."""
        api_call = _BASE_CLIENT.get('_make_api_call')
        seen, traced = self._api_call
        if api_call is not seen:
            traced = self._traced(api_call)
        if traced:                          # a tracer sees botocore's requests only
            return None
        credentials = self._credentials()
        if credentials is None:
            return None
        request = AWSRequest(method='POST', url=self._url, data=json.dumps(params).encode(),
                             headers=dict(self._headers[operation]))
        SigV4Auth(credentials, self._signing_name, self._region).add_auth(request)
        prepared = request.prepare()
        context: dict[str, Any] = {}
        answered = self._events.emit_until_response(
            'before-send.sqs.%s' % operation, request=prepared, operation_name=operation, context=context)
        if answered[1] is not None:         # a handler answers for the endpoint: botocore's way
            return None
        # A connection that fails raises botocore's exception here, as botocore's
        # pipeline would: the transport's attempts say whether to make it again.
        response = self._send(prepared)
        answer = responses.json_answer(response.content) if response.status_code == 200 else None
        if answer is None:
            raise ErrorAnswer(response.status_code)
        answer.setdefault('ResponseMetadata', {'HTTPStatusCode': 200, 'HTTPHeaders': response.headers})
        self._events.emit('after-call.sqs.%s' % operation, http_response=response,
                          parsed=answer, model=self._models[operation], context=context)
        return answer

    def _credentials(self) -> Any:
        """The signer's credentials as of now (None: anonymous, or not to be had here)."""
        try:
            credentials = self._signer._credentials
            return credentials.get_frozen_credentials() if credentials is not None else None
        except Exception:                    # botocore raises it, with its own words
            return None
