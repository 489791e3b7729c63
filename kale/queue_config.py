"""The queue configuration: a YAML file of queues, validated on load.

Each top-level key is a queue; its fields say how workers treat it::

    high_priority:
      name: high_priority        # SQS queue name (before QUEUE_PREFIX); defaults to the key
      priority: 100              # 1..100, lottery tickets
      batch_size: 10             # 1..10 messages per receive
      visibility_timeout_sec: 60 # 0..43200, the batch's time budget
      long_poll_time_sec: 1      # 0..20, an idle worker's long poll on this queue
      num_iterations: 10         # batches taken before selecting a queue again
      dead_letter_queue: dlq-high_priority   # optional, this is the default
      fifo: false                # optional: a FIFO queue (SQS name <prefix><name>.fifo)
      fair: false                # optional: a standard queue whose tasks carry a tenant (group_id)
      prefetch: auto             # optional: messages per receive, 'auto' or 1..batch_size

Every error names the file, the queue and the field.
"""
from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Iterator, Mapping, Optional, Union

import yaml

from kale.config import Config, import_string
from kale.exceptions import QueueConfigError, UnknownQueueError
from kale.transport import MAX_BATCH_ENTRIES, MAX_LONG_POLL_SEC

QUEUE_NAME_PATTERN = re.compile(r'^[A-Za-z0-9_-]{1,80}$')

# field: (minimum, maximum); None means unbounded.
INTEGER_FIELDS: dict[str, tuple[int, Optional[int]]] = {
    'priority': (1, 100),
    'batch_size': (1, MAX_BATCH_ENTRIES),
    'visibility_timeout_sec': (0, 43200),
    'long_poll_time_sec': (0, MAX_LONG_POLL_SEC),
    'num_iterations': (1, None),
}


#: The ``prefetch`` value that lets workers choose how many messages to receive.
AUTO_PREFETCH = 'auto'
#: The dead-run queue of a queue is its dead-letter queue's name with this
#: suffix (before QUEUE_PREFIX and ``.fifo``): ``dlq-default-runs``.
DEAD_RUN_SUFFIX = '-runs'


@dataclasses.dataclass(frozen=True)
class TaskQueue:
    """One configured queue. ``name`` is what tasks refer to in ``Task.queue``."""

    name: str
    priority: int
    batch_size: int
    visibility_timeout_sec: int
    long_poll_time_sec: int
    num_iterations: int
    dead_letter_queue: str = ''
    #: A FIFO queue: tasks run in publish order within their ``group_id``.
    fifo: bool = False
    #: How many messages a receive asks for: 'auto' (as many as the worker
    #: expects to start soon, see :mod:`kale.worker.prefetch`) or a number.
    prefetch: Union[str, int] = AUTO_PREFETCH
    #: A fair queue: a standard queue whose tasks may carry a tenant (SQS's
    #: ``MessageGroupId``), so one tenant's backlog does not delay the others.
    fair: bool = False

    def __post_init__(self) -> None:
        if not self.dead_letter_queue:
            object.__setattr__(self, 'dead_letter_queue', 'dlq-' + self.name)
        if self.fifo and self.fair:
            raise ValueError("fields 'fifo' and 'fair' cannot both be true: a FIFO queue "
                             'already runs each group in order; fair is for standard queues')

    @property
    def dead_run_queue(self) -> str:
        """The name (before QUEUE_PREFIX) of the queue its tasks' dead runs go to."""
        return self.dead_letter_queue + DEAD_RUN_SUFFIX


def dead_run_side(queue: TaskQueue) -> TaskQueue:
    """The queue ``kale worker --dead-letters`` serves for ``queue``: its
    dead-run queue, with its fields and dead-letter queue."""
    return dataclasses.replace(queue, name=queue.dead_run_queue,
                               dead_letter_queue=queue.dead_letter_queue)


