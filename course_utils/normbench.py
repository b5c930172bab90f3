"""The norm speed benchmark of notebook 05: LayerNorm vs RMSNorm on this CPU, each set against a plain copy.

    python -m course_utils.normbench            # the notebook's default run (a few seconds)
    python -m course_utils.normbench --long     # more widths and repeats, plus torch.compile'd versions (minutes)

Every variant is timed on the same (rows, d) float32 tensor of 2**20 elements (4 MiB in, 4 MiB out), reshaped to each
width d. Variants take turns inside each repeat, so a noisy neighbour slows them alike; each time is the median over
repeats after a warm-up, and each RMSNorm-vs-LayerNorm ratio is computed repeat by repeat and reported as median and
interquartile range. It runs at the process's torch thread count (course_utils.setup sets it: one thread, in the
notebooks and on the command line); with one thread the clock is the timing thread's own CPU time (time.thread_time),
which leaves out the moments a busy machine hands the core to someone else; wall-clock medians are kept beside it.
The hand-written LayerNorm and RMSNorm are notebook 05's own, read from its `lesson` cells.

A norm must read every element and write every output once, the same bytes as a copy, so a copy's speed is the limit
a norm can only approach. Where the tensors fit in the last-level cache (the table says), that limit is the cache's
bandwidth rather than main memory's.

Fresh memory costs a page fault per 4 KiB page, which can take longer than the norm itself; glibc hands large freed
blocks back to the OS, so an op with several temporaries (a hand-written norm) would keep paying it. keep_freed_memory()
asks glibc to keep freed memory for reuse instead, so the table measures the kernels; it reports page faults per call so
you can check.
"""
from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from . import setup
from .course import lesson_functions

__all__ = ["Variant", "BenchResult", "keep_freed_memory", "last_level_cache_bytes", "default_variants",
           "lesson_variants", "PAIRS", "run", "settings", "report", "WIDTHS", "LONG_WIDTHS", "ELEMENTS",
           "PAPER_SAVING", "CHAPTER_SAVING", "main"]

ELEMENTS = 2 ** 20
WIDTHS = (128, 512, 2048)
LONG_WIDTHS = (64, 128, 256, 512, 1024, 2048, 4096, 8192)
# Zhang & Sennrich 2019 (arXiv 1910.07467), RMSNorm vs LayerNorm running time on GPU across their tables.
PAPER_SAVING = (0.069, 0.408)
CHAPTER_SAVING = (0.10, 0.40)  # the chapter's "10-40%"


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to reuse freed blocks instead of returning them to the OS (lasts for this process).

    Returns False where that is not possible (not Linux/glibc); the benchmark still runs, page faults included.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_mmap_threshold, 32 * 2 ** 20)) and bool(libc.mallopt(m_trim_threshold, 2 ** 30))
    except (OSError, AttributeError):
        return False


def last_level_cache_bytes() -> int | None:
    """Size of CPU 0's largest cache, from Linux's /sys; None elsewhere."""
    sizes = {}
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level = int((index / "level").read_text())
            text = (index / "size").read_text().strip().upper()
            unit = {"K": 2 ** 10, "M": 2 ** 20}.get(text[-1], 1)
            sizes[level] = int(text.rstrip("KM")) * unit
        except (OSError, ValueError):
            continue
    return sizes[max(sizes)] if sizes else None


def _minor_faults() -> int:
    """Page faults of this thread so far (-1 where the OS does not say)."""
    try:
        import resource
        return resource.getrusage(getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)).ru_minflt
    except (ImportError, OSError):
        return -1


@dataclass(frozen=True)
class Variant:
    """One timed function fn(x, weight, bias) -> y; family is "copy", "layer" or "rms"; style says how it is built."""
    name: str
    family: str
    style: str
    fn: Callable[[Tensor, Tensor, Tensor], Tensor]


