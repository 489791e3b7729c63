"""``kale submit FILE|-``: tasks and workflows submitted as JSON (see
:mod:`kale.submission`); prints the workflow id and each entry's task id."""
from __future__ import annotations

import argparse
import json
import sys

from kale.cli.options import arg, command
from kale.exceptions import SubmissionError


def cmd_submit(args: argparse.Namespace) -> int:
    from kale import submission
    from kale.app import default_app
    if args.file == '-':
        text = sys.stdin.buffer.read(submission.MAX_BYTES + 1)
    else:
        try:
            with open(args.file, 'rb') as f:
                text = f.read(submission.MAX_BYTES + 1)
        except OSError as exc:
            raise SubmissionError('cannot read %s: %s' % (args.file, exc.strerror)) from None
    answer = submission.submit(submission.parse(text), default_app())
    print(json.dumps(answer, indent=2 if sys.stdout.isatty() else None))
    return 0


def add_commands(commands: 'argparse._SubParsersAction[argparse.ArgumentParser]') -> None:
    """Register ``kale submit``."""
    command(commands, 'submit', cmd_submit, 'submit tasks or a workflow written as JSON',
            'Submit the tasks of a JSON document (its schema: '
            'kale/schemas/submission.schema.json): {"tasks": [{"id": "save", "method": '
            '"save-user-data", "args": [{"value": {"uid": 1}}]}, {"id": "mail", '
            '"method": "send-mail", "args": [{"ref": "save"}]}]}. An entry names an '
            'executor program ("method") or a Python task class ("task"); "ref" passes '
            "another entry's result. One entry alone is a plain task; otherwise a "
            'workflow (needs RECORDS_URL). Prints {"workflow_id": ..., "tasks": {entry '
            'id: task id}}. Nothing is recorded or sent unless the whole document is '
            'valid.', arg('file', metavar='FILE', help='the JSON document, or - for standard input'))