class QueueConfig(Mapping[str, TaskQueue]):
    """The queues of one file, by name, in file order."""

    def __init__(self, path: str, queues: list[TaskQueue], keys: Optional[list[str]] = None):
        self.path = path
        self._queues = {queue.name: queue for queue in queues}
        #: YAML key -> queue name, for keys that differ from their queue's name.
        self._renamed = {key: queue.name for key, queue in zip(keys or [], queues, strict=False)
                         if key != queue.name}

    def __getitem__(self, name: str) -> TaskQueue:
        return self._queues[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._queues)

    def __len__(self) -> int:
        return len(self._queues)

    def get_queue(self, name: str, who: str = '') -> TaskQueue:
        """The queue called ``name``, or UnknownQueueError naming ``who`` asked."""
        try:
            return self._queues[name]
        except KeyError:
            raise self._unknown(name, who) from None

    def _unknown(self, name: str, who: str) -> UnknownQueueError:
        """The error of a queue not here, naming the file (``public``: without)."""
        prefix = '%s: ' % who if who else ''

        def problem(file: str) -> str:
            if name in self._renamed:
                return ("%squeue %r is a key in the queue config%s, whose queue is named %r: "
                        "tasks, --queues and commands name a queue by its 'name' field; use %r"
                        % (prefix, name, file, self._renamed[name], self._renamed[name]))
            return '%squeue %r is not in the queue config%s (queues: %s)' % (
                prefix, name, file, ', '.join(self._queues) or 'none')
        return UnknownQueueError(problem(' ' + self.path), public=problem(''))


