"""Claim experiments: each asserted claim's experiment as a function of a seed and a setting, and its committed report.

A demos module registers the experiment behind a ledger row (CLAIMS.md) with `@claim_experiment`:

    @claim_experiment("C45", statement="Post-LN without warmup stays at chance; with warmup, and Pre-LN, it learns",
                      figure="Post-LN final loss / ln 15",
                      settings=[Setting("depth 4, lr 1e-2", {"n_layers": 4, "lr": 1e-2}),
                                Setting("lr 3e-3 (control)", {"n_layers": 4, "lr": 3e-3}, expect=False)])
    def race_outcome(seed, *, n_layers=4, lr=1e-2):
        ...
        return Outcome(holds=..., figure=..., detail="...")

`seed` is the run's seed; the keyword parameters are the setting. Parameters without a default are lesson functions,
filled from the notebook's cells tagged `lesson`, as `build_panel` does. A `Setting` says whether the claim, as the
notebook states it, should hold there (`expect=True`) or is stated *not* to hold there (`expect=False`: a control, or
the setting where the notebook says the claim stops). A run *agrees* when its `holds` equals the setting's `expect`.

`python -m course_utils.robustness` runs every registered experiment over its seeds and settings and writes one JSON
file per claim under data/robustness/ plus the summary benchmarks/ROBUSTNESS.md. Notebooks and CLAIMS.md quote
that report (`quote("C45")`) and never type a count by hand. Each report records a fingerprint of the experiment's
code and settings, so a test fails when the code changed and the report was not rerun.
"""
from __future__ import annotations

import datetime
import hashlib
import inspect
import json
import math
import platform
from dataclasses import dataclass, field
from typing import Callable

from .course import lesson_parameters, notebook_of_module
from .resources import course_folder

__all__ = ["Setting", "Outcome", "ClaimExperiment", "claim_experiment", "EXPERIMENTS", "DEFAULT_SEEDS",
           "REPORT_DIR", "load_report", "quote", "fingerprint", "agreement", "figure_span"]

REPORT_DIR = course_folder("data") / "robustness"  # shipped with the course, so every copy's notebooks can quote it
DEFAULT_SEEDS = tuple(range(6))  # the notebook's seed 0 and five others


@dataclass(frozen=True)
class Setting:
    """One setting an experiment is run at: a label for the report, its keyword arguments, and whether the claim as
    stated should hold there (False marks a control or the setting where the notebook says the claim stops)."""
    label: str
    params: dict = field(default_factory=dict)
    expect: bool = True


@dataclass(frozen=True)
class Outcome:
    """What one run found: did the claim hold, the figure it rests on, and a short free-text detail."""
    holds: bool
    figure: float
    detail: str = ""

    @classmethod
    def of_checks(cls, checks: dict[str, bool], figure: float, detail: str = "") -> "Outcome":
        """Holds when every named check does; the detail says "all hold" or names the checks that failed."""
        failed = [name for name, ok in checks.items() if not ok]
        verdict = "all hold" if not failed else "failed: " + ", ".join(failed)
        return cls(not failed, figure, f"{detail}; {verdict}" if detail else verdict)

    def __post_init__(self):
        if not isinstance(self.holds, bool):
            object.__setattr__(self, "holds", bool(self.holds))
        object.__setattr__(self, "figure", float(self.figure))


@dataclass(frozen=True)
class ClaimExperiment:
    claim: str
    notebook: str
    statement: str
    figure: str
    settings: tuple[Setting, ...]
    seeds: tuple[int, ...]
    function: Callable
    lessons: tuple[str, ...]
    timed: bool = False  # the figure is a timing: a rerun must reproduce the verdict, not the figure

    def run(self, seed: int, setting: Setting, lessons: dict | None = None) -> Outcome:
        """One run; lesson functions come from `lessons` or, if None, from the notebook's lesson cells."""
        if self.lessons and lessons is None:
            from .course import lesson_functions
            lessons = lesson_functions(self.notebook)
        kwargs = {name: lessons[name] for name in self.lessons} if self.lessons else {}
        outcome = self.function(seed=seed, **kwargs, **setting.params)
        if not isinstance(outcome, Outcome):
            raise TypeError(f"{self.claim}: {self.function.__name__} must return an Outcome, got {type(outcome)}")
        return outcome


EXPERIMENTS: dict[str, ClaimExperiment] = {}


