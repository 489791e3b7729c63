"""A task class's attributes are checked when the class is defined
(kale.task_checks): each bad value is one TaskDefinitionError line naming
the class, the attribute and what is accepted."""
import math

import pytest

from kale.exceptions import TaskDefinitionError
from kale.flow.spec import Rate, spec_of
from kale.task import Task

PATH = __name__ + '.Defined'

RATES = ("write a whole count above 0 per second, minute, hour or day, such as '5/s', '100/m', "
         "'100/min', '100/minute', '10/h' or '1000/day'")


def define(base=Task, **attributes):
    """A Task subclass called Defined, of this module, with ``attributes``."""
    return type('Defined', (base,), {'__module__': __name__, **attributes})


def refused(**attributes):
    """The one line refusing a class with ``attributes``."""
    with pytest.raises(TaskDefinitionError) as caught:
        define(**attributes)
    text = str(caught.value)
    assert '\n' not in text
    return text


def key(self, *args, **kwargs):
    return 'k'


# --- rate_limit -------------------------------------------------------------------------


@pytest.mark.parametrize('text,rate', [
    ('5/s', Rate(5, 1.0)), ('5/sec', Rate(5, 1.0)), ('5/second', Rate(5, 1.0)),
    ('100/m', Rate(100, 60.0)), ('100/min', Rate(100, 60.0)), ('100/minute', Rate(100, 60.0)),
    ('100/minutes', Rate(100, 60.0)), ('10/h', Rate(10, 3600.0)), ('10/hr', Rate(10, 3600.0)),
    ('10/hour', Rate(10, 3600.0)), ('1000/d', Rate(1000, 86400.0)),
    ('1000/day', Rate(1000, 86400.0)), (' 100 / min ', Rate(100, 60.0))])
def test_a_rate_limit_in_any_usual_spelling_is_accepted(text, rate):
    assert spec_of(define(rate_limit=text)).rate == rate


@pytest.mark.parametrize('text,message', [
    ('100/mn', "rate_limit '100/mn': the unit 'mn' is not one Kale knows: " + RATES),
    ('0/s', "rate_limit '0/s': the count '0' is not a whole number above 0: " + RATES),
    ('-5/m', "rate_limit '-5/m': the count '-5' is not a whole number above 0: " + RATES),
    ('2.5/h', "rate_limit '2.5/h': the count '2.5' is not a whole number above 0: " + RATES),
    ('100', "rate_limit '100' is not <count>/<unit>: " + RATES),
    (100, 'rate_limit 100 is not a string: ' + RATES),
])
def test_a_bad_rate_limit_is_refused_at_definition(text, message):
    assert refused(rate_limit=text) == 'task %s: %s' % (PATH, message)


# --- rate_limit_key and concurrency_key -------------------------------------------------


@pytest.mark.parametrize('attribute', ['rate_limit_key', 'concurrency_key'])
def test_a_key_must_be_a_method(attribute):
    assert define(rate_limit='1/s', concurrency_limit=1, **{attribute: key})
    assert define(**{attribute: classmethod(key)})
    assert refused(**{attribute: 'customer_id'}) == (
        "task %s: %s must be a method returning the key of a call, def %s(self, *args, "
        "**kwargs); got 'customer_id'" % (PATH, attribute, attribute))


# --- concurrency_limit ------------------------------------------------------------------


@pytest.mark.parametrize('limit', [0, -1, 1.5, True, '2'])
def test_a_concurrency_limit_is_a_whole_number_above_0_or_none(limit):
    assert spec_of(define(concurrency_limit=3)).concurrency == 3
    assert spec_of(define(concurrency_limit=None)) is None
    assert refused(concurrency_limit=limit) == (
        'task %s: concurrency_limit must be a whole number above 0, or None for no limit; '
        'got %r' % (PATH, limit))


# --- schedule and schedule_tz -----------------------------------------------------------


@pytest.mark.parametrize('every,message', [
    ('61 * * * *', "schedule '61 * * * *' is not a valid cron expression: Bad minute"),
    ('0 3 * *', "schedule '0 3 * *' is not a five-field cron expression (minute hour "
                'day-of-month month day-of-week)'),
    (0, 'schedule must be a five-field cron string or whole seconds of at least 1, got 0'),
    (2.5, 'schedule must be a five-field cron string or whole seconds of at least 1, got 2.5'),
    (True, 'schedule must be a five-field cron string or whole seconds of at least 1, got True'),
])
def test_a_schedule_is_a_cron_expression_or_whole_seconds(every, message):
    assert define(schedule='0 3 * * 1-5').schedule == '0 3 * * 1-5'
    assert define(schedule=300).schedule == 300
    assert define(schedule=None).schedule is None
    assert refused(schedule=every) == 'task %s: %s' % (PATH, message)


