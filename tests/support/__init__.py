"""Helpers shared by the test suite and the benchmarks: the test endpoint and
settings, record files that worker processes append to, a TCP proxy that
fakes outages, and hostile message bodies. Nothing here is a test."""
