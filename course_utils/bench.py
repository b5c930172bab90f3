"""The course's benchmark report: python -m course_utils.bench [--only notebooks,panels,grading,norms] [--out FILE].

Measures each notebook's top-to-bottom run time (executed in a fresh kernel, as nbval does), the median latency of every
registered widget handler over its default range, the batch grader's throughput and the norm benchmark (the cost
model's micro-experiment, forward, a compiled pair, forward + backward, a whole block, a size sweep); prints a Markdown
table and writes it to benchmarks/REPORT.md. Timings are medians of repeats on whatever machine runs this: compare
ratios measured in one run, not numbers from different machines.
"""
from __future__ import annotations

import argparse
import importlib
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"course_total_s": 300.0}  # each notebook's run time and handler targets are in the course manifest


def load_panels() -> dict:
    """Import every notebook's demos module (course manifest) so their @register_panel factories are known."""
    from .course import NOTEBOOKS
    from .panel import PANELS
    for nb in NOTEBOOKS:
        if nb.demos_module:
            importlib.import_module(nb.demos_module)
    return PANELS


def time_panels(repeats: int = 3) -> list[dict]:
    """Median, 90th percentile and worst latency of each panel's update over its sweep, repeated, on one torch
    thread as the notebooks run (course_utils.setup)."""
    from . import setup
    from .course import notebook as manifest_entry
    from .panel import build_panel

    setup()  # the notebooks' seed and torch thread count, set where every notebook sets them

    rows = []
    for name, (notebook, _factory) in sorted(load_panels().items(), key=lambda kv: (kv[1][0], kv[0])):
        started = time.perf_counter()
        panel = build_panel(name)
        build_s = time.perf_counter() - started
        settings = panel.sweep()
        times, errors = [], 0
        for _ in range(repeats):
            for values in settings:
                t0 = time.perf_counter()
                ok = panel.set(**values)
                times.append((time.perf_counter() - t0) * 1e3)
                errors += not ok
        times.sort()
        target = manifest_entry(notebook).handler_ms
        median = statistics.median(times)
        rows.append({"notebook": notebook, "panel": name, "settings": len(settings), "build_s": build_s,
                     "median_ms": median, "p90_ms": times[int(0.9 * (len(times) - 1))], "max_ms": times[-1],
                     "messages": errors, "target_ms": target, "ok": median <= target})
    return rows


def time_quiz_widgets(repeats: int = 3) -> list[dict]:
    """The same figures for the quiz widgets notebook 07 shows: the Check of every item of a quiz with scored items,
    answered right, and the model-answer button of every open item, over the quizzes the manifest gives it."""
    from .course import notebook as manifest_entry
    from .demos.review import reveal_button
    from .quiz import load_quiz

    def check(view, q):
        controls = view.controls[q.id]
        controls.input.value = (q.answer if q.kind == "choice" else str(q.answer) if q.kind == "numeric"
                                else "My answer.")
        controls.check.click()

    review = manifest_entry("07_review")
    rows = []
    for name in review.quizzes:
        quiz = load_quiz(name)
        view = quiz.show() if any(q.scored for q in quiz.questions) else None  # open-only quizzes show buttons
        buttons = [reveal_button(q.ref) for q in quiz.questions if not q.scored]
        checks = [lambda q=q: check(view, q) for q in quiz.questions] if view is not None else []
        handlers = {f"quiz {name}: Check": checks,
                    f"quiz {name}: model answer": [lambda b=b: setattr(b.toggle, "value", not b.toggle.value)
                                                   for b in buttons]}
        for label, actions in handlers.items():
            if not actions:
                continue
            times = []
            for _ in range(repeats):
                for action in actions:
                    t0 = time.perf_counter()
                    action()
                    times.append((time.perf_counter() - t0) * 1e3)
            times.sort()
            median = statistics.median(times)
            rows.append({"notebook": review.id, "panel": label, "settings": len(actions), "build_s": 0.0,
                         "median_ms": median, "p90_ms": times[int(0.9 * (len(times) - 1))], "max_ms": times[-1],
                         "messages": 0, "target_ms": review.handler_ms, "ok": median <= review.handler_ms})
    return rows