class _StrictLoader(yaml.SafeLoader):
    """A safe YAML loader that refuses a mapping with the same key twice."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, 'duplicate key %r (first on line %d)' % (key, seen[key] + 1),
                key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _read_yaml(path: str, named: str) -> Any:
    try:
        with open(path, encoding='utf-8') as f:
            text = f.read()
    except OSError as exc:
        raise QueueConfigError('%s: cannot read the queue config (QUEUE_CONFIG = %r): %s'
                               % (path, named, exc.strerror or exc), public='the queue config '
                               'cannot be read: %s' % (exc.strerror or 'error')) from exc
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        problem = getattr(exc, 'problem', None) or str(exc)
        mark = getattr(exc, 'problem_mark', None)
        where = ' (line %d, column %d)' % (mark.line + 1, mark.column + 1) if mark else ''
        raise QueueConfigError('%s: not valid YAML: %s%s' % (path, problem, where)) from exc


def _type_name(value: Any) -> str:
    return type(value).__name__


def _check_key(path: str, key: Any, entry: Any, fields: set[str]) -> None:
    """Refuse a queue key that is not a string, or an entry that is not a mapping of known fields."""
    if not isinstance(key, str):
        raise QueueConfigError('%s: queue name must be a string, got %r (%s)'
                               % (path, key, _type_name(key)))
    where = '%s: queue %r' % (path, key)
    if not isinstance(entry, dict):
        raise QueueConfigError('%s: must be a mapping of fields, got %s' % (where, _type_name(entry)))
    unknown = sorted(set(entry) - fields)
    if unknown:
        raise QueueConfigError('%s: unknown field %r (fields: %s)'
                               % (where, unknown[0], ', '.join(sorted(fields))))


def _check_queue_names(where: str, values: dict[str, Any]) -> None:
    """Refuse a queue or dead-letter queue name SQS would not accept."""
    for field in ('name', 'dead_letter_queue'):
        if field in values and not (isinstance(values[field], str)
                                    and QUEUE_NAME_PATTERN.match(values[field])):
            raise QueueConfigError(
                "%s: field %r must be an SQS queue name (1-80 letters, digits, '-' or '_'), got %r"
                % (where, field, values[field]))


def _check_flags(where: str, values: dict[str, Any]) -> None:
    """Refuse a ``fifo`` or ``fair`` that is not a boolean."""
    for field in ('fifo', 'fair'):
        if field in values and not isinstance(values[field], bool):
            raise QueueConfigError('%s: field %r must be true or false, got %r (%s)'
                                   % (where, field, values[field], _type_name(values[field])))


def _check_integer(where: str, values: dict[str, Any], field: str, low: int, high: Optional[int]) -> None:
    """Refuse a missing integer field, a non-integer, or one outside ``low..high``."""
    if field not in values:
        raise QueueConfigError('%s: missing field %r' % (where, field))
    value = values[field]
    if isinstance(value, bool) or not isinstance(value, int):
        raise QueueConfigError('%s: field %r must be an integer, got %r (%s)'
                               % (where, field, value, _type_name(value)))
    if value < low or (high is not None and value > high):
        bounds = '%d..%d' % (low, high) if high is not None else 'at least %d' % low
        raise QueueConfigError('%s: field %r must be %s, got %d' % (where, field, bounds, value))


def _check_prefetch(where: str, values: dict[str, Any]) -> None:
    """Refuse a ``prefetch`` that is neither 'auto' nor an integer 1..batch_size."""
    prefetch = values.get('prefetch', AUTO_PREFETCH)
    if prefetch == AUTO_PREFETCH:
        return
    if (isinstance(prefetch, bool) or not isinstance(prefetch, int)
            or not 1 <= prefetch <= values['batch_size']):
        raise QueueConfigError("%s: field 'prefetch' must be 'auto' or an integer 1..%d (its "
                               'batch_size), got %r' % (where, values['batch_size'], prefetch))


def _validate_entry(path: str, key: Any, entry: Any, fields: set[str]) -> dict[str, Any]:
    _check_key(path, key, entry, fields)
    where = '%s: queue %r' % (path, key)
    values = dict(entry)
    values.setdefault('name', key)
    _check_queue_names(where, values)
    _check_flags(where, values)
    for field, (low, high) in INTEGER_FIELDS.items():
        _check_integer(where, values, field, low, high)
    _check_prefetch(where, values)
    return values


def parse_queue_config(path: str, data: Any, queue_class: type = TaskQueue) -> QueueConfig:
    """Validate the loaded YAML ``data`` of ``path`` into a QueueConfig."""
    if not isinstance(data, dict) or not data:
        raise QueueConfigError('%s: must map queue names to their fields, got %s'
                               % (path, 'an empty file' if not data else _type_name(data)))
    fields = {f.name for f in dataclasses.fields(queue_class)}
    queues: list[TaskQueue] = []
    keys: list[str] = []
    owners: dict[str, Any] = {}
    for key, entry in data.items():
        values = _validate_entry(path, key, entry, fields)
        try:
            queue = queue_class(**values)
        except (TypeError, ValueError) as exc:
            raise QueueConfigError('%s: queue %r: %s' % (path, key, exc)) from exc
        for sqs_name in (queue.name, queue.dead_letter_queue, queue.dead_run_queue):
            if sqs_name in owners:
                raise QueueConfigError('%s: queue %r: name %r is already used by queue %r'
                                       % (path, key, sqs_name, owners[sqs_name]))
            owners[sqs_name] = key
        queues.append(queue)
        keys.append(str(key))
    return QueueConfig(path, queues, keys)


def load_queue_config(path: str, queue_class: type = TaskQueue, named: str = '') -> QueueConfig:
    """Read and validate the queue config file at ``path`` (``named``: the
    QUEUE_CONFIG value, for errors); an error's ``public`` message starts
    with 'the queue config' instead of the path."""
    try:
        return parse_queue_config(path, _read_yaml(path, named or path), queue_class)
    except QueueConfigError as exc:
        message = str(exc)
        if exc.public is None and message.startswith(path + ':'):
            exc.public = 'the queue config' + message[len(path):]
        raise


def resolve_config_path(path: str, module_dir: Optional[str] = None) -> str:
    """Find QUEUE_CONFIG: relative from the current directory, then ``module_dir``."""
    if os.path.isabs(path):
        return os.path.normpath(path)
    candidates = [os.path.abspath(path)]
    if module_dir:
        candidates.append(os.path.normpath(os.path.join(module_dir, path)))
    for candidate in candidates:
        if os.path.exists(candidate):
            return candidate
    return candidates[0]


def build_queue_config(config: Config) -> QueueConfig:
    """The queue config ``config``'s QUEUE_CONFIG names, as its QUEUE_CLASS."""
    path = resolve_config_path(config.QUEUE_CONFIG, config.module_dir)
    queue_class = config.QUEUE_CLASS
    if isinstance(queue_class, str):
        queue_class = import_string(queue_class, 'QUEUE_CLASS')
    if not (isinstance(queue_class, type) and issubclass(queue_class, TaskQueue)):
        raise QueueConfigError('QUEUE_CLASS must be kale.queue_config.TaskQueue or a '
                               'subclass of it, got %r' % (queue_class,))
    return load_queue_config(path, queue_class, named=config.QUEUE_CONFIG)