def fingerprint(experiment: ClaimExperiment) -> str:
    """A short hash of the experiment function's source, its settings and seeds: a report with another is stale."""
    text = inspect.getsource(experiment.function) + repr([(s.label, sorted(s.params.items()), s.expect)
                                                          for s in experiment.settings]) + repr(experiment.seeds)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def claim_experiment(claim: str, *, statement: str, figure: str, settings: list[Setting] | None = None,
                     seeds=DEFAULT_SEEDS, timed: bool = False):
    """Register `fn(seed, *, <setting>)` -> Outcome as the experiment behind ledger row `claim` (see the module doc).

    `timed=True` says the figure is a measured time or a ratio of times: it varies from run to run and machine to
    machine, so a rerun is checked for the same verdict only, and the verdict must be one any machine reaches."""
    def register(fn):
        if claim in EXPERIMENTS and EXPERIMENTS[claim].function.__qualname__ != fn.__qualname__:
            raise ValueError(f"claim {claim} already has an experiment ({EXPERIMENTS[claim].function.__qualname__})")
        params = inspect.signature(fn).parameters
        if "seed" not in params:
            raise TypeError(f"{fn.__qualname__}: a claim experiment takes `seed`")
        chosen = tuple(settings) if settings else (Setting("default"),)
        for s in chosen:
            unknown = set(s.params) - set(params)
            if unknown:
                raise TypeError(f"{claim} setting {s.label!r}: {fn.__qualname__} has no parameter {sorted(unknown)}")
        EXPERIMENTS[claim] = ClaimExperiment(
            claim=claim, notebook=notebook_of_module(fn.__module__), statement=statement, figure=figure,
            settings=chosen, seeds=tuple(seeds), function=fn,
            lessons=tuple(n for n in lesson_parameters(fn) if n != "seed"), timed=timed)
        return fn
    return register


def run_stamp() -> dict[str, str]:
    """When (UTC) and on what a stored result was made: the "run_at" and "machine" of a report or a stored sweep."""
    import torch
    return {"run_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": f"{platform.machine()}, torch {torch.__version__}, Python {platform.python_version()}"}


def load_report(claim: str) -> dict | None:
    """The committed report of one claim (data/robustness/<claim>.json), or None if it was never run."""
    path = REPORT_DIR / f"{claim}.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def figure_span(values: list[float]) -> tuple[str | None, int]:
    """The finite figures' range as text ("0.5" or "0.1 to 0.9"; None if none is finite), and how many are not."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return None, len(values)
    lo, hi = min(finite), max(finite)
    return (f"{lo:.3g}" if lo == hi else f"{lo:.3g} to {hi:.3g}"), len(values) - len(finite)


def agreement(report: dict) -> tuple[int, int]:
    """(runs that agree with what the notebook states, all runs)."""
    runs = [(r["holds"], s["expect"]) for s in report["settings"] for r in s["runs"]]
    return sum(h == e for h, e in runs), len(runs)


def quote(claim: str) -> str:
    """The robustness report of one claim in a few lines, for a notebook to print (never typed by hand)."""
    report = load_report(claim)
    if report is None:
        return (f"{claim}: no robustness report yet. Run `python -m course_utils.robustness --claims {claim}` in the "
                "course folder to make one.")
    seeds = report["seeds"]
    lines = [f"{claim}: {report['statement']}",
             f"Rerun over seeds {seeds[0]}-{seeds[-1]} (data/robustness/{claim}.json, {report['run_at'][:10]}); "
             f"figure: {report['figure']}."]
    for s in report["settings"]:
        runs = s["runs"]
        held = sum(r["holds"] for r in runs)
        if s["expect"]:
            verdict = f"the claim holds at {held} of {len(runs)} seeds"
        else:
            verdict = (f"the claim fails here, as the notebook says it should, at {len(runs) - held} of {len(runs)} "
                       "seeds")
        span, not_finite = figure_span([r["figure"] for r in runs])
        if span is None:
            figure = "; no finite figure (see each run's detail in the report)"
        else:
            figure = f"; figure {span}" + (f" ({not_finite} not finite)" if not_finite else "")
        lines.append(f"  {s['label']}: {verdict}{figure}")
    agreed, total = agreement(report)
    lines.append(f"  {agreed} of {total} runs agree with what the notebook states.")
    return "\n".join(lines)
