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
code, of every course function and class it reaches, and of its settings, so a test fails when any of that changed
and the report was not rerun.

`kind` says what sort of number the figure is, and so how closely a rerun on another CPU must reproduce it (KINDS):
an exact count, a float computed on seeded data, a float32 round-off size, a training outcome, or a time. The
verdict (`holds`) must be reproduced everywhere, whatever the kind.

A setting that cannot fail (an identity, a definition checked against itself), or one recorded but not claimed (the
claim holds there at some seeds only), says why in `fixed`; its runs are reported but not counted among the runs that
agree. A setting whose runs all give the same figure, verdict and detail
did not depend on the seed: it is counted once, not once a seed.
"""
from __future__ import annotations

import datetime
import functools
import hashlib
import inspect
import json
import math
import platform
import sys
from dataclasses import dataclass, field
from typing import Callable

from .course import lesson_parameters, notebook_of_module
from .resources import course_folder

__all__ = ["Setting", "Outcome", "ClaimExperiment", "claim_experiment", "EXPERIMENTS", "DEFAULT_SEEDS", "KINDS",
           "REPORT_DIR", "load_report", "quote", "Evidence", "fingerprint", "agreement", "figure_span", "same_figure",
           "seed_independent"]

REPORT_DIR = course_folder("data") / "robustness"  # shipped with the course, so every copy's notebooks can quote it
DEFAULT_SEEDS = tuple(range(6))  # the notebook's seed 0 and five others

# What sort of number a figure is -> how closely a rerun on another CPU (other kernels, other round-off) reproduces it:
# (relative tolerance, absolute tolerance), or None where only the verdict is reproduced. Measured with PyTorch's
# portable kernels (ATEN_CPU_CAPABILITY=default) against the AVX-512 ones: see tests/test_evidence.py.
KINDS: dict[str, tuple[float, float] | None] = {
    "exact": (1e-9, 1e-12),      # a count, a shape, a float64 or integer computation
    "float": (1e-3, 1e-6),       # float32 arithmetic on seeded data: kernels change the last bits, not the figure
    "roundoff": None,            # a float32 round-off size (1e-7..1e-5): its digits are the kernel's; its order is not
    "training": (0.25, 0.02),    # a figure after many optimiser steps: round-off compounds, the outcome does not
    "timed": None,               # a measured time or a ratio of times: differs from run to run and machine to machine
}
ROUNDOFF_FACTOR = 30.0  # a round-off size reproduces within this factor (its order of magnitude, give or take)


@dataclass(frozen=True)
class Setting:
    """One setting an experiment is run at: a label for the report, its keyword arguments, and whether the claim as
    stated should hold there (False marks a control or the setting where the notebook says the claim stops)."""
    label: str
    params: dict = field(default_factory=dict)
    expect: bool = True
    fixed: str | None = None  # why this setting is not counted (it cannot fail, or is recorded, not claimed)


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
    kind: str = "float"  # what sort of number the figure is (KINDS): how closely a rerun must reproduce it

    @property
    def timed(self) -> bool:
        """The figure is a timing: a rerun must reproduce the verdict, not the figure."""
        return self.kind == "timed"

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


def _course_objects(code, namespace: dict, seen: set, found: dict) -> None:
    """Every course function and class that `code` (and the code objects inside it) names, followed recursively."""
    import types

    # `demo.verdict`, `norms.rms_norm`: a name can also be an attribute of a course module the code's namespace holds
    modules = [m for m in namespace.values() if isinstance(m, types.ModuleType) and m.__name__.startswith(__package__)]
    stack = [code]
    while stack:
        c = stack.pop()
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
        for name in c.co_names:
            for obj in [namespace.get(name)] + [getattr(m, name, None) for m in modules]:
                _follow(obj, seen, found)


def _follow(obj, seen: set, found: dict) -> None:
    import types

    obj = getattr(obj, "__wrapped__", obj)
    if isinstance(obj, (types.FunctionType, type)) and obj.__module__.startswith(__package__ + "."):
        key = (obj.__module__, obj.__qualname__)
        if key in seen:
            return
        seen.add(key)
        try:
            found[key] = _source(obj)
        except (OSError, TypeError):
            return
        namespace = sys.modules[obj.__module__].__dict__
        if isinstance(obj, type):
            for member in vars(obj).values():
                member = getattr(member, "__func__", member)
                if isinstance(member, property):
                    member = member.fget
                if isinstance(member, types.FunctionType):
                    _course_objects(member.__code__, namespace, seen, found)
        else:
            _course_objects(obj.__code__, {**namespace, **_closure(obj)}, seen, found)
            for default in (obj.__defaults__ or ()) + tuple((obj.__kwdefaults__ or {}).values()):
                _follow(default, seen, found)


def _reached_sources(experiment: ClaimExperiment) -> dict[tuple[str, str], str]:
    """(module, qualname) -> source of every course function and class the experiment reaches."""
    found: dict[tuple[str, str], str] = {}
    _follow(experiment.function, set(), found)
    return found


@functools.lru_cache(maxsize=None)
def _source(obj) -> str:
    return inspect.getsource(obj)


def reached(experiment: ClaimExperiment) -> list[str]:
    """"module.qualname" of every course function and class the experiment reaches: what its fingerprint covers."""
    return sorted(".".join(key) for key in _reached_sources(experiment))


def _closure(fn) -> dict:
    """The values a nested function closes over, by name (its cell variables)."""
    names = fn.__code__.co_freevars
    return {n: c.cell_contents for n, c in zip(names, fn.__closure__ or ()) if _filled(c)}


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def fingerprint(experiment: ClaimExperiment) -> str:
    """A short hash of the experiment's source, of every course function and class it reaches (so a change to a
    helper it calls makes its report stale), of its settings, seeds and kind: a report with another is stale."""
    found = [f"{key}\n{source}" for key, source in _reached_sources(experiment).items()]
    if not found:  # a function defined outside the package (the tests' fakes): its own source
        found.append(inspect.getsource(experiment.function))
    if experiment.lessons:  # the notebook's own lesson cells are code the experiment runs too
        from .course import lesson_sources, notebook
        found += lesson_sources(notebook(experiment.notebook).path)
    text = "\n".join(sorted(found)) + repr([(s.label, sorted(s.params.items()), s.expect, s.fixed)
                                              for s in experiment.settings]) + repr(experiment.seeds)
    text += "" if experiment.kind == "float" else repr(experiment.kind)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def same_figure(kind: str, new: float, recorded: float) -> bool:
    """Does a rerun's figure reproduce the recorded one, for a figure of this kind (KINDS)?"""
    if KINDS[kind] is None and kind != "roundoff":
        return True
    if math.isnan(new) or math.isnan(recorded):
        return math.isnan(new) and math.isnan(recorded)
    if math.isinf(new) or math.isinf(recorded) or new == recorded:
        return new == recorded
    if kind == "roundoff":
        if new <= 0 or recorded <= 0:
            return abs(new - recorded) <= 1e-6
        return 1 / ROUNDOFF_FACTOR <= new / recorded <= ROUNDOFF_FACTOR
    rel, abs_ = KINDS[kind]
    return abs(new - recorded) <= max(rel * abs(recorded), abs_)


