"""Flow control across the fleet: rate limits and concurrency limits per key;
:mod:`kale.flow.spec` parses what a class asks for, :mod:`kale.flow.bucket`
holds the token bucket's arithmetic (docs/explanation/internals-workflow.md, "Flow control")."""
