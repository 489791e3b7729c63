#!/usr/bin/env python
"""The test suite's Django project (see tests/e2e/test_django_e2e.py)."""
import os
import sys

if __name__ == '__main__':
    os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'project.settings')
    from django.core.management import execute_from_command_line
    execute_from_command_line(sys.argv)
