"""The example's tasks, settings and queue configuration."""
