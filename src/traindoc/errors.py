"""Errors meant for the user: the CLI prints ``Error: <message>`` and exits 2, no traceback."""


class UsageError(Exception):
    """A user mistake (bad path, bad option, unreadable file). The message says what to do."""
