"""Finding the schedules: task classes of ``TASK_MODULES`` that declare
``schedule``, and the entries of ``SCHEDULES``, each checked when found, the
broken kept aside (docs/explanation/internals-workflow.md, "Finding schedules")."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Mapping, Optional

from kale.exceptions import KaleError, ScheduleError, ScheduleNotFoundError
from kale.publisher import check_arguments, task_queue
from kale.schedules.spec import Schedule, check_fields, check_name
from kale.task import Task
from kale.task_modules import declaring_classes_and_failures

if TYPE_CHECKING:
    from kale.app import App

#: A class's attributes and the fields they give.
CLASS_FIELDS: tuple[tuple[str, str, Any], ...] = (
    ('schedule_tz', 'tz', 'UTC'), ('schedule_args', 'args', ()),
    ('schedule_kwargs', 'kwargs', {}), ('schedule_catch_up', 'catch_up', 'last'))
#: The fields of a SCHEDULES entry.
ENTRY_FIELDS = ('task', 'schedule', 'tz', 'args', 'kwargs', 'catch_up', 'queue')

#: Said when nothing could hold a schedule.
NOTHING_TO_SEARCH = ('no schedules: TASK_MODULES and SCHEDULES are both empty (name the modules '
                     'of your task classes that say schedule = ... in TASK_MODULES, or list '
                     'schedules in SCHEDULES)')


@dataclasses.dataclass(frozen=True)
class Broken:
    """A schedule that cannot run, or a module of TASK_MODULES that cannot be
    imported (whose schedules are unknown), and why, in one line."""

    name: str
    error: str
    #: The task's path, when known.
    task: Optional[str] = None
    #: ``error`` as an API caller may read it, when it names a file (the queue config).
    public: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class Schedules:
    """Every schedule of one configuration, by name: those that run, and
    those that are broken."""

    schedules: tuple[Schedule, ...]
    #: Whether TASK_MODULES or SCHEDULES named anything to look in.
    searched: bool
    broken: tuple[Broken, ...] = ()

    def __iter__(self) -> Any:
        return iter(self.schedules)

    def __len__(self) -> int:
        return len(self.schedules)

    def get(self, name: str) -> Schedule:
        for schedule in self.schedules:
            if schedule.name == name:
                return schedule
        for broken in self.broken:
            if broken.name == name:
                raise ScheduleError(broken.error, public=broken.public)
        raise ScheduleNotFoundError('no schedule is called %r (schedules: %s)' % (
            name[:200], ', '.join(s.name for s in self.schedules) or 'none'))


def find_schedules(app: 'App') -> Schedules:
    """Import ``app``'s TASK_MODULES and the tasks of its SCHEDULES, and check
    every schedule: those that cannot run are kept aside as broken, each with
    its ScheduleError line naming the schedule and the field."""
    config = app.config
    found, broken = _class_schedules(app)
    for name, entry in (config.SCHEDULES or {}).items():
        _add_entry(app, name, entry, found, broken)
    return Schedules(tuple(found[name] for name in sorted(found)),
                     searched=bool(config.TASK_MODULES or config.SCHEDULES),
                     broken=tuple(broken[name] for name in sorted(broken)))


def _class_schedules(app: 'App') -> tuple[dict[str, Schedule], dict[str, Broken]]:
    classes, failures = declaring_classes_and_failures(list(app.config.TASK_MODULES or ()),
                                                       'schedule')
    broken = {module: Broken(module, line + ' (its schedules do not run)')
              for module, line in failures}
    found: dict[str, Schedule] = {}
    for task_class in classes:
        name, every = task_class.task_path(), task_class.__dict__['schedule']
        if every is None:                   # a subclass says it has none
            continue
        fields = {field: getattr(task_class, attribute, default)
                  for attribute, field, default in CLASS_FIELDS}
        try:
            found[name] = _schedule(app, name, task_class, every, fields, None)
        except ScheduleError as exc:
            broken[name] = Broken(name, str(exc), name, exc.public)
    return found, broken


def _add_entry(app: 'App', name: Any, entry: Any, found: dict[str, Schedule],
               broken: dict[str, Broken]) -> None:
    try:
        check_name(name)
        if name in found or name in broken:
            found.pop(name, None)
            raise ScheduleError('schedule %r is defined twice: by its task class, which '
                                'says schedule = ..., and in SCHEDULES (rename the entry)' % name)
        found[name] = _entry(app, name, entry)
    except ScheduleError as exc:
        shown = name if isinstance(name, str) else repr(name)
        task = entry.get('task') if isinstance(entry, Mapping) else None
        broken[shown] = Broken(shown, str(exc), task if isinstance(task, str) else None,
                               exc.public)


def _entry(app: 'App', name: str, entry: Mapping[str, Any]) -> Schedule:
    unknown = sorted(set(entry) - set(ENTRY_FIELDS))
    if unknown:
        raise ScheduleError('schedule %r: unknown field %r (fields: %s)'
                            % (name, unknown[0], ', '.join(ENTRY_FIELDS)))
    for field in ('task', 'schedule'):
        if field not in entry:
            raise ScheduleError('schedule %r: %s is missing' % (name, field))
    path = entry['task']
    if not isinstance(path, str):
        raise ScheduleError('schedule %r: task must be a task path (module.Class), got %r'
                            % (name, path))
    try:
        task_class = app.registry.resolve(path)
    except KaleError as exc:        # DecodeError: "task 'x.Y' cannot be imported: ..."
        raise ScheduleError('schedule %r: %s' % (name, getattr(exc, 'detail', exc))) from None
    queue = entry.get('queue')
    if queue is not None and not isinstance(queue, str):
        raise ScheduleError('schedule %r: queue must be a queue name, got %r' % (name, queue))
    fields = {field: entry.get(field, default) for _, field, default in CLASS_FIELDS}
    return _schedule(app, name, task_class, entry['schedule'], fields, queue)


def _schedule(app: 'App', name: str, task_class: type[Task], every: Any,
              fields: dict[str, Any], queue: Optional[str]) -> Schedule:
    checked = check_fields(name, every, **fields)
    try:
        task_queue(task_class, app.queues, queue)
    except KaleError as exc:
        raise ScheduleError('schedule %r: queue: %s' % (name, exc),
                            public='schedule %r: queue: %s' % (name, exc.public or exc)) from None
    try:
        check_arguments(task_class, checked['args'], checked['kwargs'], app.config)
    except KaleError as exc:
        raise ScheduleError('schedule %r: args and kwargs: %s' % (name, exc)) from None
    return Schedule(name=name, task_class=task_class, queue=queue, **checked)
