"""The scale ladder's building blocks: its widths and step rule, an effect size with its registered
bounds, and a claim's ladder (its settings and the registration they make); the ladder itself is
:mod:`depthlab_lab.reproduce.ladder`."""

from __future__ import annotations

import math
from dataclasses import dataclass

from depthlab_lab.reproduce.registration import CAP_REASON, Registration, Revision

# Revisions of every claim's ladder: its effects under the revised rule (a loss above ln V counts as
# ln V), shown beside the first registration's, which decide.
CAP_KNOWN = (
    "yes for the rungs already stored (docs/reproductions-ladder.md); the first registration's effects decide"
)
LADDER_REVISIONS = (
    Revision("2026-12-01", "code.capped_runs", None, "3612fe994443090c", CAP_REASON, CAP_KNOWN),
    Revision("2026-12-01", "code.measure_capped", None, "97d09b43409eebf0", CAP_REASON, CAP_KNOWN),
)

WIDTHS = (32, 64, 128)
SEEDS = [0, 1, 2]
FIRST = WIDTHS[0]
STEP_RULE = "steps x sqrt(width / 32), rounded (warmup steps likewise): x1.41 at 64, x2 at 128"
TRAINS, FAILS = 0.05, 0.05  # the train package's stall level as a share of the unigram loss


def steps_at(steps: int, width: int) -> int:
    """The registered rule: ``steps`` of the first rung scaled to ``width`` (sqrt of the width ratio)."""
    return round(steps * math.sqrt(width / FIRST))


@dataclass(frozen=True)
class Effect:
    """One effect size of a claim: what a counted check decides on, with its registered bounds.

    ``kind``: "nats" (final loss - unigram loss of setting ``a``), "level" (final loss / unigram - 1 of
    ``a``), "gap" (final loss of ``a`` - of ``b``, paired by seed), "train_gap" ((val - final train
    loss) of ``a`` - of ``b``), "slope" (log-log slope of the trained update ratio against the layer
    index of ``a``, from the last logged step's telemetry), "sensitivity_growth" (Wortsman et al.'s LR
    sensitivity growth from the shallow to the deep curve, ``a`` minus ``b``; ``a`` and ``b`` name the
    wrappings, the curves are the settings "WRAP DL lr X"). The claim holds when the interval is at least
    ``at_least`` and at most ``at_most``. ``first_rung_only``: measured at width 32 only (the lr sweep).
    """

    name: str
    kind: str
    a: str
    b: str = ""
    at_least: float | None = None
    at_most: float | None = None
    first_rung_only: bool = False

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class LadderClaim:
    """A claim's ladder: its settings (label -> model and train overrides of the small regime, steps
    and warmup as at the first rung), its effects, the subset it runs and the registration fixing them.

    ``lr_sweep``: labels of the settings that run only at the first rung (the lr x 1/3 and x 3 runs).
    ``widths``: the claim's rungs (its first is its registered small regime's width; steps scale from it).
    """

    name: str
    settings: dict
    effects: tuple[Effect, ...]
    subset: str
    lr_sweep: tuple[str, ...] = ()
    widths: tuple[int, ...] = WIDTHS

    def settings_at(self, width: int) -> dict:
        """{label: {"model", "train"}} at ``width``: d_model set, steps and warmup scaled by the rule."""
        out, first = {}, self.widths[0]
        for label, (model, train) in self.settings.items():
            if width != first and label in self.lr_sweep:
                continue
            t = dict(train)
            for k in ("steps", "warmup"):
                if k in t:
                    t[k] = steps_at(t[k], FIRST * width // first)
            if t.get("schedule") == "noam" and "noam_lr" in t:  # Noam's peak equals the registered lr
                t["lr"] = t.pop("noam_lr") * math.sqrt(width * t["warmup"])
            out[label] = {"model": {**model, "d_model": width}, "train": t}
        return out

    def registration(self, commit: str) -> Registration:
        """The ladder's registration of this claim: its effects and its regime at every width."""
        regimes = {f"d{w}": {"settings": self.settings_at(w), "seeds": SEEDS} for w in self.widths}
        return Registration(
            commit=commit,
            expectation={"effects": [e.to_dict() for e in self.effects], "step_rule": STEP_RULE},
            regimes=regimes,
            notes=self.subset,
            revisions=LADDER_REVISIONS,
        )


def setting(wrap: str, layers: int, steps: int, lr: float = 1e-3, warmup: int = 0, **more) -> tuple:
    """One setting: (model overrides, train overrides); ``more`` goes to the model, ``t_*`` to train."""
    train = {"lr": lr, "warmup": warmup, "steps": steps}
    train.update({k[2:]: v for k, v in more.items() if k.startswith("t_")})
    model = {"wrap": wrap, "n_layers": layers, **{k: v for k, v in more.items() if not k.startswith("t_")}}
    return model, train


def trains_effect(label: str, kind: str = "nats", bound: float = -0.15) -> Effect:
    """The effect "``label`` trains": its ``kind`` at most ``bound``."""
    return Effect(f"{label}: trains", kind, label, at_most=bound)


def fails_effect(label: str, kind: str = "nats", bound: float = -0.05, sweep: bool = False) -> Effect:
    """The effect "``label`` fails": its ``kind`` at least ``bound`` (``sweep``: first rung only)."""
    return Effect(f"{label}: fails", kind, label, at_least=bound, first_rung_only=sweep)


def with_lr_sweep(settings: dict, label: str, lr: float) -> tuple[dict, tuple[str, ...]]:
    """``label`` again at lr / 3 and lr x 3 (first rung only): a setting "fails" at every lr tried."""
    model, train = settings[label]
    extra = {}
    for factor, name in ((1 / 3, "lr/3"), (3.0, "lr x3")):
        extra[f"{label}, {name}"] = (model, {**train, "lr": lr * factor})
    return extra, tuple(extra)