def default_variants(layer_norm: Callable, rms_norm: Callable, compiled: bool = False) -> list[Variant]:
    """Copy, PyTorch's own ops (with and without γ/β), the hand-written layer_norm(x, weight, bias, eps) and
    rms_norm(x, weight, eps) notebook 05 writes and, with compiled, torch.compile'd versions of those."""
    ln, rms = layer_norm, rms_norm
    variants = [
        Variant("copy (x.clone())", "copy", "copy", lambda x, w, b: x.clone()),
        Variant("F.layer_norm", "layer", "PyTorch op", lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, 1e-5)),
        Variant("F.rms_norm", "rms", "PyTorch op", lambda x, w, b: F.rms_norm(x, x.shape[-1:], w, 1e-5)),
        Variant("F.layer_norm, no γ/β", "layer", "PyTorch op, no γ/β",
                lambda x, w, b: F.layer_norm(x, x.shape[-1:], None, None, 1e-5)),
        Variant("F.rms_norm, no γ", "rms", "PyTorch op, no γ/β",
                lambda x, w, b: F.rms_norm(x, x.shape[-1:], None, 1e-5)),
        Variant("LayerNorm by hand", "layer", "by hand", lambda x, w, b: ln(x, w, b, 1e-5)),
        Variant("RMSNorm by hand", "rms", "by hand", lambda x, w, b: rms(x, w, 1e-5)),
    ]
    if compiled:
        ln_c = torch.compile(lambda x, w, b: ln(x, w, b, 1e-5), dynamic=False)
        rms_c = torch.compile(lambda x, w, b: rms(x, w, 1e-5), dynamic=False)
        variants += [Variant("LayerNorm by hand, compiled", "layer", "compiled", ln_c),
                     Variant("RMSNorm by hand, compiled", "rms", "compiled", rms_c)]
    return variants


# (label, LayerNorm variant, RMSNorm variant, is it a fair comparison and why)
PAIRS = [
    ("PyTorch ops", "F.layer_norm", "F.rms_norm",
     "unfair: one fused LayerNorm kernel vs RMSNorm run as several separate ops"),
    ("PyTorch ops, no γ/β", "F.layer_norm, no γ/β", "F.rms_norm, no γ",
     "unfair, and LayerNorm's no-affine path is oddly slow on this build"),
    ("by hand", "LayerNorm by hand", "RMSNorm by hand", "fair: the same elementary ops, RMSNorm has fewer"),
    ("compiled", "LayerNorm by hand, compiled", "RMSNorm by hand, compiled", "fair: both fused by the compiler"),
]


def settings(long: bool = False) -> dict:
    """run()'s arguments for the default run (a few seconds) or the long one (more widths and repeats, compiled)."""
    if long:
        return dict(widths=LONG_WIDTHS, repeats=41, number=10)
    return dict(widths=WIDTHS, repeats=15, number=5)


def _quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile)."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