def time_notebooks(names: list[str] | None = None, timeout: int = 600) -> list[dict]:
    """Run each notebook top to bottom in a fresh kernel (nbclient), timing the whole run."""
    import nbformat
    from nbclient import NotebookClient

    from .course import NOTEBOOKS
    from .course import notebook as manifest_entry

    rows = []
    for entry in [manifest_entry(n) for n in names] if names else NOTEBOOKS:  # an unknown name: a ValueError
        path = entry.path
        nb = nbformat.read(path, as_version=4)
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}})
        started = time.perf_counter()
        error = ""
        try:
            client.execute()
        except Exception as exc:  # reported in the table, the other notebooks still run
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
        seconds = time.perf_counter() - started
        budget = entry.budget_s
        rows.append({"notebook": path.stem, "seconds": seconds, "budget_s": budget, "error": error,
                     "ok": not error and seconds <= budget})
    return rows


def time_grading(students: int = 500) -> dict | None:
    """The batch grader on a generated class of `students` x 9 notebooks, one repeat (benchmarks/bench_grading.py;
    run that script itself for the full figures: repeats, 10,000 small submissions and every hostile kind)."""
    script = ROOT / "benchmarks" / "bench_grading.py"
    if not script.exists():
        return None
    out = subprocess.run([sys.executable, str(script), "--students", str(students), "--small", "0",
                          "--hostile-students", "0", "--repeats", "1"], capture_output=True, text=True, cwd=ROOT)
    return {"output": (out.stdout + out.stderr).strip(), "ok": out.returncode == 0}


def time_norms() -> str | None:
    """The norm benchmark's report (course_utils.normbench.report: the notebook's runs plus a compiled pair and a
    64 MiB size), as the tables it prints, on the notebooks' one torch thread (course_utils.setup)."""
    from . import setup

    setup()
    try:
        normbench = importlib.import_module(f"{__package__}.normbench")
    except ImportError:
        return None
    return normbench.report()


def render(panels, notebooks, grading, norms) -> str:
    """The report as Markdown."""
    import torch
    lines = ["# Benchmark report", "",
             f"Machine: {platform.machine()}, {torch.get_num_threads()} torch threads, Python "
             f"{platform.python_version()}, torch {torch.__version__}. Generated by "
             "`python -m course_utils.bench`.", ""]
    if notebooks:
        total = sum(r["seconds"] for r in notebooks)
        lines += ["## Notebook run times (top to bottom, fresh kernel)", "",
                  "| notebook | seconds | budget (s) | within budget |", "|---|---:|---:|---|"]
        lines += [f"| {r['notebook']} | {r['seconds']:.1f} | {r['budget_s']} | "
                  f"{'yes' if r['ok'] else 'NO ' + r['error']} |" for r in notebooks]
        lines += ["", f"Whole course: {total:.0f} s (target {TARGETS['course_total_s']:.0f} s): "
                  f"{'within target' if total <= TARGETS['course_total_s'] else 'OVER TARGET'}.", ""]
    if panels:
        lines += ["## Widget handler latency (each control over its default range, 3 repeats)", "",
                  "| notebook | panel | settings | median ms | p90 ms | max ms | target ms | ok |",
                  "|---|---|---:|---:|---:|---:|---:|---|"]
        lines += [f"| {r['notebook']} | {r['panel']} | {r['settings']} | {r['median_ms']:.1f} | {r['p90_ms']:.1f} | "
                  f"{r['max_ms']:.1f} | {r['target_ms']:.0f} | {'yes' if r['ok'] else 'NO'} |" for r in panels]
        lines.append("")
    if grading:
        lines += ["## Batch grading", "", "```", grading["output"], "```", ""]
    if norms:
        lines += ["## Norm speed (CPU, one thread; `python -m course_utils.normbench` and notebook 05 §4)", "",
                  "```", norms, "```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from .course import notebook as manifest_entry

    parser = argparse.ArgumentParser(prog="python -m course_utils.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="notebooks,panels,grading,norms",
                        help="comma-separated parts to run (default: all)")
    parser.add_argument("--notebooks", nargs="*", help="notebook names (stems) to time; default all")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "REPORT.md", help="where to write the table")
    args = parser.parse_args(argv)
    parts = {p.strip() for p in args.only.split(",")}
    try:
        for name in args.notebooks or ():
            manifest_entry(name)
    except ValueError as exc:  # before any timing starts
        parser.error(str(exc))
    unknown = parts - {"notebooks", "panels", "grading", "norms"}
    if unknown:
        parser.error(f"unknown part(s) {sorted(unknown)}; choose from notebooks, panels, grading, norms")
    panels = time_panels() + time_quiz_widgets() if "panels" in parts else []
    notebooks = time_notebooks(args.notebooks) if "notebooks" in parts else []
    grading = time_grading() if "grading" in parts else None
    norms = time_norms() if "norms" in parts else None
    text = render(panels, notebooks, grading, norms)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n", encoding="utf-8")
    failed = [r for r in panels + notebooks if not r["ok"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
