"""Ready settings modules: ``KALE_SETTINGS_MODULE=kale.presets.<name>``, or start your
own from one (``from kale.presets.local import *``): ``local``, ``elasticmq`` and ``aws``
(docs/explanation/internals-transport.md, "The presets"; docs/how-to/configure.md).
"""
import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def default_queue_config() -> str:
    """``$KALE_QUEUE_CONFIG``, else ``./queue_config.yaml`` if present, else the shipped one."""
    given = os.environ.get('KALE_QUEUE_CONFIG', '')
    if given:
        return given
    if os.path.exists('queue_config.yaml'):
        return os.path.abspath('queue_config.yaml')
    return os.path.join(_HERE, 'queue_config.yaml')
