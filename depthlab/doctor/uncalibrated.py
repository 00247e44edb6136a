"""The doctor on designs it was never calibrated on: the residual topologies (hyper-connections, mHC,
Frac-connections, DenseFormer, Attention Residuals, value residuals).

Its rules (:mod:`depthlab.doctor.checks`) were fitted on single-stream stacks only (docs/doctor.md: 777
tuning runs, none with a wider or read-back state), so for these designs it gives no confident verdict:
an error becomes a warning that says it is an extrapolation, an "ok" is dropped, and one warning,
``uncalibrated-topology``, says what it was calibrated on.
"""

from __future__ import annotations

from depthlab.doctor.verdict import Verdict

CALIBRATED_ON = "single-stream stacks only (the wrappings of docs/wrappings.md)"


def cap_for_topology(r, verdicts: list[Verdict]) -> list[Verdict]:
    """``verdicts`` as they are for a single stream; for a residual topology (config["stack"]["state"]),
    at most warnings, led by the one that says so."""
    state = r.config.get("stack", {}).get("state")
    if not state:
        return verdicts
    note = Verdict(
        "warning",
        "uncalibrated-topology",
        f"the doctor was calibrated on {CALIBRATED_ON}, none with {state['design']}'s residual state "
        f"({state['state']}): its verdicts here are extrapolations; read the composite gain, the "
        "contributions and the effective depth instead (docs/topologies.md)",
    )
    capped = [
        Verdict(
            "warning", v.code, f"{v.message} (an extrapolation: not calibrated on {state['design']})", v.cause
        )
        if v.level == "error"
        else v
        for v in verdicts
        if v.level != "ok"
    ]
    return [note, *capped]
