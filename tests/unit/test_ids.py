"""Random task and message ids: uuid4's form, never repeated, also across a fork."""
import os
import signal
import uuid

from kale import ids


def test_ids_are_version_4_uuids_and_never_repeat():
    made = [ids.random_id() for _ in range(3 * ids.IDS_PER_REFILL + 5)]     # several refills
    assert len(set(made)) == len(made)
    for value in made[:50]:
        parsed = uuid.UUID(hex=value)
        assert parsed.hex == value and parsed.version == 4
        assert parsed.variant == uuid.RFC_4122


def test_a_forked_child_does_not_hand_out_its_parents_next_ids():
    ids.random_id()                     # the buffer holds ids the parent has not used
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write, ''.join(ids.random_id() for _ in range(4)).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read, 'rb') as f:
        child = f.read().decode()
    child_ids = {child[i:i + 32] for i in range(0, len(child), 32)}
    parent_ids = {ids.random_id() for _ in range(4)}
    assert len(child_ids) == 4 and not child_ids & parent_ids


def test_a_child_forked_while_the_lock_is_held_can_still_make_ids():
    with ids._lock:                     # as another thread refilling at the fork
        pid = os.fork()
        if pid == 0:
            signal.alarm(5)             # a child stuck on the lock dies instead
            os._exit(0 if len(ids.random_id()) == 32 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_the_process_identity_reads_as_host_pid_and_start_time():
    import datetime
    import os
    import socket

    from kale.events import process_identity
    identity, started = process_identity()
    host_pid, when = identity.split('@')
    assert host_pid == '%s:%d' % (socket.gethostname(), os.getpid())
    parsed = datetime.datetime.strptime(when, '%Y-%m-%dT%H:%M:%SZ').replace(
        tzinfo=datetime.timezone.utc)
    assert abs(parsed.timestamp() - started) < 1
    assert process_identity() == (identity, started)           # asked once per process
