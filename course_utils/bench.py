"""The course's benchmark report: python -m course_utils.bench [--only notebooks,panels,grading,norms] [--out FILE].

Measures each notebook's top-to-bottom run time (executed in a fresh kernel, as nbval does), the median latency of every
registered widget handler over its default range, the batch grader's throughput and the norm benchmark's headline
ratios; prints a Markdown table and writes it to benchmarks/REPORT.md. Timings are medians of repeats on whatever
machine runs this: compare ratios measured in one run, not numbers from different machines.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"course_total_s": 300.0, "handler_ms": 50.0, "handler_ms_08": 100.0}
NOTEBOOK_BUDGET_S = {"00_start_here": 30, "01_why_normalize": 30, "02_batchnorm_and_padding": 30,
                     "03_layernorm": 30, "04_pre_vs_post_ln": 90, "05_rmsnorm": 60,
                     "06_qk_norm_and_softcapping": 60, "07_review": 30, "08_real_model": 60}


def load_panels() -> dict:
    """Import every module in course_utils.demos so their @register_panel factories are known."""
    from . import demos
    from .panel import PANELS
    for info in pkgutil.iter_modules(demos.__path__):
        importlib.import_module(f"{demos.__name__}.{info.name}")
    return PANELS


def time_panels(repeats: int = 3) -> list[dict]:
    """Median, 90th percentile and worst latency of each panel's update over its sweep, repeated, on one torch
    thread as the notebooks run (course_utils.setup)."""
    import torch
    torch.set_num_threads(1)
    rows = []
    for name, (notebook, factory) in sorted(load_panels().items(), key=lambda kv: (kv[1][0], kv[0])):
        started = time.perf_counter()
        panel = factory()
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
        target = TARGETS["handler_ms_08" if notebook.startswith("08") else "handler_ms"]
        median = statistics.median(times)
        rows.append({"notebook": notebook, "panel": name, "settings": len(settings), "build_s": build_s,
                     "median_ms": median, "p90_ms": times[int(0.9 * (len(times) - 1))], "max_ms": times[-1],
                     "messages": errors, "target_ms": target, "ok": median <= target})
    return rows


def time_notebooks(names: list[str] | None = None, timeout: int = 600) -> list[dict]:
    """Run each notebook top to bottom in a fresh kernel (nbclient), timing the whole run."""
    import nbformat
    from nbclient import NotebookClient

    rows = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        if names and path.stem not in names:
            continue
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
        budget = NOTEBOOK_BUDGET_S.get(path.stem)
        rows.append({"notebook": path.stem, "seconds": seconds, "budget_s": budget, "error": error,
                     "ok": not error and (budget is None or seconds <= budget)})
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
    """The norm benchmark's default run (course_utils.normbench), as the table it prints."""
    try:
        normbench = importlib.import_module(f"{__package__}.normbench")
    except ImportError:
        return None
    return normbench.report()


def render(panels, notebooks, grading, norms) -> str:
    """The report as Markdown."""
    import torch
    lines = [f"# Benchmark report", "",
             f"Machine: {platform.machine()}, {torch.get_num_threads()} torch threads, Python "
             f"{platform.python_version()}, torch {torch.__version__}. Generated by `python -m course_utils.bench`.", ""]
    if notebooks:
        total = sum(r["seconds"] for r in notebooks)
        lines += ["## Notebook run times (top to bottom, fresh kernel)", "",
                  "| notebook | seconds | budget (s) | within budget |", "|---|---:|---:|---|"]
        lines += [f"| {r['notebook']} | {r['seconds']:.1f} | {r['budget_s'] or '-'} | "
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
        lines += ["## Norm speed (CPU)", "", "```", norms, "```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_utils.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="notebooks,panels,grading,norms",
                        help="comma-separated parts to run (default: all)")
    parser.add_argument("--notebooks", nargs="*", help="notebook names (stems) to time; default all")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "REPORT.md", help="where to write the table")
    args = parser.parse_args(argv)
    parts = {p.strip() for p in args.only.split(",")}
    unknown = parts - {"notebooks", "panels", "grading", "norms"}
    if unknown:
        parser.error(f"unknown part(s) {sorted(unknown)}; choose from notebooks, panels, grading, norms")
    panels = time_panels() if "panels" in parts else []
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
