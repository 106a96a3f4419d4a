"""The error every layer raises for a run that cannot start as configured (a bad option, a missing key, a database
file of the wrong shape): the command catches it and stops with exit code 2 and its one line, naming field and fix.
It lives at the bottom so the data layer (`schemas/`) can raise it without importing the model layer."""


class ConfigurationError(Exception):
    """A run that cannot be used as configured (a missing API key, an unknown provider, a bad file); stops the run
    at start."""