@dataclass
class BenchResult:
    """Per-call times (seconds) of every variant at every width, one entry per repeat; compile times if any."""
    widths: tuple[int, ...]
    elements: int
    threads: int
    repeats: int
    number: int
    variants: list[str]
    clock: str = "thread CPU time"
    times: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    wall: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    faults: dict[tuple[str, int], float] = field(default_factory=dict)
    memory_kept: bool = False
    cache_bytes: int | None = None
    compile_s: dict[tuple[str, int], float] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0

    def has(self, variant: str) -> bool:
        return any((variant, d) in self.times for d in self.widths)

    def median_s(self, variant: str, d: int) -> float:
        """Median seconds per call."""
        return statistics.median(self.times[(variant, d)])

    def gbps(self, variant: str, d: int) -> float:
        """Achieved bandwidth, counting the bytes any norm must move: read x once, write y once."""
        return 2 * self.elements * 4 / self.median_s(variant, d) / 1e9

    def saving(self, ln: str, rms: str, d: int) -> tuple[float, float, float]:
        """Time saved by RMSNorm, 1 - t_rms / t_ln, per repeat: (first quartile, median, third quartile)."""
        per_repeat = [1 - r / l for l, r in zip(self.times[(ln, d)], self.times[(rms, d)])]
        return _quartiles(per_repeat)

    def pairs(self) -> list[tuple[str, str, str, str]]:
        """The entries of PAIRS whose two variants were both timed."""
        return [p for p in PAIRS if self.has(p[1]) and self.has(p[2])]

    def records(self) -> list[dict]:
        """One row per (variant, width): name, d, rows, median µs, quartiles µs, GB/s, time relative to the copy."""
        out = []
        for d in self.widths:
            copy = self.median_s("copy (x.clone())", d) if ("copy (x.clone())", d) in self.times else float("nan")
            for v in self.variants:
                if (v, d) not in self.times:
                    continue
                q1, med, q3 = _quartiles(self.times[(v, d)])
                out.append(dict(variant=v, d=d, rows=self.elements // d, median_us=med * 1e6, q1_us=q1 * 1e6,
                                q3_us=q3 * 1e6, wall_us=statistics.median(self.wall[(v, d)]) * 1e6,
                                faults=self.faults.get((v, d), float("nan")),
                                gbps=self.gbps(v, d), vs_copy=med / copy))
        return out

    def table(self) -> str:
        """The timing table and the RMSNorm savings table, as plain text."""
        mib = self.elements * 4 / 2 ** 20
        cache = ("" if self.cache_bytes is None else
                 f"; last-level cache {self.cache_bytes / 2 ** 20:.0f} MiB, so input + output "
                 + ("fit in it: the copy measures cache bandwidth" if 2 * mib * 2 ** 20 <= self.cache_bytes
                    else "exceed it: the copy measures memory bandwidth"))
        lines = [f"{self.elements:,} float32 elements per tensor ({mib:g} MiB){cache}",
                 f"{self.threads} thread(s), median of {self.repeats} repeats x {self.number} calls after warm-up, "
                 f"clock: {self.clock}; freed memory kept for reuse: {self.memory_kept}; run took {self.wall_s:.1f} s",
                 "",
                 f"{'d':>5} {'rows':>6}  {'variant':<30} {'median µs':>10} {'IQR µs':>13} {'GB/s':>6} {'x copy':>7}"
                 f" {'wall µs':>8} {'faults':>6}"]
        for r in self.records():
            iqr = f"{r['q1_us']:.0f}-{r['q3_us']:.0f}"
            lines.append(f"{r['d']:>5} {r['rows']:>6}  {r['variant']:<30} {r['median_us']:>10.0f} {iqr:>13} "
                         f"{r['gbps']:>6.1f} {r['vs_copy']:>7.2f} {r['wall_us']:>8.0f} {r['faults']:>6.0f}")
        lines += ["", "Time saved by RMSNorm, 1 - t_RMS / t_LN, per repeat: median [interquartile range]",
                  f"(Zhang & Sennrich 2019, GPU: {PAPER_SAVING[0]:.1%} to {PAPER_SAVING[1]:.1%}; "
                  f"the chapter: {CHAPTER_SAVING[0]:.0%}-{CHAPTER_SAVING[1]:.0%})"]
        header = f"{'comparison':<22}" + "".join(f"{'d=' + str(d):>22}" for d in self.widths)
        lines.append(header)
        for label, ln, rms, why in self.pairs():
            cells = []
            for d in self.widths:
                q1, med, q3 = self.saving(ln, rms, d)
                cells.append(f"{med:+.0%} [{q1:+.0%}, {q3:+.0%}]")
            lines.append(f"{label:<22}" + "".join(f"{c:>22}" for c in cells) + f"   ({why})")
        if self.compile_s:
            worst = max(self.compile_s.values())
            lines.append(f"\ntorch.compile: first call (compilation) took up to {worst:.1f} s per variant and width")
        for name, why in self.failed.items():
            lines.append(f"\n{name}: not timed ({why})")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.table()


