"""One exception type for every user-facing failure: its message names the problem and the fix."""


class EdgespecError(Exception):
    """A problem with the user's input or environment; the CLI prints it on one line and exits 2."""
