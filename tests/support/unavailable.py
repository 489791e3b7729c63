"""What a test does when a real component it needs cannot start here
(fauxqs, PostgreSQL, Chromium, Node.js, an optional library): on a
developer's machine it skips, saying why; in CI (the environment variable
``CI`` is ``true`` or ``1``, as .ci/run and the CI services set it) it fails,
saying why, because a CI that skips what it cannot start hides exactly the
failures it exists to catch.

A skip about the test's own scope (a pool, a store or a codec the test
documents it does not cover) is a plain ``pytest.skip`` with its reason, and
skips in CI too.
"""
from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import NoReturn

import pytest

#: The values of ``CI`` that mean "this is a CI run" (case aside).
CI_VALUES = ('true', '1')


def in_ci() -> bool:
    return os.environ.get('CI', '').strip().lower() in CI_VALUES


def unavailable(reason: str) -> NoReturn:
    """Skip the test, or fail it in CI; ``reason`` names the component and why
    it cannot start."""
    if in_ci():
        pytest.fail('%s (CI is set: a component a test needs must start in CI, so this fails '
                    'instead of skipping)' % reason, pytrace=False)
    pytest.skip(reason)


def require_module(name: str, why: str) -> ModuleType:
    """The module ``name``, imported; :func:`unavailable` when it is not
    installed (``why``: what the test needs it for)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        unavailable('%s cannot be imported (%s): %s' % (name, exc, why))
