"""Packaging for Kale, a task worker for Amazon SQS with priority queues."""
import os

from setuptools import find_packages, setup

here = os.path.dirname(os.path.abspath(__file__))
about = {}
with open(os.path.join(here, 'kale', 'version.py')) as f:
    exec(f.read(), about)

with open(os.path.join(here, 'README.md'), encoding='utf-8') as f:
    long_description = f.read()

setup(
    name='kale-sqs',
    version=about['__version__'],
    description='Task worker for Amazon SQS with priority queues, signed messages and safe retries',
    long_description=long_description,
    long_description_content_type='text/markdown',
    packages=find_packages(include=['kale', 'kale.*']),
    package_data={'kale': ['py.typed', 'presets/queue_config.yaml', 'web/static/*',
                           'schemas/*.json', 'fauxqs/*.json', 'fauxqs/serve.mjs']},
    python_requires='>=3.10',
    install_requires=[
        # The direct SQS requests read parts of botocore's client that are
        # not its public API: the versions they are tested with
        # (BOTOCORE_TESTED in kale/version.py).
        'boto3>=%s' % about['BOTOCORE_TESTED'][0],
        'botocore>=%s,<%s' % about['BOTOCORE_TESTED'],
        'PyYAML>=5.4',
    ],
    extras_require={
        # The embedded SQS-compatible endpoint behind `kale sqs-local`; the
        # local preset also keeps task records in SQLite.
        'local': ['moto[server]>=5.0', 'SQLAlchemy>=2.0'],
        # Task records (RECORDS_URL): SQLite out of the box.
        'records': ['SQLAlchemy>=2.0'],
        # Task records on PostgreSQL.
        'postgres': ['SQLAlchemy>=2.0', 'psycopg[binary]>=3.1'],
        # `kale web`: the REST API and the dashboard.
        'web': ['SQLAlchemy>=2.0', 'starlette>=0.37', 'uvicorn>=0.29', 'jsonschema>=4.18'],
        # `kale submit`: tasks and workflows submitted as JSON, checked by their schema.
        'submit': ['jsonschema>=4.18'],
        # Prometheus metrics: METRICS_PORT, `kale worker --metrics-port`, and
        # kale web's /metrics.
        'metrics': ['prometheus_client>=0.17'],
        # OpenTelemetry traces: TRACING (configure the SDK and an exporter yourself).
        'otel': ['opentelemetry-api>=1.20'],
        # Webhooks (kale.webhooks): deliveries over HTTP, with the task records.
        'webhooks': ['httpx>=0.27', 'SQLAlchemy>=2.0'],
        # Periodic tasks (kale scheduler): cron expressions, time zones on
        # systems without a zone database, and the task records for the lease.
        'schedules': ['cronsim>=2.6', 'tzdata', 'SQLAlchemy>=2.0'],
        # Django: INSTALLED_APPS += ['kale.contrib.django'], the setting KALE,
        # `manage.py kale`, publish_on_commit and the outbox on Django's
        # connection (add `postgres` for PostgreSQL).
        'django': ['Django>=4.2', 'SQLAlchemy>=2.0'],
        # The docs site (`make docs`): MkDocs with the Material theme, and
        # mkdocstrings for the Python API reference.
        'docs': ['mkdocs>=1.6', 'mkdocs-material>=9.5', 'mkdocstrings[python]>=0.26'],
        # Test, lint and type-checking tools.
        'dev': [
            'pytest>=7',
            'pytest-timeout>=2',
            'pytest-xdist>=3',
            'hypothesis>=6',
            'ruff>=0.6',
            'mypy>=1.10',
            'import-linter>=2.1',
            'radon>=6',              # the complexity the layout tests bound
            'types-PyYAML',
            'types-jsonschema',
            'httpx>=0.27',           # Starlette's test client
            'playwright>=1.40',      # the dashboard's test, on Debian's chromium
            # the tracing tests export spans to memory, and check that the
            # SQS requests reach OpenTelemetry's and X-Ray's botocore tracing
            'opentelemetry-sdk>=1.20',
            'opentelemetry-instrumentation-botocore>=0.41b0',
            'aws-xray-sdk>=2.10',
            # the README's FastAPI and Flask examples run in the tests
            'fastapi>=0.110',
            'flask>=2.3',
        ],
    },
    entry_points={
        'console_scripts': ['kale = kale.__main__:run'],
    },
    classifiers=[
        'Programming Language :: Python :: 3',
        'Operating System :: POSIX',
        'Topic :: System :: Distributed Computing',
    ],
)
