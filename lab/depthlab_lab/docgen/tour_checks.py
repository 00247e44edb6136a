"""The tour's prose, checked against the outputs it sits beside.

Every figure or trend that the prose of :mod:`depthlab_lab.docgen.tour_text` states about a command's output
is a :class:`ProseCheck`: the section, which of its commands, the statement, and a function of that
command's standard output that says whether the output bears it out. ``depthlab reproduce tour`` refuses
to write a tour whose prose an output contradicts, and lab/tests/test_tour.py checks the committed one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ProseCheck:
    """``statement`` (in section ``section``, about its command number ``command``) holds if ``holds(stdout)``."""

    section: int
    command: int
    statement: str
    holds: Callable[[str], bool]


def compare_row(stdout: str, label: str) -> dict[str, float]:
    """The numbers of ``probe --compare``'s summary row ``label``: g0/gL, ctx0/ctxL, rmsL/rms0 (absent: -),
    under its columns g0_gL, ctx0_ctxL and rms_growth."""
    for line in stdout.splitlines():
        parts = line.split()
        if parts and parts[0] == label and len(parts) >= 4:
            return {k: _num(v) for k, v in zip(("g0/gL", "ctx0/ctxL", "rmsL/rms0"), parts[1:4])}
    raise ValueError(f"no row {label!r} in the output")


def scaling_slope(stdout: str, stack: str, quantity: str) -> float:
    """The fitted slope of ``quantity`` for ``stack`` in ``reproduce init-scaling``'s table."""
    for line in stdout.splitlines():
        if line.startswith(f"{stack:18}{quantity:12}"):
            return float(line.split()[-1])
    raise ValueError(f"no {stack} {quantity} row in the output")


def growth_factor(stdout: str) -> float:
    """The stream growth the ``stream-growth`` verdict prints: the x factor after 'grows from a to b'."""
    m = re.search(r"stream rms grows from \S+(?: after the first block)? to \S+ \(x([0-9.e+]+)\)", stdout)
    if m is None:
        raise ValueError("no stream-growth verdict in the output")
    return float(m.group(1))


def params_line(stdout: str) -> tuple[int, int]:
    """(one FFN's weights, one self-attention's weights) from ``explain``'s params line."""
    m = re.search(r"one FFN ([\d,]+) weights\s+one self-attention ([\d,]+) weights", stdout)
    if m is None:
        raise ValueError("no params line in the output")
    return int(m.group(1).replace(",", "")), int(m.group(2).replace(",", ""))


def _num(text: str) -> float:
    return float("nan") if text == "-" else float(text)


def _first_word(stdout: str) -> str:
    return stdout.strip().split()[0].rstrip(":") if stdout.strip() else ""


def _agreeing(stdout: str) -> int:
    """The N of a reproduction's 'N of M agree' line."""
    return int(re.search(r"(\d+) of \d+ agree", stdout).group(1))


def _mismatch_rows(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.rstrip().endswith("MISMATCH")]


