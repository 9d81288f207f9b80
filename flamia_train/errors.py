"""Errors raised for bad user input: each names the key or path, the value, and what is allowed."""


class FlamiaError(Exception):
    """Base class: a user-facing error that the CLI prints without a traceback."""


class ConfigError(FlamiaError, ValueError):
    """A config value is invalid: `key`, `value` and the rule it breaks."""

    def __init__(self, key: str, value: object, allowed: str):
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"config key '{key}' = {value!r} is invalid: {allowed}")


class DataError(FlamiaError):
    """A data file, dataset or tokenizer cannot be used."""


class CheckpointError(FlamiaError):
    """A checkpoint cannot be written or restored."""
