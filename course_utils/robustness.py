"""Rerun each asserted claim over seeds and nearby settings: python -m course_utils.robustness [options].

    python -m course_utils.robustness                      # every registered claim, its own seeds (default 0-5)
    python -m course_utils.robustness --claims C05,C45     # some claims
    python -m course_utils.robustness --notebooks 04_pre_vs_post_ln --seeds 10
    python -m course_utils.robustness --list               # what is registered, and whether its report is current
    python -m course_utils.robustness --summary            # rewrite benchmarks/ROBUSTNESS.md from the JSON reports

After a run, benchmarks/ROBUSTNESS.md and the "Robustness:" sentence at the end of each claim's row in CLAIMS.md are
rewritten from the JSON reports (tests/test_evidence.py checks that the ledger says what the reports say).

Each claim's experiment is registered next to the panels of its notebook (`course_utils.evidence.claim_experiment`);
this command imports every demos module of the course manifest, runs the experiments and writes one JSON report per
claim (data/robustness/Cnn.json) and the summary table benchmarks/ROBUSTNESS.md. A run that raises is recorded
as an error (it counts as disagreeing), never hides the others. The report is what the notebooks and CLAIMS.md quote.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import re
import sys
import time
import traceback
from pathlib import Path

from .evidence import (EXPERIMENTS, REPORT_DIR, ClaimExperiment, agreement, figure_span, fingerprint,
                       load_report, run_stamp, seed_independent)

ROOT = Path(__file__).resolve().parent.parent
SUMMARY = ROOT / "benchmarks" / "ROBUSTNESS.md"
LEDGER = ROOT / "CLAIMS.md"
_SENTENCE = re.compile(r" Robustness: [^|]*?\(\[report\]\(data/robustness/(C\d{2,3})\.json\)\)\.")
_ROW = re.compile(r"^\|\s*(C\d{2,3})\s*\|(.*?)\|\s*`?(\d\d_[a-z_0-9]+)`?\s*\|(.*?)\|(.*?)\|\s*$")


@dataclasses.dataclass(frozen=True)
class LedgerRow:
    """One row of CLAIMS.md: | claim id | claim (source) | notebook | verdict | measured here, and the caveat |."""
    claim: str
    text: str
    notebook: str
    verdict: str
    measured: str
    line: str


def ledger_rows(text: str | None = None) -> list[LedgerRow]:
    """The claim rows of CLAIMS.md (or of `text`), in order; the one parser of the ledger."""
    text = LEDGER.read_text(encoding="utf-8") if text is None else text
    return [LedgerRow(m[1], m[2].strip(), m[3], m[4].strip(), m[5].strip(), line)
            for line in text.splitlines() if (m := _ROW.match(line))]


def load_experiments() -> dict[str, ClaimExperiment]:
    """Import every notebook's demos module (course manifest), so their @claim_experiment functions are known."""
    from .course import NOTEBOOKS
    for nb in NOTEBOOKS:
        if nb.demos_module:
            importlib.import_module(nb.demos_module)
    for experiment in EXPERIMENTS.values():
        # read every source the fingerprint covers now, as imported (evidence keeps what it read): inspect reads
        # files from disk, and a file edited during a run is not the code the run ran
        fingerprint(experiment)
    return dict(sorted(EXPERIMENTS.items()))


def is_current(experiment: ClaimExperiment) -> bool:
    report = load_report(experiment.claim)
    return report is not None and report.get("fingerprint") == fingerprint(experiment)


def run_claim(experiment: ClaimExperiment, seeds=None, progress=None) -> dict:
    """Run one claim's experiment at each of its settings and seeds; the report as a dict (not yet written)."""
    from . import setup
    from .course import lesson_functions

    seeds = tuple(experiment.seeds if seeds is None else seeds)
    lessons = lesson_functions(experiment.notebook) if experiment.lessons else None
    started = time.perf_counter()
    settings = []
    for setting in experiment.settings:
        runs = []
        for seed in seeds:
            setup(seed)  # every run starts as a notebook does: seeded, one torch thread
            t0 = time.perf_counter()
            try:
                out = experiment.run(seed, setting, lessons)
                run = {"seed": seed, "holds": out.holds, "figure": out.figure, "detail": out.detail}
            except Exception as exc:  # recorded, so one failure never hides the other runs
                run = {"seed": seed, "holds": not setting.expect, "figure": float("nan"),
                       "detail": f"error: {type(exc).__name__}: {exc}",
                       "traceback": traceback.format_exc(limit=4)}
            run["seconds"] = round(time.perf_counter() - t0, 3)
            runs.append(run)
            if progress:
                progress(experiment.claim, setting.label, run)
        settings.append({"label": setting.label, "params": setting.params, "expect": setting.expect,
                         "fixed": setting.fixed, "runs": runs})
    return {"claim": experiment.claim, "notebook": experiment.notebook, "statement": experiment.statement,
            "figure": experiment.figure, "kind": experiment.kind,
            "fingerprint": fingerprint(experiment),
            "experiment": f"{experiment.function.__module__}.{experiment.function.__qualname__}",
            "seeds": list(seeds), "settings": settings, **run_stamp(),
            "seconds": round(time.perf_counter() - started, 2)}


