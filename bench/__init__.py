"""Kale's benchmarks and fault-injection tools (see bench/README.md)."""
