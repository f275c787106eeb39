"""User-facing errors: each says what is wrong and how to fix it, in one line.

The entry points (``src/train.py`` etc.) print these without a traceback and exit with status 1;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input or configuration that the user can fix; the message says how."""


class ConfigError(UserError):
    """A configuration value is missing, inconsistent or out of range."""


class DataError(UserError):
    """A data file or data source cannot be read or has unexpected content."""
