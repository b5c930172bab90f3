"""What a curious learner does with a notebook's panels, done by a test: `explore()` after each cell.

tests/test_explore.py runs every notebook with a call to `explore()` after each code cell. It finds the panels that
cell built (panel.LIVE) and, for each, moves every control across its whole range one at a time, leaves them all at
the far end of their range, and on a training panel presses Train with those settings, presses it again while it
runs, and presses Stop; the learner's (stopped) run is then that panel's `result`. The rest of the notebook must still
run and still prove what it says: claim cells read the notebook's own runs (`TrainingDemo.default()`, or a plain
function's result), never what a control or a button left behind.
"""
from __future__ import annotations

import time
import weakref

from .panel import LIVE, Panel, TrainingDemo, _range_of

__all__ = ["explore", "far_end"]

_SEEN: "weakref.WeakSet[Panel]" = weakref.WeakSet()
RUN_FOR_S = 0.5  # a learner's run goes this long before Stop: long enough to start training and draw
JOIN_S = 300.0  # a stopped run ends at its next check; a step never takes this long


def far_end(panel: Panel, points: int = 3) -> dict:
    """Each control at the last of its representative values (the top of a slider, the last option)."""
    return {name: _range_of(control, points)[-1] for name, control in panel.controls.items()}


def _move(panel: Panel, points: int) -> int:
    """Move each control over its range, one at a time, as a learner's hand does (each move refreshes the panel)."""
    moves = 0
    for name, control in panel.controls.items():
        for value in _range_of(control, points):
            control.value = value
            moves += 1
    for name, value in far_end(panel, points).items():
        panel.controls[name].value = value
    return moves


def _train_and_stop(panel: TrainingDemo) -> str:
    panel.button.click()  # Train, at the far-end settings
    panel.button.click()  # pressed twice: refused while the first run goes
    time.sleep(RUN_FOR_S)
    panel.runner.stop()
    panel.runner.join(JOIN_S)
    if panel.runner.running:
        raise RuntimeError(f"a stopped run of {type(panel).__name__} was still going after {JOIN_S:.0f} s")
    return "trained and stopped" if panel.last_error is None else f"refused ({panel.last_error})"


def explore(points: int = 3) -> list[str]:
    """Do with every panel built since the last call what a learner would (see the module doc); one line each."""
    done = []
    for ref in list(LIVE):
        panel = ref()
        if panel is None or panel in _SEEN:
            continue
        _SEEN.add(panel)
        moves = _move(panel, points)
        what = f"{type(panel).__name__}: {moves} moves, left at {far_end(panel, points)}"
        if isinstance(panel, TrainingDemo):
            what += "; " + _train_and_stop(panel)
        done.append(what)
    return done
