"""Benchmark the batch grader through its command line, on a generated class and on hostile submissions.

    python benchmarks/bench_grading.py                          # 500 students x 9 notebooks, 10,000 small, hostile
    python benchmarks/bench_grading.py --students 100 --small 0 --hostile-students 0
    python benchmarks/bench_grading.py --generate-only          # time writing the classes, grade nothing

Every figure is the grader run as an instructor runs it, `python -m course_utils.grade FOLDER --assignment
quizzes/assignments/whole_course.toml --roster ROSTER --out DIR --no-progress`, in a subprocess: wall time, CPU time
(user + system, RUSAGE_CHILDREN) and peak memory (its ru_maxrss; with worker processes, the largest one), each the
median over --repeats runs. A small launcher starts it, so that its peak is not inflated by this script's own. The
classes come from `course_utils.quiz.demo_class`:

- the class: --students students x the course's 9 full-size notebooks, Canvas layout (target: 4,500 notebooks in
  under 30 s, peak under 500 MB);
- throughput: --small submissions of just the answer cells;
- hostile: a --hostile-students class graded with and without one hostile submission of each kind (in a folder of
  its own beside the class's), in alternating runs; the median extra wall time, CPU time and peak memory that one
  submission costs (target: each under +2 s and +200 MB).

Each graded run is checked against the generator's expectation (per question, for students submitting on time).
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from course_utils.quiz import demo_class

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENT = ROOT / "quizzes" / "assignments" / f"{demo_class.ASSIGNMENT}.toml"
TARGET_WALL_S, TARGET_PEAK_MB = 30.0, 500.0
TARGET_HOSTILE_S, TARGET_HOSTILE_MB = 2.0, 200.0


@dataclass(frozen=True)
class Run:
    """One grader run: seconds of wall and CPU time, peak resident memory in MB, exit code (None: killed)."""
    wall: float
    cpu: float
    peak_mb: float
    code: int | None


@dataclass(frozen=True)
class Measured:
    """Medians over repeated runs, and the exit codes seen."""
    wall: float
    cpu: float
    peak_mb: float
    codes: tuple[int | None, ...]

    @property
    def ok(self) -> bool:
        """The grader finished and wrote its outputs every time (exit 0, or 1: some rows have problems)."""
        return all(code in (0, 1) for code in self.codes)


# Started by a small launcher: on Linux a child inherits its parent's peak memory (ru_maxrss) across fork and exec, so
# measured straight from this script, which holds the classes, the grader's peak would be at least this script's.
_LAUNCHER = """
import json, os, resource, sys, time
null = os.open(os.devnull, os.O_WRONLY)
start = time.perf_counter()
pid = os.posix_spawn(sys.executable, [sys.executable, "-m", "course_utils.grade", *sys.argv[1:]], os.environ,
                     file_actions=[(os.POSIX_SPAWN_DUP2, null, 1), (os.POSIX_SPAWN_DUP2, null, 2)])
_, status = os.waitpid(pid, 0)
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
code = os.waitstatus_to_exitcode(status)
print(json.dumps([wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss, code if code >= 0 else None]))
"""


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_grader(submissions: list[Path], roster: Path, out: Path, timeout: float) -> Run:
    """Run the grader's command line once; a run past the timeout is killed with its process group."""
    arguments = [*map(str, submissions), "--assignment", str(ASSIGNMENT), "--roster", str(roster), "--out", str(out),
                 "--no-progress"]
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", _LAUNCHER, *arguments], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, start_new_session=True, text=True)
    killer = threading.Timer(timeout, _kill_group, (proc.pid,))
    killer.start()
    report, _ = proc.communicate()
    killer.cancel()
    if proc.returncode != 0:  # the launcher itself was killed: the run went past the timeout
        return Run(wall=time.perf_counter() - start, cpu=math.nan, peak_mb=math.nan, code=None)
    wall, cpu, peak_kib, code = json.loads(report)
    return Run(wall=wall, cpu=cpu, peak_mb=peak_kib * 1024 / 1e6, code=code)


