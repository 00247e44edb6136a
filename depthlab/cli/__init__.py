"""The ``depthlab`` command: thin. Each subcommand module turns flags into configs and calls the library.

Exit codes (docs/design.md): 0 success, 2 bad input (one line on stderr, no traceback), 1 anything else.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import time
from importlib.metadata import entry_points

from depthlab.cli import advise, check, coord, explain, probe, report, study, train, transfer
from depthlab.cli.common import as_typed
from depthlab.errors import ConfigError, InputError, spoken_as_flags
from depthlab.paths import forget_new_folders, printable, undo_new_folders
from depthlab.train.distributed import cap_torch_threads, env_rank, env_world_size
from depthlab.version import __version__
from depthlab.words import nearest

# What ``depthlab --help`` says (the module docstring above is for developers).
DESCRIPTION = (
    "Build, probe, train and study deep Transformer stacks under every residual and normalisation "
    "wrapping (post-LN, pre-LN, sandwich, DeepNorm, Admin, ReZero, ...). 'depthlab COMMAND --help' "
    "describes each command."
)

# Each command is a module with ``add_parser(subparsers)`` (which sets ``run(args) -> int``).
COMMANDS = (explain, probe, advise, check, coord, train, study, report, transfer)
# The lab's commands (depthlab_lab, beside the library in the repository: never imported by it). They are
# found through the "depthlab.commands" entry points when the lab is installed, and loaded only when run.
LAB_COMMANDS = {
    "reproduce": "reproduce the source texts' and papers' claims, with seeds and intervals (the lab)",
    "calibrate": "refit the doctor's rules from tuning studies (the lab)",
    "forecast": "how well the watcher's early warnings foretell an outcome, on held-out studies (the lab)",
}
LAB_MISSING = (
    "the {name} command is in depthlab's lab, which is not installed: from a clone of the repository, "
    "pip install -e lab (make test installs it)"
)


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line on stderr and exit code 2, and that reads ``-1e-3`` as a
    (negative) value, not a flag, as it reads ``-0.001`` (the matcher Python 3.13's argparse has)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-\d+$|^-\d*\.\d+$|^-(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")

    def error(self, message):
        choice = re.match(r"argument \w+: invalid choice: '(.*)' \(choose from (.*)\)$", message)
        if choice:  # a mistyped subcommand: the closest one
            names = re.findall(r"'([^']*)'", choice.group(2))
            close = nearest(choice.group(1), names)
            message += f" (did you mean {close}?)" if close else ""
        refuse(f"{self.prog}: error: {printable(message)}")
        raise SystemExit(2)

    def unrecognized(self, extras: list[str]) -> None:
        """The usage error for arguments this (sub)command does not take, with the flag each mistyped
        one was closest to (``--warmpu`` -> did you mean --warmup?)."""
        flags = [o for action in self._actions for o in action.option_strings if o.startswith("--")]
        hints = []
        for arg in extras:
            if arg.startswith("-"):
                close = nearest(arg.split("=", 1)[0], flags)
                hints += [f"{arg.split('=', 1)[0]}: did you mean {close}?"] if close else []
        said = f" ({'; '.join(hints)})" if hints else ""
        self.error(f"unrecognized arguments: {' '.join(extras)}{said}")


def lab_command(name: str):
    """The lab's module for command ``name`` (with ``add_parser``), or None when the lab is not installed."""
    found = [ep for ep in entry_points(group="depthlab.commands") if ep.name == name]
    return importlib.import_module(found[0].value) if found else None


