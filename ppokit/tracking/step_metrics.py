"""What `s.step()` returns in a REPL or a notebook: the step's metrics as a dict whose repr a person can read."""

from __future__ import annotations

from ppokit.tracking.progress import format_summary


class StepMetrics(dict):
    """The step's metrics (a plain dict to every caller) whose repr is the console's step line, then each value to
    4 significant digits: `s.step()` at a prompt shows "step 3 | reward 0.62±0.31 | ..." rather than 35 unrounded
    floats. `step`: the step these metrics are of."""

    def __init__(self, metrics: dict, step: int):
        super().__init__(metrics)
        self.step = step

    def __repr__(self) -> str:
        values = ", ".join(f"{k!r}: {v:.4g}" if isinstance(v, float) else f"{k!r}: {v!r}" for k, v in self.items())
        return f"{format_summary(self.step, self)}\n{{{values}}}"

    def _repr_pretty_(self, printer, cycle: bool) -> None:  # IPython's display of a result
        printer.text(repr(self))
