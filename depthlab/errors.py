"""The two exception types that mean "the user asked for something invalid": ``ConfigError`` for a bad
value of a named field or option, ``InputError`` for any other bad input (a file, a folder, a batch).
Both are ValueErrors; the CLI prints either as one line on stderr and exits with code 2."""


class ConfigError(ValueError):
    """A bad value for a named field; the CLI turns it into one line on stderr and exit code 2."""

    def __init__(self, field: str, value, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{field}={value!r} is not allowed: {allowed}")


class InputError(ValueError):
    """Bad input that is not a config field (a missing data file, an existing output folder, ...)."""
