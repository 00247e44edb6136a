"""The ``depthlab`` command: thin. Each subcommand module turns flags into configs and calls the library.

Exit codes (docs/design.md): 0 success, 2 bad input (one line on stderr, no traceback), 1 anything else.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys

from depthlab.cli import (
    calibrate,
    check,
    coord,
    explain,
    forecast,
    probe,
    report,
    reproduce,
    study,
    train,
    transfer,
)
from depthlab.cli.common import as_typed
from depthlab.errors import ConfigError, InputError
from depthlab.paths import printable

# What ``depthlab --help`` says (the module docstring above is for developers).
DESCRIPTION = (
    "Build, probe, train and study deep Transformer stacks under every residual and normalisation "
    "wrapping (post-LN, pre-LN, sandwich, DeepNorm, Admin, ReZero, ...). 'depthlab COMMAND --help' "
    "describes each command."
)

# Each command is a module with ``add_parser(subparsers)`` (which sets ``run(args) -> int``).
COMMANDS = (explain, probe, check, coord, train, study, report, transfer, forecast, reproduce, calibrate)


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line on stderr and exit code 2."""

    def error(self, message):
        choice = re.match(r"argument \w+: invalid choice: '(.*)' \(choose from (.*)\)$", message)
        if choice:  # a mistyped subcommand: the closest one
            names = re.findall(r"'([^']*)'", choice.group(2))
            close = difflib.get_close_matches(choice.group(1), names, n=1, cutoff=0.6)
            message += f" (did you mean {close[0]}?)" if close else ""
        sys.stderr.write(f"{self.prog}: error: {printable(message)}\n")
        raise SystemExit(2)

    def unrecognized(self, extras: list[str]) -> None:
        """The usage error for arguments this (sub)command does not take, with the flag each mistyped
        one was closest to (``--warmpu`` -> did you mean --warmup?)."""
        flags = [o for action in self._actions for o in action.option_strings if o.startswith("--")]
        hints = []
        for arg in extras:
            if arg.startswith("-"):
                close = difflib.get_close_matches(arg.split("=", 1)[0], flags, n=1, cutoff=0.6)
                hints += [f"{arg.split('=', 1)[0]}: did you mean {close[0]}?"] if close else []
        said = f" ({'; '.join(hints)})" if hints else ""
        self.error(f"unrecognized arguments: {' '.join(extras)}{said}")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="depthlab", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command in COMMANDS:
        command.add_parser(sub)
    for p in sub.choices.values():  # each command's flags, so that an error can name the one typed
        p.set_defaults(flags={a.dest: a for a in p._actions if a.option_strings})
    parser.subcommands = sub.choices  # name -> the subcommand's parser (see parse)
    return parser


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The parsed arguments; a flag the subcommand does not take is that subcommand's usage error
    (``depthlab train: error: ...``), not the top-level one."""
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        parser.subcommands.get(args.command, parser).unrecognized(extras)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        return int(args.run(args) or 0)
    except ConfigError as e:
        sys.stderr.write(f"depthlab {args.command}: error: {printable(as_typed(e, args, args.flags))}\n")
        return 2
    except InputError as e:
        sys.stderr.write(f"depthlab {args.command}: error: {printable(e)}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 1
    except BrokenPipeError:
        return 0
    except Exception as e:  # anything else is a bug or an environment problem: exit 1
        if os.environ.get("DEPTHLAB_DEBUG"):
            raise
        sys.stderr.write(
            f"depthlab {args.command}: failed: {type(e).__name__}: {printable(e)} (DEPTHLAB_DEBUG=1 for a traceback)\n"
        )
        return 1