def measure(submissions: list[Path], roster: Path, out: Path, repeats: int, timeout: float) -> Measured:
    """Medians of repeated grader runs."""
    runs = [run_grader(submissions, roster, out, timeout) for _ in range(repeats)]
    return Measured(wall=statistics.median(r.wall for r in runs), cpu=statistics.median(r.cpu for r in runs),
                    peak_mb=statistics.median(r.peak_mb for r in runs), codes=tuple(r.code for r in runs))


def check_gradebook(demo: demo_class.DemoClass, out: Path) -> str:
    """How the gradebook compares with the generator's expectation, per question, for students on time."""
    path = out / "gradebook.csv"
    if not path.is_file():
        return "no gradebook.csv written"
    with path.open(encoding="utf-8-sig", newline="") as f:
        rows = {row.get("student_id"): row for row in csv.DictReader(f)}
    wrong = missing = 0
    for sid, expected in demo.students.items():
        if expected.late:
            continue  # the late policy changes the score; that is the grader's to decide
        row = rows.get(sid)
        if row is None:
            missing += 1
            continue
        try:
            wrong += any(abs(float(row[ref] or 0) - expected.scores[ref]) > 1e-9 for ref in demo.points)
        except (KeyError, ValueError):
            return "gradebook.csv has no column per question reference; not compared"
    on_time = sum(not e.late for e in demo.students.values())
    return (f"{on_time - wrong - missing}/{on_time} on-time students graded as expected"
            + (f", {wrong} differ" if wrong else "") + (f", {missing} without a row" if missing else ""))


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _generate(folder: Path, n: int, **kwargs) -> tuple[demo_class.DemoClass, float]:
    start = time.perf_counter()
    demo = demo_class.make_class(folder, n, **kwargs)
    return demo, time.perf_counter() - start


def _hostile_costs(tmp: Path, n: int, repeats: int, timeout: float) -> None:
    """Grade an n-student class with and without each hostile kind, in alternating runs; print the extra cost."""
    demo, _ = _generate(tmp / "hostile_class", n, seed=2)
    roster, out, empty = demo.roster, tmp / "hostile_out", tmp / "hostile_none"
    empty.mkdir()
    victim = demo.path(next(iter(demo.students["s0001"].latest.values())))
    base = run_grader([demo.submissions, empty], roster, out, timeout)
    print(f"\nhostile submissions, each added alone to a {n}-student class ({demo.files} notebooks): "
          f"{base.wall:.2f} s wall, {base.peak_mb:.0f} MB peak without; {check_gradebook(demo, out)}")
    print(f"  {'kind':<18} {'+wall s':>8} {'+CPU s':>7} {'+peak MB':>9} {'exit':>6}  target (+{TARGET_HOSTILE_S:g} s, "
          f"+{TARGET_HOSTILE_MB:g} MB)")
    for kind in demo_class.HOSTILE_KINDS:
        # The kind gets a folder of its own beside the class's (the grader searches folders, zips included); runs
        # without it and with it alternate, so a change in the machine's load falls on both.
        side = tmp / f"hostile_{kind}"
        demo_class.write_hostile(side, [kind], victim=victim)
        pairs = [(run_grader([demo.submissions, empty], roster, out, timeout),
                  run_grader([demo.submissions, side], roster, out, timeout)) for _ in range(repeats)]
        dw = statistics.median(w.wall - b.wall for b, w in pairs)
        dc = statistics.median(w.cpu - b.cpu for b, w in pairs)
        dm = statistics.median(w.peak_mb - b.peak_mb for b, w in pairs)
        codes = {w.code for _, w in pairs}
        shown = ",".join("killed" if c is None else str(c) for c in sorted(codes, key=str))
        ok = codes <= {0, 1} and dw < TARGET_HOSTILE_S and dm < TARGET_HOSTILE_MB
        print(f"  {kind:<18} {dw:>+8.2f} {dc:>+7.2f} {round(dm):>+9d} {shown:>6}  {_verdict(ok)}")