def claim_experiment(claim: str, *, statement: str, figure: str, settings: list[Setting] | None = None,
                     seeds=DEFAULT_SEEDS, timed: bool = False, kind: str | None = None):
    """Register `fn(seed, *, <setting>)` -> Outcome as the experiment behind ledger row `claim` (see the module doc).

    `kind` says what sort of number the figure is (KINDS; default "float"). `timed=True` is kind "timed": a measured
    time or a ratio of times varies from run to run and machine to machine, so a rerun is checked for the same
    verdict only, and the verdict must be one any machine reaches."""
    kind = kind or ("timed" if timed else "float")
    if kind not in KINDS:
        raise ValueError(f"{claim}: kind {kind!r} is not one of {sorted(KINDS)}")

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
            lessons=tuple(n for n in lesson_parameters(fn) if n != "seed"), kind=kind)
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


def seed_independent(runs: list[dict]) -> bool:
    """Every run of a setting gave the same verdict, figure and detail: the seed did not enter (counted once)."""
    first = runs[0]
    return len(runs) > 1 and all(r["holds"] == first["holds"] and r["detail"] == first["detail"] and
                                 (r["figure"] == first["figure"] or (math.isnan(r["figure"]) and
                                                                    math.isnan(first["figure"]))) for r in runs)


