"""The ready settings modules of :mod:`kale.presets`, at their old paths in a checkout."""