def ledger_sentence(report: dict) -> str:
    """The sentence a claim's CLAIMS.md row ends with: how many runs agree, over which seeds and settings."""
    agreed, total = agreement(report)
    seeds, n = report["seeds"], len(report["settings"])
    controls = sum(not s["expect"] for s in report["settings"])
    plural = "s" * (controls != 1)
    where = f"{n} setting{'s' * (n != 1)}" + (f" ({controls} control{plural} or limit{plural})" if controls else "")
    fixed = sum(bool(s.get("fixed")) for s in report["settings"])
    once = sum(seed_independent(s["runs"]) for s in report["settings"] if not s.get("fixed"))
    notes = ([f"{fixed} not counted (cannot fail, or recorded, not claimed)"] if fixed else []) + \
        ([f"{once} the same at every seed, counted once"] if once else [])
    where += f"; {', '.join(notes)}" if notes else ""
    return (f" Robustness: {agreed} of {total} runs agree with the notebook, seeds {seeds[0]}-{seeds[-1]} at {where} "
            f"([report](data/robustness/{report['claim']}.json)).")


def update_ledger(text: str, reports: dict[str, dict]) -> str:
    """CLAIMS.md with each reported claim's row ending in its current robustness sentence (others untouched)."""
    out = []
    for line in text.splitlines(keepends=True):
        m = _ROW.match(line.rstrip("\n"))
        if m and m.group(1) in reports:
            body = _SENTENCE.sub("", line.rstrip("\n").rstrip())
            assert body.endswith("|"), line
            text = body[:-1].rstrip()
            line = text + ("" if text.endswith(".") else ".") + ledger_sentence(reports[m.group(1)]) + " |\n"
        out.append(line)
    return "".join(out)


def write_report(report: dict) -> None:
    REPORT_DIR.mkdir(parents=True, exist_ok=True)
    path = REPORT_DIR / f"{report['claim']}.json"
    path.write_text(json.dumps(report, indent=1, allow_nan=True) + "\n", encoding="utf-8")