def counted_runs(setting: dict) -> list[dict]:
    """The runs of a report's setting that count towards agreement: none for a setting that cannot fail, one for a
    seed-independent one, else all."""
    runs = setting["runs"]
    if setting.get("fixed"):
        return []
    return runs[:1] if seed_independent(runs) else runs


def agreement(report: dict) -> tuple[int, int]:
    """(runs that could disagree and agree with what the notebook states, all such runs): a setting that cannot
    fail counts none, a seed-independent one counts once."""
    runs = [(r["holds"], s["expect"]) for s in report["settings"] for r in counted_runs(s)]
    return sum(h == e for h, e in runs), len(runs)


class Evidence:
    """A claim's robustness report as a notebook shows it: one line, with the full report folded beneath it.

    `str()` (what `print` writes) is the line; in JupyterLab `display(quote("C17"))` shows the line with the report
    in a fold that opens on a click; `.text` is the full report."""

    def __init__(self, claim: str, line: str, text: str):
        self.claim, self.line, self.text = claim, line, text

    def __repr__(self) -> str:  # str() and IPython's plain-text display fall back to it
        return self.line

    def _repr_html_(self) -> str:
        from html import escape
        return (f'<details class="course-evidence"><summary style="cursor: pointer">{escape(self.line)}</summary>'
                f'<pre style="white-space: pre-wrap; margin: 0.3em 0 0 1.2em">{escape(self.text)}</pre></details>')


def _report_text(claim: str, report: dict) -> str:
    seeds = report["seeds"]
    lines = [f"{claim}: {report['statement']}",
             f"Rerun over seeds {seeds[0]}-{seeds[-1]} (data/robustness/{claim}.json, {report['run_at'][:10]}); "
             f"figure: {report['figure']}."]
    for s in report["settings"]:
        runs = s["runs"]
        held = sum(r["holds"] for r in runs)
        seeds_word = "seeds"
        if seed_independent(runs):
            runs, held, seeds_word = runs[:1], int(runs[0]["holds"]), "runs (the same at every seed)"
        if s.get("fixed"):
            verdict = f"not counted ({s['fixed']}): the check held at {held} of {len(runs)} {seeds_word}"
        elif s["expect"]:
            verdict = f"the claim holds at {held} of {len(runs)} {seeds_word}"
        else:
            verdict = (f"the claim fails here, as the notebook says it should, at {len(runs) - held} of {len(runs)} "
                       f"{seeds_word}")
        span, not_finite = figure_span([r["figure"] for r in runs])
        if span is None:
            figure = "; no finite figure (see each run's detail in the report)"
        else:
            figure = f"; figure {span}" + (f" ({not_finite} not finite)" if not_finite else "")
        lines.append(f"  {s['label']}: {verdict}{figure}")
    agreed, total = agreement(report)
    lines.append(f"  {agreed} of {total} runs that could disagree agree with what the notebook states.")
    return "\n".join(lines)


def _report_line(claim: str, report: dict) -> str:
    agreed, total = agreement(report)
    seeds, settings = report["seeds"], report["settings"]
    controls = sum(not s["expect"] for s in settings)
    counted = [r["figure"] for s in settings if s["expect"] and not s.get("fixed") for r in counted_runs(s)]
    span, _ = figure_span(counted)
    where = f"seeds {seeds[0]}-{seeds[-1]} x {len(settings)} setting{'s' * (len(settings) != 1)}"
    where += f" ({controls} control{'s' * (controls != 1)})" if controls else ""
    figure = f"; {report['figure']}: {span} where it is claimed" if span else ""
    verdict = "robust" if agreed == total else "SOME RUNS DISAGREE"
    return f"{claim} {verdict}: {agreed} of {total} runs agree, {where}{figure}. Full report: click, or .text"


def quote(claim: str) -> Evidence:
    """The robustness report of one claim for a notebook: `display(quote("C17"))`, one line and the report folded."""
    report = load_report(claim)
    if report is None:
        text = (f"{claim}: no robustness report yet. Run `python -m course_utils.robustness --claims {claim}` in the "
                "course folder to make one.")
        return Evidence(claim, text, text)
    return Evidence(claim, _report_line(claim, report), _report_text(claim, report))
