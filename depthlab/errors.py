"""The two exception types that mean "the user asked for something invalid": ``ConfigError`` for a bad
value of a named field or option, ``InputError`` for any other bad input (a file, a folder, a batch).
Both are ValueErrors; the CLI prints either as one line on stderr and exits with code 2."""

from contextlib import contextmanager
from contextvars import ContextVar


class ConfigError(ValueError):
    """A bad value for a named field; the CLI turns it into one line on stderr and exit code 2."""

    def __init__(self, field: str, value, allowed: str, other: str | None = None):
        """``other``: the field whose value the rule ties this one to (``n_heads`` for a d_model the heads
        must split), so that the command line can blame the flag the user typed."""
        self.field, self.value, self.allowed, self.other = field, value, allowed, other
        super().__init__(f"{field}={value!r} is not allowed: {allowed}")


class InputError(ValueError):
    """Bad input that is not a config field (a missing data file, an existing output folder, ...)."""


# How a message names the options a user can pass both as a Python keyword and as a command-line flag:
# (the Python spelling, the flag). The CLI speaks in flags (``spoken_as_flags``); a library caller
# reads the keyword it passed.
OPTIONS = {
    "out": ("out_dir", "--out"),
    "db": ("db", "--db"),
    "workers": ("workers", "--workers"),
    "resume": ("resume=True", "--resume"),
    "force": ("force=True", "--force"),
    "force_memory": ("force_memory=True", "--force-memory"),
    "layers": ("n_layers", "--layers"),
    "d_model": ("d_model", "--d-model"),
    "d_ff": ("d_ff", "--d-ff"),
    "vocab": ("vocab_size", "--vocab"),
    "batch_size": ("batch_size", "--batch-size"),
    "seq_len": ("seq_len", "--seq-len"),
    "data": ("data file", "--data"),  # TrainConfig.data, probe_config(data=...)
    "checkpoint_activations": ("activation_checkpointing=True", "--checkpoint-activations"),
    "no_telemetry": ("telemetry=False", "--no-telemetry"),
    "steps": ("steps", "--steps"),
    "lr": ("lr", "--lr"),
    "heads": ("heads", "--heads"),
    "seeds": ("seeds", "--seeds"),
    "wraps": ("wraps", "--wrap"),  # a list of wrappings (coord)
    "params": ("params", "--param"),
    "run": ("folder", "--run"),  # write_run_report(folder)
    "runs": ("folders", "--run"),  # write_runs_report(folders)
    "study": ("study", "--study"),  # a study of a store, by name or id
    "tune": ("tune_study", "--tune"),  # forecast's tuning study
}
_AS_FLAGS: ContextVar[bool] = ContextVar("depthlab_as_flags", default=False)


def option(name: str) -> str:
    """How an error message names option ``name`` (a key of OPTIONS) to whoever called: ``--resume`` on
    the command line, ``resume=True`` from Python."""
    return OPTIONS[name][_AS_FLAGS.get()]


def option_list(*names: str) -> str:
    """Options ``names`` in a list that reads: '--layers, --d-model or --seq-len'."""
    said = [option(n) for n in names]
    return said[0] if len(said) == 1 else f"{', '.join(said[:-1])} or {said[-1]}"


def as_flags() -> bool:
    """Whether messages name options as the command line's flags here (a study passes it to its workers)."""
    return _AS_FLAGS.get()


@contextmanager
def spoken_as_flags():
    """Within this block, error messages name options as the command line's flags."""
    token = _AS_FLAGS.set(True)
    try:
        yield
    finally:
        _AS_FLAGS.reset(token)
