"""The records-volume benchmark's rows look like a real writer's: ids as Kale
makes them (random) or sorting by publication time (``--volume-ids
ordered``), SQS-like random message ids, and a writer's rows published after
the ones before them. With ids that all sorted after the stored ones, every
new record landed at the end of the indexes, and the writer measured a
quarter of its real cost at a million records."""
import uuid

from bench import volume_rows


def test_the_writers_ids_are_random_like_kales():
    published, events = volume_rows.writer_rows(200, 1_800_000_000.0)
    ids = [row['id'] for row in published]
    assert [row['id'] for row in events] == ids
    assert len(set(ids)) == 200 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    assert ids != sorted(ids)
    messages = [row['message_id'] for row in published]
    assert len(set(messages)) == 200 and messages != sorted(messages)
    assert all(str(uuid.UUID(message)) == message for message in messages)


def test_ordered_ids_sort_by_publication_time():
    published, _ = volume_rows.writer_rows(200, 1_800_000_000.0, 'ordered')
    ids = [row['id'] for row in published]
    assert ids == sorted(ids) and len(set(ids)) == 200
    later, _ = volume_rows.writer_rows(5, 1_800_000_001.0, 'ordered')
    assert min(row['id'] for row in later) > max(ids)
    loaded = [row[0] for row in volume_rows.rows(300, 1_800_000_000.0, ids='ordered')]
    assert loaded == sorted(loaded) and max(loaded) < min(ids)


def test_a_writers_rows_follow_each_other_in_time():
    first, first_events = volume_rows.writer_rows(10, 1000.0)
    assert [row['published_at'] for row in first] == [1000.0 + i * volume_rows.TASK_SPACING_SEC
                                                      for i in range(10)]
    assert all(event['finished_at'] > row['published_at']
               for row, event in zip(first, first_events, strict=True))


def test_loaded_records_carry_a_message_id_each():
    made = list(volume_rows.rows(100, 1_800_000_000.0))
    at = volume_rows.COLUMNS.index('message_id')
    assert len({row[at] for row in made}) == 100
    assert all(len(row) == len(volume_rows.COLUMNS) for row in made)