def main(argv: list[str] | None = None) -> int:
    """Generate the classes, run the grader on them, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=500, help="class size, 9 full notebooks each (default 500)")
    parser.add_argument("--small", type=int, default=10_000, help="small submissions for throughput (default 10000)")
    parser.add_argument("--hostile-students", type=int, default=100,
                        help="class the hostile kinds are added to (default 100; 0 skips them)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per figure; medians are reported (default 3)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds before a run is killed (default 300)")
    parser.add_argument("--generate-only", action="store_true", help="time the generation, grade nothing")
    args = parser.parse_args(argv)
    load, cores = os.getloadavg(), os.cpu_count()
    print(f"machine: {cores} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (wall times stretch when "
          f"it exceeds the cores)")
    if not args.generate_only:
        help_text = subprocess.run([sys.executable, "-m", "course_utils.grade", "--help"], cwd=ROOT,
                                   capture_output=True, text=True).stdout
        if "--assignment" not in help_text or not ASSIGNMENT.is_file():
            print("this grader has no --assignment option or no quizzes/assignments file: nothing to benchmark")
            return 2
    with tempfile.TemporaryDirectory(prefix="bench_grading_") as name:
        tmp = Path(name)
        full, t_full = _generate(tmp / "class", args.students)
        print(f"generated: {args.students} students, {full.files} full-size notebooks ({full.bytes / 1e6:.0f} MB) "
              f"in {t_full:.1f} s")
        small = None
        if args.small:
            # About 1 in 50 files is skipped or resubmitted; enough students that at least --small are written.
            per_student = len(full.notebooks) or 1
            small, t_small = _generate(tmp / "small", math.ceil(args.small / per_student * 1.05), small=True, seed=1)
            print(f"generated: {small.files} small submissions ({small.bytes / 1e6:.0f} MB) in {t_small:.1f} s")
        if args.generate_only:
            return 0
        failures = 0
        print(f"\n{'batch':<34} {'wall s':>7} {'CPU s':>7} {'peak MB':>8} {'ms/nb':>6}  exit  checked")
        rows = [("class, full notebooks", full, tmp / "out_class")]
        if small is not None:
            rows.append(("throughput, small notebooks", small, tmp / "out_small"))
        results = {}
        for label, demo, out in rows:
            m = measure([demo.submissions], demo.roster, out, args.repeats, args.timeout)
            results[label] = m
            codes = ",".join("killed" if c is None else str(c) for c in sorted(set(m.codes), key=str))
            checked = check_gradebook(demo, out)
            failures += "differ" in checked or "without a row" in checked or "graded as expected" not in checked
            print(f"{label + f' ({demo.files})':<34} {m.wall:>7.2f} {m.cpu:>7.2f} {m.peak_mb:>8.0f} "
                  f"{1000 * m.wall / max(demo.files, 1):>6.2f}  {codes:>4}  {checked}")
        m = results["class, full notebooks"]
        scale = f" (measured on {full.files}, not 4,500)" if abs(full.files - 4500) > 250 else ""
        print(f"target: 4,500 notebooks under {TARGET_WALL_S:g} s: {_verdict(m.ok and m.wall < TARGET_WALL_S)}; "
              f"peak under {TARGET_PEAK_MB:g} MB: {_verdict(m.ok and m.peak_mb < TARGET_PEAK_MB)}{scale}")
        if args.hostile_students:
            _hostile_costs(tmp, args.hostile_students, args.repeats, args.timeout)
    load = os.getloadavg()
    print(f"\nload average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {cores} cores")
    if failures:
        print(f"{failures} batch(es) not graded as the generator expects: see the 'checked' column")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
