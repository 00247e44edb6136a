"""A study's summary: per train setting, a wrapping x depth table of outcomes, as text and as HTML."""

from __future__ import annotations

from depthlab.display import esc, table, text_colour
from depthlab.report.data import StudyData
from depthlab.report.grouping import COLOURS, cells, column_text


def summary_table(data: StudyData) -> str:
    """One block per panel: rows = wrappings, columns = depths (or learning rates), cells "outcome loss"
    (with "k/n" when seeds disagree). Returns the text, without a trailing newline."""
    lay = data.layout
    table = cells(data.runs, lay)
    first = max([len("wrapping")] + [len(r) for r in lay.rows])
    texts = {
        key: f"{c.state} {c.val_loss:.2f}" if c.val_loss is not None else c.state for key, c in table.items()
    }
    for key, c in table.items():
        if len(c.counts) > 1:
            texts[key] += f" ({c.counts[c.state]}/{c.n})"
    heads = [column_text(lay, c) for c in lay.columns]
    width = max([len(h) for h in heads] + [len(t) for t in texts.values()] + [4])
    lines = []
    for panel in lay.panels:
        lines.append(panel)
        head = "".join(f"  {h:<{width}}" for h in heads)
        lines.append(f"  {'wrapping':<{first}}{head}".rstrip())
        for row in lay.rows:
            vals = "".join(f"  {texts.get((panel, row, c), '-'):<{width}}" for c in lay.columns)
            lines.append(f"  {row:<{first}}{vals}".rstrip())
        lines.append("")
    return "\n".join(lines).rstrip()


def outcome_tables(data: StudyData) -> list[str]:
    """The outcome map in HTML: per setting, wrappings down, depths (or learning rates) across, each cell coloured by
    its state and labelled with its final validation loss (and "k/n state" when seeds disagree)."""
    lay, found = data.layout, cells(data.runs, data.layout)
    out = []
    for panel in lay.panels:
        rows = []
        for row in lay.rows:
            line = [esc(row)]
            for col in lay.columns:
                cell = found.get((panel, row, col))
                if cell is None:
                    line.append("")
                    continue
                colour = COLOURS.get(cell.state, "#ffffff")
                text = esc(f"{cell.state} {cell.label()}").replace("\n", "<br>")
                line.append(
                    f'<span style="display:block;background:{colour};color:{text_colour(colour)};padding:0 0.3em">{text}</span>'
                )
            rows.append(line)
        out.append(
            f"<p><b>{esc(panel)}</b></p>"
            + table(["wrapping", *(column_text(lay, c) for c in lay.columns)], rows)
        )
    return out
