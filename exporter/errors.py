"""Errors meant for the operator: printed as one line by the CLI, never as a traceback."""

from __future__ import annotations


class UserError(Exception):
    """A mistake or an unreachable source that the operator can fix; ``exit_code`` is the
    process exit status the CLI uses."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class SourceError(UserError):
    """A data source (socket, kubelet endpoint, file, sysfs) could not be read."""

    def __init__(self, source: str, operation: str, message: str) -> None:
        super().__init__(f"{source} {operation}: {message}")
        self.source = source
        self.operation = operation