@pytest.mark.parametrize('tz,message', [
    ('Europe/Pariss', "schedule_tz 'Europe/Pariss' is not a known IANA time zone name (e.g. "
                      "'Europe/Paris'; pip install tzdata where the system has no zone "
                      'database)'),
    ('CEST+2', "schedule_tz 'CEST+2' is not a known IANA time zone name"),
    (2, 'schedule_tz must be an IANA time zone name, got 2'),
])
def test_a_schedule_tz_is_an_iana_zone_name(tz, message):
    assert define(schedule='0 3 * * *', schedule_tz='America/New_York')
    assert define(schedule_tz='UTC')
    assert refused(schedule='0 3 * * *', schedule_tz=tz).startswith('task %s: %s' % (PATH, message))


def test_the_other_schedule_fields_are_checked_too():
    assert define(schedule=60, schedule_args=('eu',), schedule_kwargs={'full': True},
                  schedule_catch_up='all')
    assert refused(schedule=60, schedule_catch_up='sometimes') == (
        "task %s: schedule_catch_up must be one of 'last', 'all', 'none', got 'sometimes'" % PATH)
    assert refused(schedule=60, schedule_args='eu') == (
        "task %s: schedule_args must be a list, got 'eu'" % PATH)
    assert refused(schedule=60, schedule_kwargs={1: 2}) == (
        'task %s: schedule_kwargs must be a dict of names to values, got {1: 2}' % PATH)


# --- unique_for_sec ---------------------------------------------------------------------


@pytest.mark.parametrize('window', [0, -1, 365 * 24 * 3600 + 1, math.nan, math.inf, True, '60'])
def test_unique_for_sec_is_none_or_seconds_within_a_year(window):
    for good in (None, 0.5, 60, 365 * 24 * 3600):
        assert define(unique_for_sec=good).unique_for_sec == good
    assert refused(unique_for_sec=window) == (
        'task %s: unique_for_sec must be None (not unique) or seconds above 0 and at most '
        '31536000 (a year); got %r' % (PATH, window))


# --- time_limit -------------------------------------------------------------------------


@pytest.mark.parametrize('limit', [0, -1, math.nan, math.inf, -math.inf, True, '30', None])
def test_a_time_limit_is_a_number_of_seconds_above_0(limit):
    for good in (0.25, 5, 3600):           # longer than the visibility timeout: a heartbeat
        assert define(time_limit=good).time_limit == good
    assert refused(time_limit=limit) == (
        'task %s: time_limit must be a number of seconds above 0 (a float is fine); got %r'
        % (PATH, limit))


# --- queue ------------------------------------------------------------------------------


@pytest.mark.parametrize('queue', ['', '  ', None, 3, ('default',)])
def test_a_queue_is_a_queue_name(queue):
    assert define(queue='high_priority').queue == 'high_priority'
    assert refused(queue=queue) == (
        'task %s: queue must be the name of a queue of the queue config; got %r' % (PATH, queue))


# --- max_retries ------------------------------------------------------------------------


@pytest.mark.parametrize('retries', [-1, 2.0, True, '3'])
def test_max_retries_is_a_whole_number_from_0_or_none(retries):
    for good in (None, 0, 10):
        assert define(max_retries=good).max_retries == good
    assert refused(max_retries=retries) == (
        'task %s: max_retries must be a whole number from 0 (0: never retry), or None; got %r'
        % (PATH, retries))


# --- what is checked --------------------------------------------------------------------


def test_a_base_class_that_sets_nothing_and_its_subclasses_are_defined():
    base = define()
    child = type('Child', (base,), {'__module__': __name__, 'rate_limit': '10/min'})
    grandchild = type('Grandchild', (child,), {'__module__': __name__})
    assert spec_of(grandchild).rate == Rate(10, 60.0)


def test_an_inherited_value_is_not_checked_again():
    """A value changed on a base after its definition (as a test may do) is
    the base's: a subclass defined later is not refused for it."""
    base = define(time_limit=5)
    base.time_limit = 0
    assert type('Child', (base,), {'__module__': __name__}).time_limit == 0
