"""Ready settings modules: pick one with KALE_SETTINGS_MODULE=settings.<name>."""
