"""What Jupyter shows of depthlab's results: HTML pieces for the rich displays (``_repr_html_``), and
the Figure every depthlab plot is drawn on (:func:`inline_figure`).

A display is one ``<div class="depthlab">`` (:func:`block`) whose ``<style>`` rules all start with
``.depthlab``, so they style that display and nothing else in the notebook (as pandas does for its
tables). Every value that reaches the HTML as text passes through :func:`esc`; :func:`table` escapes
its header and expects cells that are HTML already (built with :func:`esc`, :func:`badge`, :func:`bar`).
"""

from __future__ import annotations

import functools
import html
import io
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# Outcome and status colours, shared by the report's figures and page and every display of a run.
STATE_COLOURS = {
    "trained": "#2e7d32",
    "undertrained": "#9ccc65",
    "stalled": "#f9a825",
    "diverged": "#c62828",
    "failed": "#616161",
    "running": "#90caf9",
    "queued": "#eeeeee",
}
# The doctor's verdict levels.
LEVEL_COLOURS = {"ok": "#2e7d32", "warning": "#f9a825", "error": "#c62828"}

STYLE = (
    "<style>"
    ".depthlab table{border-collapse:collapse;font-size:0.85em;margin:0.4em 0}"
    ".depthlab th,.depthlab td{border:1px solid #ddd;padding:0.15em 0.45em;vertical-align:top;text-align:left}"
    ".depthlab th{background:#f5f5f5}"
    ".depthlab td.num{text-align:right;font-variant-numeric:tabular-nums}"
    ".depthlab p{margin:0.2em 0}.depthlab .muted{color:#666}"
    "</style>"
)


def esc(value) -> str:
    """HTML-escape any value's text (quotes included); None becomes an empty string."""
    return html.escape("" if value is None else str(value), quote=True)


def text_colour(background: str) -> str:
    """ "white" or "black": whichever reads better on the ``#rrggbb`` colour ``background``."""
    r, g, b = (int(background.lstrip("#")[i : i + 2], 16) / 255 for i in (0, 2, 4))
    return "white" if 0.299 * r + 0.587 * g + 0.114 * b < 0.6 else "black"


def badge(text, colour: str) -> str:
    """``text`` (escaped) on a coloured rounded label."""
    return (
        f'<span style="background:{colour};color:{text_colour(colour)};padding:0 0.4em;'
        f'border-radius:3px;white-space:nowrap">{esc(text)}</span>'
    )


def state_badge(state: str) -> str:
    """A run's outcome or status as a badge in its colour (white for an unknown state)."""
    return badge(state, STATE_COLOURS.get(state, "#ffffff"))


def level_badge(level: str) -> str:
    """A verdict level (ok, warning, error) as a badge in its colour."""
    return badge(level, LEVEL_COLOURS.get(level, "#ffffff"))


def bar(fraction: float | None, width_px: int = 120, colour: str = "#1565c0") -> str:
    """A horizontal bar ``fraction`` (0..1) of ``width_px`` long; an empty string for None."""
    if fraction is None:
        return ""
    px = max(1, round(width_px * min(1.0, max(0.0, fraction))))
    return f'<span style="display:inline-block;width:{px}px;height:0.75em;background:{colour}"></span>'


def table(head: list[str], rows: list[list[str]], num: set[int] = frozenset()) -> str:
    """An HTML table: ``head`` is escaped here, cells must already be HTML; columns in ``num`` are
    right-aligned numbers. Returns the ``<table>`` element as a string."""
    out = ["<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>"]
    for row in rows:
        cells = "".join(
            f'<td class="num">{c}</td>' if i in num else f"<td>{c}</td>" for i, c in enumerate(row)
        )
        out.append(f"<tr>{cells}</tr>")
    return "\n".join(out + ["</table>"])


def block(title: str, *parts: str) -> str:
    """A whole display: its style, a bold ``title`` (escaped) and the HTML ``parts``, in one ``<div>``."""
    return f'<div class="depthlab">{STYLE}<p><b>{esc(title)}</b></p>{"".join(parts)}</div>'


def para(text: str, muted: bool = False) -> str:
    """One paragraph of plain ``text`` (escaped); ``muted`` prints it grey."""
    return f'<p class="muted">{esc(text)}</p>' if muted else f"<p>{esc(text)}</p>"


def inline_figure(**kwargs) -> Figure:
    """A new ``matplotlib.figure.Figure`` (``kwargs`` are its own) that a notebook shows as a PNG when a
    cell returns it: an instance of :data:`InlineFigure`.

    depthlab draws with matplotlib's object API and never imports pyplot, so importing it chooses no
    backend; but without pyplot, Jupyter has no way to show a plain Figure (its inline display is set
    up by pyplot's backend). ``_repr_png_`` renders this one itself, the way the inline backend would.
    matplotlib is imported here, when the first figure is drawn, so that ``import depthlab`` does not
    pay for it.
    """
    return _inline_figure_class()(**kwargs)


@functools.cache
def _inline_figure_class() -> type:
    """The Figure subclass with ``_repr_png_``, made once, on the first call (it imports matplotlib)."""
    from matplotlib.figure import Figure

    class InlineFigure(Figure):
        def _repr_png_(self) -> bytes:
            buf = io.BytesIO()
            self.savefig(buf, format="png", bbox_inches="tight")
            return buf.getvalue()

    # named as the module attribute below, so that a pickled figure finds its class again
    InlineFigure.__module__, InlineFigure.__qualname__ = __name__, "InlineFigure"
    return InlineFigure


def __getattr__(name: str):
    """``depthlab.display.InlineFigure``, the class of :func:`inline_figure`'s figures (for isinstance),
    made when first asked for: matplotlib is not imported before then."""
    if name == "InlineFigure":
        return _inline_figure_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
