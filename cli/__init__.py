"""The ``cronstream`` command line."""
