"""Where SQS is: the endpoint URL from the settings, and whether it is on
this machine (the embedded endpoint, ElasticMQ) or remote (AWS)."""
from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from kale.config import Config
from kale.exceptions import ImproperlyConfigured


def endpoint_url(config: Config) -> str:
    """The endpoint from MESSAGE_QUEUE_ENDPOINT_URL or the proxy settings; '' for AWS."""
    url = config.MESSAGE_QUEUE_ENDPOINT_URL
    if url:
        return str(url)
    if config.MESSAGE_QUEUE_USE_PROXY:
        host, port = config.MESSAGE_QUEUE_PROXY_HOST, config.MESSAGE_QUEUE_PROXY_PORT
        if not host or not port:
            raise ImproperlyConfigured('MESSAGE_QUEUE_USE_PROXY is on but MESSAGE_QUEUE_PROXY_HOST '
                                       'or MESSAGE_QUEUE_PROXY_PORT is empty')
        return 'http://%s:%s' % (host, port)
    return ''


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine."""
    host = host.strip('[]').lower()
    if host == 'localhost' or host.endswith('.localhost'):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_local(url: str) -> bool:
    """Whether the endpoint at ``url`` is on this machine ('' is AWS: not local)."""
    return bool(url) and is_loopback_host(urlsplit(url).hostname or '')