def summary_markdown(experiments: dict[str, ClaimExperiment]) -> str:
    """The table of every claim's report: per setting, how many seeds held, and the figure's spread."""
    lines = ["# Robustness of the course's claims", "",
             "Written by `python -m course_utils.robustness`; do not edit by hand. Each asserted claim's experiment "
             "(registered with `course_utils.evidence.claim_experiment` in its notebook's demos module) rerun over "
             "seeds and nearby settings. **Stated** says whether the notebook states the claim holds at that setting "
             "(`holds`) or that it does not (`control / limit`); **held** counts the seeds where it held; a row "
             "agrees when every seed matches what is stated. A setting that cannot fail (an identity) is not counted; "
             "one whose every seed gave the same figure did not depend on the seed and is counted once. The JSON "
             "file of each claim has every run.", "",
             "| claim | notebook | setting | stated | held | figure (min to max) | agrees |",
             "|---|---|---|---|---|---|---|"]
    missing, stale = [], []
    for cid, exp in experiments.items():
        report = load_report(cid)
        if report is None:
            missing.append(cid)
            continue
        if report.get("fingerprint") != fingerprint(exp):
            stale.append(cid)
        for s in report["settings"]:
            held = sum(r["holds"] for r in s["runs"])
            agrees = all(r["holds"] == s["expect"] for r in s["runs"])
            stated = "holds" if s["expect"] else "control / limit"
            if s.get("fixed"):
                agreed_text = f"not counted: {s['fixed']}"
            elif seed_independent(s["runs"]):
                agreed_text = ("yes" if agrees else "**no**") + " (same at every seed: counted once)"
            else:
                agreed_text = "yes" if agrees else "**no**"
            lines.append(f"| {cid} | {report['notebook']} | {s['label']} | {stated} | {held}/{len(s['runs'])} | "
                         f"{figure_span([r['figure'] for r in s['runs']])[0] or '-'} | {agreed_text} |")
    lines += ["", "Figures:", ""]
    for cid, exp in experiments.items():
        report = load_report(cid)
        if report:
            agreed, total = agreement(report)
            lines.append(f"- **{cid}** ({report['run_at'][:10]}, {report['seconds']:.0f} s, {agreed}/{total} runs "
                         f"agree): {report['statement']} *Figure:* {report['figure']}.")
    if missing or stale:
        lines += ["", f"Not yet run: {', '.join(missing) or 'none'}. Stale (code changed since): "
                      f"{', '.join(stale) or 'none'}."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_utils.robustness", description=__doc__.split("\n")[0])
    parser.add_argument("--claims", help="comma-separated claim ids, e.g. C05,C45 (default: every registered claim)")
    parser.add_argument("--notebooks", help="comma-separated notebook ids, e.g. 04_pre_vs_post_ln")
    parser.add_argument("--seeds", type=int, help="run seeds 0..N-1 instead of each claim's own seeds")
    parser.add_argument("--stale", action="store_true", help="only claims whose report is missing or out of date")
    parser.add_argument("--list", action="store_true", help="list the registered claims and their reports; run none")
    parser.add_argument("--summary", action="store_true",
                        help="run nothing; rewrite benchmarks/ROBUSTNESS.md and CLAIMS.md's robustness sentences")
    parser.add_argument("--dry-run", action="store_true", help="run, print, but write no report")
    args = parser.parse_args(argv)

    experiments = load_experiments()
    chosen = dict(experiments)
    if args.claims:
        wanted = [c.strip() for c in args.claims.split(",") if c.strip()]
        unknown = [c for c in wanted if c not in experiments]
        if unknown:
            parser.error(f"no experiment registered for {', '.join(unknown)}; registered: {', '.join(experiments)}")
        chosen = {c: experiments[c] for c in wanted}
    if args.notebooks:
        from .course import notebook
        wanted = [n.strip() for n in args.notebooks.split(",") if n.strip()]
        for n in wanted:
            try:
                notebook(n)
            except ValueError as exc:
                parser.error(str(exc))
        chosen = {c: e for c, e in chosen.items() if e.notebook in wanted}
    if args.stale:
        chosen = {c: e for c, e in chosen.items() if not is_current(e)}
    if args.seeds is not None and args.seeds < 1:
        parser.error("--seeds must be at least 1")

    if args.list:
        for cid, exp in experiments.items():
            report = load_report(cid)
            state = "no report" if report is None else ("current" if is_current(exp) else "STALE")
            agreed = "" if report is None else " %d/%d agree" % agreement(report)
            print(f"{cid}  {exp.notebook:28s} {len(exp.settings)} settings x {len(exp.seeds)} seeds  {state}{agreed}")
        return 0
    if not args.summary:
        seeds = None if args.seeds is None else range(args.seeds)

        def progress(cid, label, run):
            mark = "ok " if run["holds"] else "NOT"
            print(f"  {cid} {label:34s} seed {run['seed']:2d}: {mark} figure {run['figure']:.4g}  "
                  f"({run['seconds']:.1f} s) {run['detail'][:70]}", flush=True)

        disagreeing = []
        for cid, exp in chosen.items():
            print(f"{cid} ({exp.notebook}): {exp.statement}", flush=True)
            report = run_claim(exp, seeds, progress)
            agreed, total = agreement(report)
            print(f"{cid}: {agreed}/{total} runs agree with the notebook, {report['seconds']:.1f} s", flush=True)
            if agreed < total:
                disagreeing.append(cid)
            if not args.dry_run:
                write_report(report)
        if disagreeing:
            print(f"claims where some run disagrees with what the notebook states: {', '.join(disagreeing)}")
    if not args.dry_run:
        SUMMARY.write_text(summary_markdown(experiments), encoding="utf-8")
        reports = {cid: r for cid in experiments if (r := load_report(cid)) is not None}
        if LEDGER.is_file():
            LEDGER.write_text(update_ledger(LEDGER.read_text(encoding="utf-8"), reports), encoding="utf-8")
        print(f"wrote {SUMMARY.relative_to(ROOT)} and the robustness sentences of "
              f"{LEDGER.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