def run(variants: list[Variant], widths: Sequence[int] = WIDTHS, repeats: int = 15, number: int = 5,
        warmup: int = 3, elements: int = ELEMENTS, seed: int = 0,
        progress: Callable[[int, int, str], None] | None = None) -> BenchResult:
    """Time every variant at every width; variants alternate inside each repeat so that noise hits them alike.

    It runs at the torch thread count the process has (result.threads says which); one thread keeps timings steady
    on a shared machine.
    """
    widths = tuple(int(d) for d in widths)
    if not widths or any(d < 1 or elements % d for d in widths):
        raise ValueError(f"every width must divide elements={elements}, got {widths}")
    if repeats < 1 or number < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1, number >= 1, warmup >= 0; got {repeats}, {number}, {warmup}")
    memory_kept = keep_freed_memory()
    n_threads = torch.get_num_threads()
    # One thread runs every op on this thread, so its CPU time is the op's cost; with more, only wall time is honest.
    clock = time.thread_time if n_threads == 1 else time.perf_counter
    result = BenchResult(widths, elements, n_threads, repeats, number, [v.name for v in variants],
                         clock="thread CPU time" if n_threads == 1 else "wall clock", memory_kept=memory_kept,
                         cache_bytes=last_level_cache_bytes())
    g = torch.Generator().manual_seed(seed)
    started = time.perf_counter()
    with torch.inference_mode():
        for i, d in enumerate(widths):
            x = torch.randn(elements // d, d, generator=g)
            w = torch.rand(d, generator=g) + 0.5
            b = torch.randn(d, generator=g)
            live = []
            for v in variants:
                if v.name in result.failed:
                    continue
                try:
                    t0 = time.perf_counter()
                    v.fn(x, w, b)
                    if v.style == "compiled":
                        result.compile_s[(v.name, d)] = time.perf_counter() - t0
                    for _ in range(warmup):
                        v.fn(x, w, b)
                except Exception as exc:  # e.g. torch.compile without a C++ compiler: report, time the rest
                    result.failed[v.name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
                    continue
                live.append(v)
                result.times[(v.name, d)], result.wall[(v.name, d)] = [], []
            faults0 = {v.name: 0 for v in live}
            for r in range(repeats):
                k = r % len(live)
                for v in live[k:] + live[:k]:
                    f0, t0, c0 = _minor_faults(), time.perf_counter(), clock()
                    for _ in range(number):
                        v.fn(x, w, b)
                    c1, t1 = clock(), time.perf_counter()
                    faults0[v.name] += _minor_faults() - f0
                    result.times[(v.name, d)].append((c1 - c0) / number)
                    result.wall[(v.name, d)].append((t1 - t0) / number)
            for v in live:
                result.faults[(v.name, d)] = faults0[v.name] / (repeats * number)
            if progress is not None:
                progress(i + 1, len(widths), f"d = {d}")
    result.wall_s = time.perf_counter() - started
    return result


def lesson_variants(compiled: bool = False) -> list[Variant]:
    """default_variants with notebook 05's own layer_norm and rms_norm, read from its lesson cells."""
    lessons = lesson_functions("05_rmsnorm")
    return default_variants(lessons["layer_norm"], lessons["rms_norm"], compiled=compiled)


def report(long: bool = False) -> str:
    """Run the default (or long) benchmark and return its table: what course_utils.bench puts in its report."""
    return run(lesson_variants(compiled=long), **settings(long)).table()


def main(argv: Sequence[str] | None = None) -> BenchResult:
    """Command line: print the table of the default run, or of the long one with --long."""
    parser = argparse.ArgumentParser(prog="python -m course_utils.normbench", description=__doc__.split("\n")[0])
    parser.add_argument("--long", action="store_true",
                        help="8 widths, 41 repeats of 10 calls, and torch.compile'd versions (several minutes)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads while timing (default 1)")
    parser.add_argument("--no-compile", action="store_true", help="with --long, skip the torch.compile'd versions")
    args = parser.parse_args(argv)
    setup(threads=args.threads)
    if args.long:
        result = run(lesson_variants(compiled=not args.no_compile), **settings(long=True),
                     progress=lambda i, n, text: print(f"  [{i}/{n}] {text} done", flush=True))
    else:
        result = run(lesson_variants(), **settings(long=False))
    print(result.table())
    return result


if __name__ == "__main__":
    main()
