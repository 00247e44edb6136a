"""Several probes side by side: one line each (bottom/top gradient ratios, stream growth, verdicts).

from depthlab.probe.compare import compare
c = compare([("post", cfg_post), ("pre", cfg_pre)], batch_size=8, seq_len=64)
print(c.format()); c.to_dict(); c.plot("compare.png")
"""

from __future__ import annotations

from dataclasses import dataclass

from depthlab.config import ModelConfig
from depthlab.paths import save_figure
from depthlab.probe.doctor import ratios
from depthlab.probe.plot import probe_figure
from depthlab.probe.result import ProbeResult, format_verdicts
from depthlab.probe.run import probe_config


@dataclass
class Comparison:
    """(label, ProbeResult) pairs, in the order they were probed."""

    runs: list[tuple[str, ProbeResult]]

    def to_dict(self) -> list[dict]:
        """A list of Probe JSON objects (each exactly ``ProbeResult.to_dict()``)."""
        return [r.to_dict() for _, r in self.runs]

    def format(self) -> str:
        """A line per probe (g0/gL, ctx0/ctxL, rmsL/rms0, verdict codes), then each probe's verdicts."""
        w = max(len(label) for label, _ in self.runs) + 2
        lines = [f"{'config':<{w}}{'g0/gL':>9}  {'ctx0/ctxL':>9}  {'rmsL/rms0':>9}  verdicts"]
        for label, r in self.runs:
            g, c, rms = (
                ratios(r.column("grad_norm")),
                ratios(r.column("context_grad_norm")),
                r.column("stream_rms"),
            )
            growth = rms[-1] / rms[0] if rms[0] else float("inf")
            codes = ", ".join(f"{v['level']} {v['code']}" for v in r.verdicts)
            lines.append(f"{label:<{w}}{_first(g):>9}  {_first(c):>9}  {growth:>9.3g}  {codes}")
        for label, r in self.runs:
            lines += ["", f"{label}:"] + ["  " + line for line in format_verdicts(r.verdicts)]
        return "\n".join(lines)

    def figure(self, title: str = ""):
        """The gradient, position-varying gradient and stream rms of every probe, by depth (a Figure)."""
        return probe_figure(self.runs, title=title)

    def plot(self, path: str, title: str = "") -> str:
        """Write :meth:`figure` to ``path`` (png, pdf or svg); returns ``path``."""
        return save_figure(self.figure(title), path)


def compare(configs: list[tuple[str, ModelConfig]], **options) -> Comparison:
    """Probe each (label, config) with :func:`depthlab.probe.run.probe_config` and the same ``options``.
    ValueError for an empty list; TypeError for anything but (label, ModelConfig) pairs."""
    if not isinstance(configs, (list, tuple)) or not all(
        isinstance(c, (list, tuple)) and len(c) == 2 for c in configs
    ):
        raise TypeError(f"configs must be a list of (label, ModelConfig) pairs, not {type(configs).__name__}")
    if not configs:
        raise ValueError("configs must hold at least one (label, ModelConfig) pair")
    return Comparison([(label, probe_config(cfg, **options)) for label, cfg in configs])


def _first(profile) -> str:
    return "-" if profile is None else f"{profile[0]:.2e}"
