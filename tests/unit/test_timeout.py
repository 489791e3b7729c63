"""SignalTimeout: sub-second limits, enforced even on tasks that swallow them."""
import signal
import time

import pytest

from kale.exceptions import TimeLimitExceeded
from kale.timeout import NoTimeout, SignalTimeout

#: A time limit is a real SIGALRM: only the machine's clock shows when it came.
pytestmark = pytest.mark.real_time('the time limit is a real SIGALRM')


def alarm_due_within(seconds):
    """Whether SIGALRM is set to arrive within ``seconds``, or repeatedly (an
    outer alarm far off, such as pytest-timeout's, does not count)."""
    remaining, interval = signal.getitimer(signal.ITIMER_REAL)
    return interval > 0 or 0 < remaining <= seconds


def test_a_run_past_its_limit_is_stopped_at_the_limit_not_at_its_end(monkeypatch):
    set_for = []
    real_setitimer = signal.setitimer
    monkeypatch.setattr(signal, 'setitimer', lambda *args: set_for.append(args[1]) or
                        real_setitimer(*args))
    started = time.monotonic()
    with pytest.raises(TimeLimitExceeded, match='time limit of 0.3s exceeded'):
        with SignalTimeout(0.3):
            time.sleep(30)
    # Stopped at its limit, not at the end of its 30 s (a loaded machine may
    # add seconds to the signal's delivery, never take any away) ...
    assert 0.3 <= time.monotonic() - started < 0.3 + 5
    # ... by a timer set for the limit's fraction of a second, not a whole one.
    assert set_for[0] == pytest.approx(0.3)


def test_a_run_within_its_limit_is_untouched_and_the_alarm_is_cleared():
    handler = signal.getsignal(signal.SIGALRM)
    with SignalTimeout(0.2) as timer:
        time.sleep(0.05)
    assert not timer.fired
    assert not alarm_due_within(1.0)
    assert signal.getsignal(signal.SIGALRM) is handler


def test_a_task_that_swallows_the_interrupt_is_interrupted_again_and_still_times_out():
    started = time.monotonic()
    swallowed = 0
    with pytest.raises(TimeLimitExceeded):
        with SignalTimeout(0.2):
            while time.monotonic() - started < 30:
                try:
                    time.sleep(0.05)
                except TimeLimitExceeded:
                    swallowed += 1
                    if swallowed == 2:
                        break
    assert swallowed == 2
    assert time.monotonic() - started < 0.2 + 5          # interrupted again, long before 30 s


def test_a_busy_loop_is_interrupted_too():
    started = time.monotonic()
    with pytest.raises(TimeLimitExceeded):
        with SignalTimeout(0.2):
            while True:
                sum(range(1000))
    assert time.monotonic() - started < 0.2 + 5          # it would never end by itself


def test_no_timeout_enforces_nothing():
    handler = signal.getsignal(signal.SIGALRM)
    started = time.monotonic()
    with NoTimeout(0.01) as timer:
        assert not alarm_due_within(1.0)
        time.sleep(0.05)
    assert time.monotonic() - started >= 0.05      # ran past its limit to the end
    assert not timer.fired
    assert signal.getsignal(signal.SIGALRM) is handler


def test_an_outer_alarm_survives_a_worker_s_timeouts():
    """A test runner's guard or an application's alarm is put back, with the
    time it had left, once the timeouts are torn down."""
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *a: fired.append(True))
    set_at = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, 30)
    try:
        SignalTimeout.setup()
        with SignalTimeout(0.2):
            time.sleep(0.01)
        SignalTimeout.after_batch()
        SignalTimeout.teardown()
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        # (what it had left: its 30 s less those passed since it was set)
        assert 30 - (time.monotonic() - set_at) - 0.01 <= remaining <= 30
        assert signal.getsignal(signal.SIGALRM) is not None and fired == []
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_between_runs_of_a_batch_a_late_alarm_interrupts_nothing():
    SignalTimeout.setup()
    try:
        with SignalTimeout(0.05):
            pass                         # ends at once; the timer is left to the batch's end
        time.sleep(0.4)                  # the alarm (and its repeats) arrive now, harmlessly
        SignalTimeout.after_batch()
        assert not alarm_due_within(60)
    finally:
        SignalTimeout.teardown()


def test_runs_set_up_for_a_batch_keep_their_own_deadlines_with_one_timer_call(monkeypatch):
    """Between setup and teardown a run whose deadline is after the alarm on
    its way sets no timer: the earlier alarm re-arms for the run's deadline,
    so the run is stopped at its own limit, not the earlier run's."""
    calls = []
    real_setitimer = signal.setitimer
    monkeypatch.setattr(signal, 'setitimer', lambda *args: calls.append(args) or
                        real_setitimer(*args))
    SignalTimeout.setup()
    try:
        calls.clear()
        for _ in range(5):
            with SignalTimeout(0.2):
                pass
        assert len(calls) == 1              # the first run's alarm serves the others
        started = time.monotonic()
        with pytest.raises(TimeLimitExceeded):
            with SignalTimeout(0.6):        # the pending alarm comes at about 0.2 s
                time.sleep(30)
        assert 0.6 <= time.monotonic() - started < 0.6 + 5
        with SignalTimeout(30):
            pass
        started = time.monotonic()
        with pytest.raises(TimeLimitExceeded):
            with SignalTimeout(0.2):        # earlier than the pending alarm: set anew
                time.sleep(30)
        assert time.monotonic() - started < 0.2 + 5
    finally:
        SignalTimeout.after_batch()
        SignalTimeout.teardown()
    assert not alarm_due_within(1.0)


def test_a_run_after_one_that_stopped_the_timer_itself_still_has_its_limit():
    SignalTimeout.setup()
    try:
        with SignalTimeout(1.0):
            signal.setitimer(signal.ITIMER_REAL, 0)     # task code clearing the timer
        started = time.monotonic()
        with pytest.raises(TimeLimitExceeded):
            with SignalTimeout(1.5):        # its deadline is after the one cleared
                time.sleep(30)
        assert 1.5 <= time.monotonic() - started < 1.5 + 5
    finally:
        SignalTimeout.after_batch()
        SignalTimeout.teardown()
