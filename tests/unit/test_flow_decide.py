"""What an ask does inside its transaction (kale.store.flow.decide): a rate
key whose line holds no live place is not searched for the batch's places
(one statement less while a database holds the bucket's row); one whose
line holds places is, and a run back on its place takes its token."""
from kale.flow.spec import Rate
from kale.store.flow import Ask, decide
from kale.store.memory.facets import MemoryFlow


class RecordedSteps(MemoryFlow):
    """The memory store's steps, each call's name noted."""

    def __init__(self):
        super().__init__(root=None)
        self.calls = []

    def __getattribute__(self, name):
        value = super().__getattribute__(name)
        if name in ('read_bucket', 'take_reserved', 'write_bucket', 'reserve'):
            self.calls.append(name)
        return value


#: A bucket of one token a second.
ONE_A_SECOND = Rate(1, 1.0)


def asks(*task_ids):
    return [Ask(task_id, rate=ONE_A_SECOND, rate_key='k') for task_id in task_ids]


def test_a_batch_asks_without_looking_for_places_when_none_is_reserved():
    steps = RecordedSteps()
    answers = decide(steps, asks('a'), 100.0, 60.0)
    assert [answer.granted for answer in answers] == [True]
    assert steps.calls == ['read_bucket', 'write_bucket']


def test_a_run_back_on_its_reserved_place_takes_its_token_ahead_of_new_ones():
    steps = RecordedSteps()
    first = decide(steps, asks('a', 'b'), 100.0, 60.0)    # a bucket of one token
    assert first[0].granted and not first[1].granted
    assert steps.calls[-1] == 'reserve'
    steps.calls.clear()
    back = 100.0 + first[1].wait_sec
    answers = decide(steps, asks('c', 'b'), back, 60.0)
    assert 'take_reserved' in steps.calls
    assert not answers[0].granted and answers[1].granted    # b's place comes first