def build_parser(load: tuple[str, ...] = ()) -> argparse.ArgumentParser:
    """The parser of every command; a lab command is loaded only when named in ``load`` (the command
    typed; every one of :data:`LAB_COMMANDS` to check the documents) and listed by name otherwise."""
    parser = Parser(prog="depthlab", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"depthlab {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command in COMMANDS:
        command.add_parser(sub)
    for name, summary in LAB_COMMANDS.items():
        module = lab_command(name) if name in load else None
        if module is not None:
            module.add_parser(sub)
        else:
            sub.add_parser(name, help=summary, add_help=False)
    for p in sub.choices.values():  # each command's flags, so that an error can name the one typed
        p.set_defaults(flags={a.dest: a for a in p._actions if a.option_strings})
    parser.subcommands = sub.choices  # name -> the subcommand's parser (see parse)
    return parser


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The parsed arguments; a flag the subcommand does not take is that subcommand's usage error
    (``depthlab train: error: ...``), not the top-level one."""
    argv = sys.argv[1:] if argv is None else argv
    wanted = next((a for a in argv if not a.startswith("-")), None)
    if wanted in LAB_COMMANDS and lab_command(wanted) is None:
        refuse(f"depthlab {wanted}: error: {LAB_MISSING.format(name=wanted)}")
        raise SystemExit(2)
    parser = build_parser(load=(wanted,))
    args, extras = parser.parse_known_args(argv)
    if extras:
        parser.subcommands.get(args.command, parser).unrecognized(extras)
    args.typed = {  # the flags on the command line (a refusal blames one of them over a default)
        dest
        for dest, action in (getattr(args, "flags", None) or {}).items()
        if any(a == o or a.startswith(o + "=") for a in argv for o in action.option_strings)
    }
    return args


# Flags a command reads with "if args.flag:", where '' would be taken as the flag not given (--hf ''
# probing the default model instead of the one meant, --module '' checking the flags' model instead of
# the user's): refused for every command up front. dest -> what an empty value fails to name.
EMPTY_REFUSED = {"hf": "path names no file or folder", "plot": "path names no file or folder",
                 "module": "value names no module (MOD:FN)"}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    forget_new_folders()
    try:
        for dest, what in EMPTY_REFUSED.items():
            value = getattr(args, dest, None)
            if isinstance(value, str) and not value.strip():
                raise InputError(f"--{dest}: an empty {what}")
        cap_torch_threads()  # no more threads than usable cores; train and reproduce then set their own
        with spoken_as_flags():  # the library's messages name the flags the user typed
            return int(args.run(args) or 0)
    except ConfigError as e:
        undo_new_folders()  # a refusal leaves nothing behind: not the folder made for its --json
        refuse(f"depthlab {args.command}: error: {printable(as_typed(e, args, args.flags))}")
        return 2
    except InputError as e:
        undo_new_folders()
        refuse(f"depthlab {args.command}: error: {printable(e)}")
        return 2
    except KeyboardInterrupt:
        if not other_rank():  # Ctrl-C reaches every torchrun process; one says so
            sys.stderr.write("interrupted\n")
        return 1
    except (MemoryError, RuntimeError) as e:
        if not out_of_memory(e) or os.environ.get("DEPTHLAB_DEBUG"):
            return _failed(args, e)
        undo_new_folders()
        first = (str(e).strip().splitlines() or ["no memory left"])[0][:200]
        refuse(
            f"depthlab {args.command}: error: out of memory ({printable(first)}): use a smaller model or "
            "batch, or fewer workers"
        )
        return 2
    except BrokenPipeError:
        return 0
    except Exception as e:  # anything else is a bug or an environment problem: exit 1
        return _failed(args, e)


# Under torchrun every process reads the same flags and files, so every one refuses them. Rank 0 says
# so at once; another rank first waits this long, in which torchrun sees rank 0 exit and stops the
# others (it looks every 0.1 s), so the line is said once. A rank whose refusal is its own (rank 0
# went on) still says it, after the wait.
OTHER_RANK_WAIT_S = 5.0


def refuse(line: str) -> None:
    """Write a refusal's one line on stderr: at once from rank 0 (and outside torchrun), after
    :data:`OTHER_RANK_WAIT_S` from any other rank."""
    if other_rank():
        time.sleep(OTHER_RANK_WAIT_S)
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def other_rank() -> bool:
    """Whether this is a torchrun process other than rank 0."""
    return env_world_size() > 1 and env_rank() != 0


def _failed(args: argparse.Namespace, e: BaseException) -> int:
    """Exit 1 for anything that is not bad input: a bug or an environment problem, in one line."""
    if os.environ.get("DEPTHLAB_DEBUG"):
        raise e
    sys.stderr.write(
        f"depthlab {args.command}: failed: {type(e).__name__}: {printable(e)} (DEPTHLAB_DEBUG=1 for a traceback)\n"
    )
    return 1


def out_of_memory(e: BaseException) -> bool:
    """Whether ``e`` says an allocation failed: Python's MemoryError, torch's OutOfMemoryError (CUDA),
    or the RuntimeError of torch's CPU allocator ("DefaultCPUAllocator: can't allocate memory")."""
    if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError":
        return True
    return isinstance(e, RuntimeError) and "can't allocate memory" in str(e)
