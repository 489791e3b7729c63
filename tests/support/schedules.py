"""Driving schedulers on a FakeClock, for the schedule tests."""


def run_until(clock, until, *running):
    """Step each scheduler whenever its wait is over, until ``until``."""
    due = {scheduler: clock.time() for scheduler in running}
    while True:
        scheduler, when = min(due.items(), key=lambda item: item[1])
        if when > until:
            return
        clock.now += max(0.0, when - clock.time())
        due[scheduler] = clock.time() + scheduler.step()