PROSE_CHECKS = (
    ProseCheck(1, 1, "one BERT-base FFN has 4,718,592 weights", lambda o: params_line(o)[0] == 4_718_592),
    ProseCheck(
        1, 1, "more than the whole attention sublayer", lambda o: params_line(o)[0] > params_line(o)[1]
    ),
    ProseCheck(2, 0, "2.24e-11 without skips, 2.50e+02 with", lambda o: "2.24e-11" in o and "2.50e+02" in o),
    ProseCheck(
        2, 0, "0.5^32 = 2e-10", lambda o: any("0.5^32" in ln and "2.33e-10" in ln for ln in o.splitlines())
    ),
    ProseCheck(
        2,
        0,
        "the stacks article's toy loses orders of magnitude without the +",
        lambda o: float(re.search(r"\((\d+\.\d) orders\)", o).group(1)) >= 2,
    ),
    ProseCheck(
        2,
        0,
        "three qualitative statements are MISMATCH rows: small factor, arrives intact, nearly doubled",
        lambda o: (
            [r.split(":")[0].strip() for r in _mismatch_rows(o)]
            == ["interview answer", "stacks article", "stream chapter"]
            and any("small factor" in r for r in _mismatch_rows(o))
            and any("arrives intact" in r for r in _mismatch_rows(o))
            and any("nearly doubled" in r for r in _mismatch_rows(o))
        ),
    ),
    ProseCheck(
        3,
        0,
        "with both skips the bottom gets more gradient than the top (g0/gL > 1)",
        lambda o: compare_row(o, "no-residual=none")["g0/gL"] > 1,
    ),
    ProseCheck(
        3,
        0,
        "without the attention skip ctx0/ctxL is far below 1e-3",
        lambda o: compare_row(o, "no-residual=attn")["ctx0/ctxL"] < 1e-3,
    ),
    ProseCheck(
        3,
        0,
        "the doctor reports vanishing-gradient without the attention skip",
        lambda o: "error vanishing-gradient" in o,
    ),
    ProseCheck(
        4,
        0,
        "the norm rows are sanity checks that hold; the one counted check is inconclusive with one seed",
        lambda o: (
            sum(ln.rstrip().endswith("agree (sanity)") for ln in o.splitlines()) >= 6
            and "0 of 1 agree (1 inconclusive)" in o
        ),
    ),
    ProseCheck(
        4,
        1,
        "without a norm the stream rms climbs far faster than with one",
        lambda o: (
            compare_row(o, "norm=none")["rmsL/rms0"] > 100 * compare_row(o, "norm=layernorm")["rmsL/rms0"]
        ),
    ),
    ProseCheck(
        5,
        1,
        "post-LN's last-layer gradient is flat in L (|slope| <= 0.15)",
        lambda o: abs(scaling_slope(o, "post", "last_grad")) <= 0.15,
    ),
    ProseCheck(
        5,
        1,
        "pre-LN's last-layer gradient falls like L^-1/2 (slope -0.5 +- 0.15)",
        lambda o: abs(scaling_slope(o, "pre", "last_grad") + 0.5) <= 0.15,
    ),
    ProseCheck(
        5,
        1,
        "one seed with --quick: its results are inconclusive",
        lambda o: _agreeing(o) == 0 and "MISMATCH" not in o,
    ),
    ProseCheck(5, 2, "post-LN without warmup stalls", lambda o: _first_word(o) == "stalled"),
    ProseCheck(5, 3, "post-LN with warmup trains", lambda o: _first_word(o) == "trained"),
    ProseCheck(5, 4, "pre-LN without warmup trains", lambda o: _first_word(o) == "trained"),
    ProseCheck(
        6,
        0,
        "the 96-layer stack grows by less than 9.85 at initialisation",
        lambda o: growth_factor(o) < 97**0.5,
    ),
    ProseCheck(6, 0, "missing-final-norm is reported", lambda o: "missing-final-norm" in o),
    ProseCheck(7, 0, "alpha 3.36 and beta 0.210 at M = 64", lambda o: "alpha=3.36" in o and "beta=0.21" in o),
    ProseCheck(
        7, 1, "pre-LN's stream rms climbs with depth", lambda o: compare_row(o, "wrap=pre")["rmsL/rms0"] > 5
    ),
    ProseCheck(
        7,
        1,
        "DeepNorm's stream stays at unit scale and its gradient is level (near 1)",
        lambda o: (
            0.8 <= compare_row(o, "wrap=deepnorm")["rmsL/rms0"] <= 1.25
            and 0.5 <= compare_row(o, "wrap=deepnorm")["g0/gL"] <= 2
        ),
    ),
)


def contradicted(outputs: dict[tuple[int, int], str]) -> list[str]:
    """The statements an output does not bear out (or that could not be read from it); ``outputs`` maps
    (section number, command index) to that command's standard output."""
    bad = []
    for c in PROSE_CHECKS:
        try:
            ok = c.holds(outputs[(c.section, c.command)])
        except (KeyError, ValueError, AttributeError, IndexError) as e:
            ok, why = False, f" (could not read it: {type(e).__name__}: {e})"
        else:
            why = ""
        if not ok:
            bad.append(f"section {c.section}, command {c.command}: {c.statement}{why}")
    return bad
