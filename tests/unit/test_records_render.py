"""What a record keeps of a task's arguments, result and error: JSON-safe,
bounded, and saying when it is not the whole."""
from kale.records.render import (
    MAX_TRACEBACK_CHARS,
    error_fields,
    render_inputs,
    render_result,
)


class Opaque:
    def __repr__(self):
        return '<Opaque 7>'


def test_plain_arguments_are_kept_exactly():
    assert render_inputs((1, 'a'), {'k': [True, None]}, 4000) == {
        'args': [1, 'a'], 'kwargs': {'k': [True, None]}, 'exact': True}


def test_an_object_that_is_not_json_becomes_its_repr_and_is_not_exact():
    inputs = render_inputs((Opaque(),), {}, 4000)
    assert inputs['exact'] is False and '<Opaque 7>' in str(inputs['args'])


def test_arguments_past_the_bound_keep_a_preview_of_that_size():
    inputs = render_inputs(('x' * 150,), {'big': 'y' * 5000}, 100)
    assert inputs['exact'] is False and inputs['args'] == [] and inputs['kwargs'] == {}
    assert len(inputs['truncated']['preview']) == 100 and inputs['truncated']['chars'] > 1000


def test_a_result_past_the_bound_is_cut_and_a_small_one_kept():
    assert render_result({'sum': 5}, 100) == {'sum': 5}
    cut = render_result({'rows': ['r'] * 1000}, 100)
    assert cut['truncated'] is True and len(cut['preview']) == 100


def _deep(n):
    if n == 0:
        raise KeyError('the bottom')
    _deeper(n - 1)


def _deeper(n):       # two functions in turn: Python collapses one repeated frame
    _deep(n)


def test_a_long_traceback_keeps_its_end_where_the_error_was_raised():
    try:
        _deep(400)
    except KeyError as exc:
        fields = error_fields(exc)
    assert fields['error_type'] == 'KeyError' and fields['error_message'] == "'the bottom'"
    trace = fields['error_traceback']
    assert len(trace) <= MAX_TRACEBACK_CHARS + 4 and trace.startswith('...\n')
    assert "raise KeyError('the bottom')" in trace
