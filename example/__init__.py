"""A runnable example task worker built on Kale (see example/README.md)."""
