"""Benchmark the batch grader on generated submissions, and compare it with grading by executing notebooks.

    python benchmarks/bench_grading.py                 # 1,000 submissions, median of 3 runs (target: under 10 s)
    python benchmarks/bench_grading.py --execute 5     # also time `jupyter nbconvert --execute` on 5 of them

Each generated submission looks like a learner's saved copy of a course notebook: markdown, lesson code that imports
torch, the chapter quiz's eight answer cells with saved outputs, and a mix of right, wrong, unanswered and malformed
answers; about 2% of the files are broken (invalid JSON, not UTF-8). The grader reads them without running anything,
so its cost is reading JSON and parsing a few cells; executing a notebook costs a kernel start and the notebook's own
run time, which the --execute comparison measures and extrapolates linearly to the whole batch.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from course_utils import grade
from course_utils.quiz import Question, load_quiz

TARGET_S = 10.0
SETUP = ("import torch\nimport torch.nn.functional as F\nfrom course_utils.quiz import answer\n\ntorch.manual_seed(0)\n"
         "x = torch.tensor([1.0, 2.0, 3.0, 4.0])")
LESSON_CODE = [
    "mu = x.mean()\nvar = x.var(correction=0)\nmu, var",
    "z = (x - x.mean()) / torch.sqrt(x.var(correction=0) + 1e-5)\ntorch.testing.assert_close(z, F.layer_norm(x, (4,)))",
    "rms = x.pow(2).mean().sqrt()\nx / rms",
    "h = torch.randn(8, 64)\nfor _ in range(10):\n    h = h + 0.5 * torch.randn(8, 64)\nh.norm(dim=-1).mean()",
]


def _cell(kind: str, source: str, outputs: list | None = None) -> dict:
    cell = {"cell_type": kind, "metadata": {}, "source": source.splitlines(keepends=True)}
    if kind == "code":
        cell |= {"execution_count": None, "outputs": outputs or []}
    return cell


def _response(rng: random.Random, q: Question) -> str:
    """The source text of one learner's response: usually right, often wrong, sometimes odd."""
    roll = rng.random()
    if roll < 0.65:
        return repr(q.answer)
    if roll < 0.88:
        wrong = [c.label for c in q.choices if c.label != q.answer] or [m.value for m in q.mistakes] or [q.answer + 1]
        return repr(rng.choice(wrong))
    return rng.choice(["...", '"5/4"', "mu", "round(3.5355, 2)", "-2.5", '" B "', "[1, 2]", "5/4"])


def make_submission(rng: random.Random, quiz_name: str = "chapter_2_4") -> str:
    """The text of one generated .ipynb file (2% of them deliberately broken)."""
    roll = rng.random()
    if roll < 0.01:
        return '{"cells": [ this is not json'
    quiz = load_quiz(quiz_name)
    cells = [_cell("markdown", "# 07 Review\n\nWhat you will learn: ..."), _cell("code", SETUP)]
    for q in quiz.questions:
        cells.append(_cell("markdown", f"## {q.id}\n\n{q.prompt}"))
        cells.append(_cell("code", rng.choice(LESSON_CODE)))
        source = f'answer("{q.ref}", {_response(rng, q)})'
        output = {"output_type": "execute_result", "execution_count": 1, "metadata": {},
                  "data": {"text/plain": "✓ Correct (1/1)", "text/html": "<div>✓ Correct (1/1)</div>" * 20}}
        cells.append(_cell("code", source, [output]))
    nb = {"cells": cells, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                      "language": "python"}}, "nbformat": 4, "nbformat_minor": 5}
    text = json.dumps(nb, indent=1, ensure_ascii=False)
    return "\udcff" + text if roll < 0.02 else text


def write_submissions(folder: Path, n: int, seed: int = 0) -> list[Path]:
    """Write n generated submissions into folder."""
    rng = random.Random(seed)
    paths = []
    for i in range(n):
        path = folder / f"student_{i:04d}.ipynb"
        path.write_bytes(make_submission(rng).encode("utf-8", errors="surrogateescape"))
        paths.append(path)
    return paths


def time_grader(folder: Path, out: Path, repeats: int) -> list[tuple[float, float]]:
    """(wall-clock, CPU) seconds of grade.main on the folder, in-process, once per repeat."""
    times = []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        with contextlib.redirect_stdout(io.StringIO()):
            code = grade.main([str(folder), "--out", str(out), "--no-progress"])
        times.append((time.perf_counter() - wall, time.process_time() - cpu))
        assert code in (grade.EXIT_OK, grade.EXIT_PROBLEMS), code
    return times


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_execution(paths: list[Path], out: Path) -> list[tuple[float, float]]:
    """(wall-clock, CPU) seconds to execute each notebook with nbconvert, as grading by execution would."""
    # CPU counts nbconvert and the kernel it starts (waited-for descendants), so it holds up on a busy machine.
    times = []
    for path in paths:
        wall, cpu = time.perf_counter(), _children_cpu()
        subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute", "--allow-errors",
                        "--output-dir", str(out), str(path)], check=True, capture_output=True)
        times.append((time.perf_counter() - wall, _children_cpu() - cpu))
    return times


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1000, help="submissions to generate (default 1000)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of the grader (default 3)")
    parser.add_argument("--execute", type=int, default=0, metavar="K",
                        help="also execute K notebooks with nbconvert and extrapolate to n (default 0: skip)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder, out = Path(tmp) / "submissions", Path(tmp) / "out"
        folder.mkdir()
        paths = write_submissions(folder, args.n)
        size = sum(p.stat().st_size for p in paths) / len(paths) / 1024
        times = time_grader(folder, out, args.repeats)
        start, start_cpu = time.perf_counter(), _children_cpu()
        subprocess.run([sys.executable, "-m", "course_utils.grade", str(folder), "--out", str(out), "--no-progress"],
                       capture_output=True, check=False)
        cli, cli_cpu = time.perf_counter() - start, _children_cpu() - start_cpu
        median = statistics.median(wall for wall, _ in times)
        cpu = statistics.median(c for _, c in times)
        print(f"submissions: {args.n} generated notebooks, {size:.0f} KiB each on average; load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (wall times stretch when it exceeds the cores)")
        print(f"grader, in-process: median {median:.2f} s wall, {cpu:.2f} s CPU over {args.repeats} runs "
              f"({1000 * median / args.n:.2f} ms per submission); wall per run: "
              f"{', '.join(f'{wall:.2f}' for wall, _ in times)}")
        print(f"grader, python -m course_utils.grade (with interpreter start-up): {cli:.2f} s wall, "
              f"{cli_cpu:.2f} s CPU")
        print(f"target under {TARGET_S:.0f} s: {'met' if cli < TARGET_S else 'MISSED'}")
        if args.execute:
            clean = [p for p in paths if p.read_bytes().startswith(b"{\n")][:args.execute]
            run = time_execution(clean, out)
            per, per_cpu = statistics.median(w for w, _ in run), statistics.median(c for _, c in run)
            print(f"executing with nbconvert: median {per:.2f} s wall, {per_cpu:.2f} s CPU per notebook over "
                  f"{len(run)} ({', '.join(f'{w:.1f}' for w, _ in run)} s wall)")
            print(f"  extrapolated to {args.n} (median x n): {per * args.n / 60:.0f} min wall serially, "
                  f"{per_cpu * args.n / 60:.0f} min CPU ({per_cpu * args.n / 120:.0f} min on 2 fully used cores); "
                  f"{per_cpu * args.n / cli_cpu:.0f}x the grader's CPU time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
