"""The ``depthlab`` command: thin. Each subcommand module turns flags into configs and calls the library.

Exit codes (docs/design.md): 0 success, 2 bad input (one line on stderr, no traceback), 1 anything else.
"""

from __future__ import annotations

import argparse
import os
import sys

from depthlab.cli import coord, explain, forecast, probe, report, reproduce, study, train, transfer
from depthlab.errors import ConfigError, InputError

# What ``depthlab --help`` says (the module docstring above is for developers).
DESCRIPTION = (
    "Build, probe, train and study deep Transformer stacks under every residual and normalisation "
    "wrapping (post-LN, pre-LN, sandwich, DeepNorm, Admin, ReZero, ...). 'depthlab COMMAND --help' "
    "describes each command."
)

# Each command is a module with ``add_parser(subparsers)`` (which sets ``run(args) -> int``).
COMMANDS = (explain, probe, coord, train, study, report, transfer, forecast, reproduce)


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line on stderr and exit code 2."""

    def error(self, message):
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="depthlab", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except (ConfigError, InputError) as e:
        sys.stderr.write(f"depthlab {args.command}: error: {e}\n")
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
            f"depthlab {args.command}: failed: {type(e).__name__}: {e} (DEPTHLAB_DEBUG=1 for a traceback)\n"
        )
        return 1
