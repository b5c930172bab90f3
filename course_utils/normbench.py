"""The norm speed benchmark of notebook 05: LayerNorm vs RMSNorm on this CPU, each set against a plain copy.

    python -m course_utils.normbench                   # the notebook's default run (a few seconds)
    python -m course_utils.normbench --long            # more widths and repeats, plus torch.compile'd versions (minutes)
    python -m course_utils.normbench --sweep           # tensor sizes from inside the last-level cache to beyond it
    python -m course_utils.normbench --store-compiled  # time the compiled pair and store it (benchmarks/, dated)

Every variant is timed on the same (rows, d) float32 tensor of 2**20 elements (4 MiB in, 4 MiB out), reshaped to each
width d. Variants take turns inside each repeat, so a noisy neighbour slows them alike; each time is the median over
repeats after a warm-up, and each RMSNorm-vs-LayerNorm ratio is computed repeat by repeat and reported as median and
interquartile range. It runs at the process's torch thread count (course_utils.setup sets it: one thread, in the
notebooks and on the command line); with one thread the clock is the timing thread's own CPU time (time.thread_time),
which leaves out the moments a busy machine hands the core to someone else; wall-clock medians are kept beside it.
The hand-written LayerNorm and RMSNorm are notebook 05's own, read from its `lesson` cells.

The cost model notebook 05 teaches: time ≈ (full-tensor passes: reads + writes) × (a copy's time per pass). A copy
into a preallocated buffer (`out.copy_(x)`) makes two passes, one read and one write, so a variant of p passes is
predicted to take p / 2 copies. count_passes() counts a function's passes by watching the tensor operations it runs
(PassCounter), so the prediction is computed, not typed. How far a measured time falls from it says what else bounds
the kernel: on one CPU thread, instructions (a fused kernel's arithmetic) as much as bytes. Where the tensors fit in
the last-level cache (the table says), a pass costs the cache's bandwidth rather than main memory's; size_sweep()
runs sizes on both sides of it.

Fresh memory costs a page fault per 4 KiB page, which can take longer than the norm itself; glibc hands large freed
blocks back to the OS, so an op with several temporaries (a hand-written norm) would keep paying it. keep_freed_memory()
asks glibc to keep freed memory for reuse instead, so the table measures the kernels; it reports page faults per call so
you can check.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import datetime
import json
import platform
import statistics
import sys
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from . import setup
from .course import lesson_functions
from .resources import course_folder
from .transformer import TransformerBlock

__all__ = ["Variant", "BenchResult", "keep_freed_memory", "release_freed_memory", "memory_bound", "op_width_sweep",
           "MMAP_THRESHOLD_MIB", "RAISED_MMAP_MIB", "MEMORY_BOUND_MIB", "MEMORY_BOUND_VARIANTS", "OP_WIDTHS", "last_level_cache_bytes", "PassCounter", "count_passes",
           "COPY", "micro_variants", "default_variants", "backward_variants", "compiled_variants", "lesson_variants",
           "PAIRS", "run", "settings", "size_sweep", "sweep_table", "store_sweep", "stored_sweep_text", "sweep_ratios",
           "SWEEP_KEEP", "SWEEP_VARIANTS", "compiled_pair", "lesson_sweep", "SWEEP_MIB", "BIG_SWEEP_MIB", "block_timing",
           "BLOCK", "store_compiled", "load_stored", "stored_text", "STORED", "block_text", "lesson_backward_variants",
           "report", "WIDTHS", "LONG_WIDTHS", "BUSY_RATIO",
           "REMEASURE_BUSY", "MEASURE_TRIES", "quietest", "busy_text",
           "ELEMENTS", "PAPER_SAVING", "PAPER_TRANSFORMER_SAVING", "CHAPTER_SAVING", "main"]

ELEMENTS = 2 ** 20
WIDTHS = (128, 512, 2048)
LONG_WIDTHS = (64, 128, 256, 512, 1024, 2048, 4096, 8192)
# Zhang & Sennrich 2019 (arXiv 1910.07467), RMSNorm vs LayerNorm running time on GPU across their tables.
PAPER_SAVING = (0.069, 0.408)
# Its one Transformer (machine translation) is the band's low end: whole-model training time, not the norm alone.
PAPER_TRANSFORMER_SAVING = 0.069
COPY = "copy (out.copy_(x))"
SWEEP_MIB = (1, 4, 16)  # per tensor; input + output: 2, 8, 32 MiB, against this machine's 32 MiB last-level cache
BIG_SWEEP_MIB = SWEEP_MIB + (64,)
STORED = course_folder("data") / "normbench_compiled.json"  # shipped, so every copy's notebook can print it
CHAPTER_SAVING = (0.10, 0.40)  # the chapter's "10-40%"


MMAP_THRESHOLD_MIB = 32  # run()'s default: blocks above this come from mmap, fresh pages (and faults) every call
RAISED_MMAP_MIB = 1024  # memory_bound(): above every tensor it allocates, so freed blocks are reused at 64 MiB too


def keep_freed_memory(mmap_threshold_mib: int = MMAP_THRESHOLD_MIB) -> bool:
    """Ask glibc's malloc to reuse freed blocks instead of returning them to the OS (lasts for this process, until
    the next call). A block larger than `mmap_threshold_mib` still gets its own mmap, returned to the OS when freed,
    so each new one of that size starts with fresh pages: a page fault per 4 KiB page written.

    Returns False where that is not possible (not Linux/glibc); the benchmark still runs, page faults included.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return (bool(libc.mallopt(m_mmap_threshold, mmap_threshold_mib * 2 ** 20))
                and bool(libc.mallopt(m_trim_threshold, 2 ** 30)))
    except (OSError, AttributeError):
        return False


def release_freed_memory() -> bool:
    """Hand the freed memory glibc keeps back to the OS (malloc_trim): after a run with the mmap threshold raised, the
    large blocks it kept would otherwise be reused, and a run at the default threshold would never reach mmap."""
    try:
        return bool(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0))
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


class PassCounter(TorchDispatchMode):
    """Counts full-tensor passes while active: each tensor operation's reads and writes of tensors with `numel`
    elements (views and allocations move no data and count nothing; a tensor read twice by one op counts once)."""

    FREE = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}

    def __init__(self, numel: int):
        super().__init__()
        self.numel, self.reads, self.writes, self.ops = numel, 0, 0, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func._schema.name.split("::")[-1]
        if name in self.FREE:
            return out

        def big(items):
            return [t for t in tree_flatten(items)[0] if isinstance(t, Tensor) and t.numel() == self.numel]

        def storages(tensors):
            return {t.untyped_storage().data_ptr() for t in tensors}

        read = storages(big((args, {k: v for k, v in kwargs.items() if k != "out"})))
        if name.endswith("_"):  # in place: self is written; read too, unless the op only overwrites it
            written = 1 if big(args[:1]) else 0
            if name in ("copy_", "fill_", "zero_"):
                read = storages(big((args[1:], kwargs)))
        else:
            fresh = big(kwargs.get("out")) or [t for t in big(out) if t.untyped_storage().data_ptr() not in read]
            if not fresh and big(out):  # a view of an input
                return out
            written = len(fresh)
        if read or written:
            self.reads += len(read)
            self.writes += written
            self.ops.append((name, len(read), written))
        return out


def count_passes(fn: Callable, x: Tensor, *args) -> tuple[int, int]:
    """(reads, writes) of full tensors (x's size) that fn(x, *args) makes, as PassCounter counts them."""
    with PassCounter(x.numel()) as counter:
        fn(x, *args)
    return counter.reads, counter.writes


@dataclass(frozen=True)
class Variant:
    """One timed function fn(x, weight, bias) -> y; family is "copy", "layer", "rms" or "micro"; style says how it
    is built; backward: the time is of the forward and the backward pass."""
    name: str
    family: str
    style: str
    fn: Callable[[Tensor, Tensor, Tensor], Tensor]
    backward: bool = False


def _buffers(n: int) -> Callable[[Tensor], list[Tensor]]:
    """n preallocated tensors shaped like x, made once per shape (allocation is no part of what is timed)."""
    made: dict = {}

    def get(x: Tensor) -> list[Tensor]:
        if x.shape not in made:
            made[x.shape] = [torch.empty_like(x) for _ in range(n)]
        return made[x.shape]
    return get


def _copy_variant() -> Variant:
    buf = _buffers(1)
    return Variant(COPY, "copy", "copy", lambda x, w, b: buf(x)[0].copy_(x))


def micro_variants() -> list[Variant]:
    """The cost model's micro-experiment: a copy; x*2+1 as one fused op and as two ops (two passes more); and
    1+2x², one fused op with more arithmetic but the copy's two passes. All write into preallocated buffers."""
    one = torch.tensor(1.0)
    fused, more, split = _buffers(1), _buffers(1), _buffers(2)

    def two_ops(x, w, b):
        tmp, out = split(x)
        return torch.add(torch.mul(x, 2, out=tmp), 1, out=out)
    return [_copy_variant(),
            Variant("x*2+1, one fused op", "micro", "fused", lambda x, w, b: torch.add(one, x, alpha=2,
                                                                                        out=fused(x)[0])),
            Variant("1+2x², one fused op", "micro", "fused",
                    lambda x, w, b: torch.addcmul(one, x, x, value=2, out=more(x)[0])),
            Variant("x*2+1, two ops", "micro", "separate", two_ops)]


def _compilable(fn: Callable) -> Callable:
    """fn, after making its module importable: torch.compile looks a function's globals up by module name, and
    the lesson functions course.lesson_functions reads out of a notebook live in a namespace of their own."""
    name = getattr(fn, "__module__", None)
    if name and name not in sys.modules and hasattr(fn, "__globals__"):
        module = types.ModuleType(name)
        module.__dict__.update(fn.__globals__)
        sys.modules[name] = module
    return fn


def compiled_variants(layer_norm: Callable, rms_norm: Callable) -> list[Variant]:
    """The fair fused pair: notebook 05's hand-written layer_norm and rms_norm, each torch.compile'd."""
    ln, rms = _compilable(layer_norm), _compilable(rms_norm)
    ln_c = torch.compile(lambda x, w, b: ln(x, w, b, 1e-5), dynamic=False)
    rms_c = torch.compile(lambda x, w, b: rms(x, w, 1e-5), dynamic=False)
    return [Variant("LayerNorm by hand, compiled", "layer", "compiled", ln_c),
            Variant("RMSNorm by hand, compiled", "rms", "compiled", rms_c)]


def default_variants(layer_norm: Callable, rms_norm: Callable, compiled: bool = False) -> list[Variant]:
    """Copy, PyTorch's own ops (with and without γ/β), the hand-written layer_norm(x, weight, bias, eps) and
    rms_norm(x, weight, eps) notebook 05 writes and, with compiled, torch.compile'd versions of those."""
    ln, rms = layer_norm, rms_norm
    variants = [
        _copy_variant(),
        Variant("F.layer_norm", "layer", "PyTorch op", lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, 1e-5)),
        Variant("F.rms_norm", "rms", "PyTorch op", lambda x, w, b: F.rms_norm(x, x.shape[-1:], w, 1e-5)),
        Variant("F.layer_norm, no γ/β", "layer", "PyTorch op, no γ/β",
                lambda x, w, b: F.layer_norm(x, x.shape[-1:], None, None, 1e-5)),
        Variant("F.rms_norm, no γ", "rms", "PyTorch op, no γ/β",
                lambda x, w, b: F.rms_norm(x, x.shape[-1:], None, 1e-5)),
        Variant("LayerNorm by hand", "layer", "by hand", lambda x, w, b: ln(x, w, b, 1e-5)),
        Variant("RMSNorm by hand", "rms", "by hand", lambda x, w, b: rms(x, w, 1e-5)),
        Variant("LayerNorm by hand, no γ/β", "layer", "by hand, no γ/β", lambda x, w, b: ln(x, None, None, 1e-5)),
        Variant("RMSNorm by hand, no γ", "rms", "by hand, no γ/β", lambda x, w, b: rms(x, None, 1e-5)),
    ]
    return variants + (compiled_variants(ln, rms) if compiled else [])


def backward_variants(layer_norm: Callable, rms_norm: Callable) -> list[Variant]:
    """Forward and backward (gradients of x, γ and β for a fixed upstream gradient) of PyTorch's ops and the
    hand-written pair, beside a forward copy as the yardstick."""
    made: dict = {}

    def upstream(y: Tensor) -> Tensor:
        """A fixed random upstream gradient per shape, made once (its making is no part of what is timed)."""
        if y.shape not in made:
            made[y.shape] = torch.randn(y.shape, generator=torch.Generator().manual_seed(0))
        return made[y.shape]

    def both_passes(name: str, family: str, style: str, fn: Callable) -> Variant:
        def step(x, w, b):
            x, w, b = (t.detach().requires_grad_() for t in (x, w, b))
            y = fn(x, w, b)
            used = [x, w, b] if family == "layer" else [x, w]
            return torch.autograd.grad(y, used, upstream(y))
        return Variant(name + ", fwd+bwd", family, style, step, backward=True)
    ln, rms = layer_norm, rms_norm
    return [_copy_variant(),
            both_passes("F.layer_norm", "layer", "PyTorch op", lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b,
                                                                                              1e-5)),
            both_passes("F.rms_norm", "rms", "PyTorch op", lambda x, w, b: F.rms_norm(x, x.shape[-1:], w, 1e-5)),
            both_passes("LayerNorm by hand", "layer", "by hand", lambda x, w, b: ln(x, w, b, 1e-5)),
            both_passes("RMSNorm by hand", "rms", "by hand", lambda x, w, b: rms(x, w, 1e-5))]


# (label, LayerNorm variant, RMSNorm variant, is it a fair comparison and why). "{passes}" is filled in from the
# passes counted in the run (BenchResult.pairs), so what the label says about fusing is what this build does.
PAIRS = [
    ("PyTorch ops", "F.layer_norm", "F.rms_norm", "PyTorch's ops as shipped: {passes}"),
    ("PyTorch ops, no γ/β", "F.layer_norm, no γ/β", "F.rms_norm, no γ",
     "as shipped, without the affine: {passes}"),
    ("by hand", "LayerNorm by hand", "RMSNorm by hand", "fair: the same elementary ops, RMSNorm has fewer"),
    ("by hand, no γ/β", "LayerNorm by hand, no γ/β", "RMSNorm by hand, no γ", "fair: the normalization alone"),
    ("compiled", "LayerNorm by hand, compiled", "RMSNorm by hand, compiled", "fair: both fused by the compiler"),
    ("PyTorch ops, fwd+bwd", "F.layer_norm, fwd+bwd", "F.rms_norm, fwd+bwd", "as shipped, fwd+bwd: {passes}"),
    ("by hand, fwd+bwd", "LayerNorm by hand, fwd+bwd", "RMSNorm by hand, fwd+bwd", "fair: the same elementary ops"),
]


def _passes_note(passes: dict, ln: str, rms: str) -> str:
    """What the counted passes say about a pair of PyTorch ops in this build: fused alike, or not."""
    if ln not in passes or rms not in passes:
        return "passes not counted"
    p_ln, p_rms = sum(passes[ln]), sum(passes[rms])
    if p_ln == p_rms:
        return f"both make {p_ln} passes in this build, fused alike"
    return f"unfair in this build: {p_ln} passes against {p_rms}, one is fused and the other is not"


BUSY_RATIO = 1.5  # wall-clock / thread CPU time above this: the table says the machine was busy
REMEASURE_BUSY = 1.2  # quietest(): a measurement whose wall-clock passed this x its CPU time is made again
MEASURE_TRIES = 3  # quietest(): at most this many measurements


def quietest(measure: Callable[[], object], tries: int = MEASURE_TRIES,
             judge: Callable[[object], bool] | None = None) -> tuple[object, list[float]]:
    """Measure, and measure again while the machine is busy (the measurement's wall-clock time above REMEASURE_BUSY
    x this thread's CPU time: other processes took the core) or while `judge` (the claim's checks) says no, up to
    `tries` times: a busy moment (another process on the core, or on the memory bus, which CPU time does not show) is
    remeasured before anything is judged. Returns the least busy measurement the judge accepts (else the least busy),
    and how busy each was (wall / CPU)."""
    found = []
    for _ in range(max(1, tries)):
        w0, c0 = time.perf_counter(), time.thread_time()
        result = measure()
        busy = (time.perf_counter() - w0) / max(time.thread_time() - c0, 1e-9)
        accepted = judge is None or bool(judge(result))
        found.append((not accepted, busy, result))
        if busy <= REMEASURE_BUSY and accepted:
            break
    return min(found, key=lambda t: (t[0], t[1]))[2], [b for _, b, _ in found]


def busy_text(busy: list[float]) -> str:
    """quietest()'s busyness as a line for the notebook."""
    if len(busy) == 1:
        return f"measured once (wall-clock {busy[0]:.2f}x CPU time: the machine was quiet enough)"
    return (f"measured {len(busy)} times, as the machine was busy or a check failed (wall-clock "
            + ", ".join(f"{b:.2f}x" for b in busy) + " CPU time); the least busy measurement the checks accept, if "
            "any, is the one used")


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
    passes: dict[str, tuple[int, int]] = field(default_factory=dict)

    def has(self, variant: str) -> bool:
        return any((variant, d) in self.times for d in self.widths)

    def median_s(self, variant: str, d: int) -> float:
        """Median seconds per call."""
        return statistics.median(self.times[(variant, d)])

    def gbps(self, variant: str, d: int) -> float:
        """Achieved bandwidth, counting the bytes any norm must move: read x once, write y once."""
        return 2 * self.elements * 4 / self.median_s(variant, d) / 1e9

    def x_copy(self, variant: str, d: int) -> float:
        """Median time relative to the copy's, at width d."""
        return self.median_s(variant, d) / self.median_s(COPY, d)

    def predicted_x_copy(self, variant: str) -> float:
        """The cost model's prediction in copies: full-tensor passes / 2 (a copy makes two, a read and a write)."""
        reads, writes = self.passes[variant]
        return (reads + writes) / 2

    def saving(self, ln: str, rms: str, d: int) -> tuple[float, float, float]:
        """Time saved by RMSNorm, 1 - t_rms / t_ln, per repeat: (first quartile, median, third quartile)."""
        per_repeat = [1 - r / l for l, r in zip(self.times[(ln, d)], self.times[(rms, d)])]
        return _quartiles(per_repeat)

    def pairs(self) -> list[tuple[str, str, str, str]]:
        """The entries of PAIRS whose two variants were both timed."""
        return [(label, ln, rms, why.format(passes=_passes_note(self.passes, ln, rms)))
                for label, ln, rms, why in PAIRS if self.has(ln) and self.has(rms)]

    def records(self) -> list[dict]:
        """One row per (variant, width): name, d, rows, median µs, quartiles µs, GB/s, time relative to the copy."""
        out = []
        for d in self.widths:
            copy = self.median_s(COPY, d) if (COPY, d) in self.times else float("nan")
            for v in self.variants:
                if (v, d) not in self.times:
                    continue
                q1, med, q3 = _quartiles(self.times[(v, d)])
                out.append(dict(variant=v, d=d, rows=self.elements // d, median_us=med * 1e6, q1_us=q1 * 1e6,
                                q3_us=q3 * 1e6, wall_us=statistics.median(self.wall[(v, d)]) * 1e6,
                                faults=self.faults.get((v, d), float("nan")), gbps=self.gbps(v, d),
                                vs_copy=med / copy, passes=sum(self.passes[v]) if v in self.passes else None,
                                model=self.predicted_x_copy(v) if v in self.passes else float("nan")))
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
                 "passes: full-tensor reads + writes, counted; model: passes / 2 copies, the time the cost model "
                 "predicts; x copy: measured",
                 "",
                 f"{'d':>5} {'rows':>6}  {'variant':<34} {'median µs':>10} {'IQR µs':>13} {'GB/s':>6} {'passes':>6}"
                 f" {'model':>6} {'x copy':>7} {'wall µs':>8} {'faults':>6}"]
        for r in self.records():
            iqr = f"{r['q1_us']:.0f}-{r['q3_us']:.0f}"
            passes, model = ("-", "-") if r["passes"] is None else (str(r["passes"]), f"{r['model']:.1f}")
            lines.append(f"{r['d']:>5} {r['rows']:>6}  {r['variant']:<34} {r['median_us']:>10.0f} {iqr:>13} "
                         f"{r['gbps']:>6.1f} {passes:>6} {model:>6} {r['vs_copy']:>7.2f} {r['wall_us']:>8.0f} "
                         f"{r['faults']:>6.0f}")
        if not self.pairs():
            return "\n".join(lines + self._tail())
        lines += ["", "Time saved by RMSNorm, 1 - t_RMS / t_LN, per repeat: median [interquartile range]",
                  f"(the chapter claims {CHAPTER_SAVING[0]:.0%}-{CHAPTER_SAVING[1]:.0%} for the norm alone; the "
                  "paper's figures are whole-model times, not comparable with these)"]
        header = f"{'comparison':<22}" + "".join(f"{'d=' + str(d):>22}" for d in self.widths)
        lines.append(header)
        for label, ln, rms, why in self.pairs():
            cells = []
            for d in self.widths:
                q1, med, q3 = self.saving(ln, rms, d)
                cells.append(f"{med:+.0%} [{q1:+.0%}, {q3:+.0%}]")
            lines.append(f"{label:<22}" + "".join(f"{c:>22}" for c in cells) + f"   ({why})")
        return "\n".join(lines + self._tail())

    def _tail(self) -> list[str]:
        lines = []
        if self.clock == "thread CPU time":
            busy = [k for k, w in self.wall.items() if k in self.times
                    and statistics.median(w) > BUSY_RATIO * statistics.median(self.times[k])]
            if busy:
                lines.append(f"\nwall-clock above {BUSY_RATIO}x thread CPU time for {len(busy)} of {len(self.wall)} "
                             "timings: the machine was busy (other processes took the core while these ran); the "
                             "CPU-time column leaves that out, the wall µs column does not")
        if self.compile_s:
            worst = max(self.compile_s.values())
            lines.append(f"\ntorch.compile: first call (compilation) took up to {worst:.1f} s per variant and width")
        for name, why in self.failed.items():
            lines.append(f"\n{name}: not timed ({why})")
        return lines

    def __repr__(self) -> str:
        return self.table()


def run(variants: list[Variant], widths: Sequence[int] = WIDTHS, repeats: int = 15, number: int = 5,
        warmup: int = 3, elements: int = ELEMENTS, seed: int = 0,
        progress: Callable[[int, int, str], None] | None = None,
        mmap_threshold_mib: int = MMAP_THRESHOLD_MIB) -> BenchResult:
    """Time every variant at every width; variants alternate inside each repeat so that noise hits them alike.

    It runs at the torch thread count the process has (result.threads says which); one thread keeps timings steady
    on a shared machine.
    """
    widths = tuple(int(d) for d in widths)
    if not widths or any(d < 1 or elements % d for d in widths):
        raise ValueError(f"every width must divide elements={elements}, got {widths}")
    if repeats < 1 or number < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1, number >= 1, warmup >= 0; got {repeats}, {number}, {warmup}")
    memory_kept = keep_freed_memory(mmap_threshold_mib)
    n_threads = torch.get_num_threads()
    # One thread runs every op on this thread, so its CPU time is the op's cost; with more, only wall time is honest.
    clock = time.thread_time if n_threads == 1 else time.perf_counter
    result = BenchResult(widths, elements, n_threads, repeats, number, [v.name for v in variants],
                         clock="thread CPU time" if n_threads == 1 else "wall clock", memory_kept=memory_kept,
                         cache_bytes=last_level_cache_bytes())
    g = torch.Generator().manual_seed(seed)
    started = time.perf_counter()
    grad_free = not any(v.backward for v in variants)
    for i, d in enumerate(widths):
        x = torch.randn(elements // d, d, generator=g)
        w = torch.rand(d, generator=g) + 0.5
        b = torch.randn(d, generator=g)
        for v in variants:  # outside inference mode, where PyTorch's composite ops show their parts to the counter
            if v.name not in result.passes and v.style != "compiled":  # compiled code is fused: nothing to see
                try:
                    with torch.no_grad() if grad_free else contextlib.nullcontext():
                        result.passes[v.name] = count_passes(v.fn, x, w, b)
                except Exception:  # the timing below reports it
                    pass
        with torch.inference_mode(grad_free):
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


def size_sweep(variants: list[Variant], sizes_mib: Sequence[int] = SWEEP_MIB, d: int = 512, repeats: int = 5,
               number: int = 2, seed: int = 0, mmap_threshold_mib: int = MMAP_THRESHOLD_MIB) -> list[BenchResult]:
    """The same variants at several tensor sizes (MiB per tensor), from inside the last-level cache to beyond it."""
    try:
        return [run(variants, widths=(d,), repeats=repeats, number=number, warmup=1, elements=mib * 2 ** 18,
                    seed=seed, mmap_threshold_mib=mmap_threshold_mib) for mib in sizes_mib]
    finally:
        keep_freed_memory()  # back to the default threshold for what runs next


MEMORY_BOUND_MIB = 64  # per tensor: input + output twice a 32 MiB last-level cache
MEMORY_BOUND_VARIANTS = (COPY, "F.layer_norm", "RMSNorm by hand", "LayerNorm by hand")


def memory_bound(variants: list[Variant], mib: int = MEMORY_BOUND_MIB, raised: bool = True, repeats: int = 5,
                 number: int = 1, seed: int = 0) -> BenchResult:
    """The named MEMORY_BOUND_VARIANTS at `mib` MiB per tensor, beyond the cache, with glibc's mmap threshold raised
    to RAISED_MMAP_MIB (raised) or left at run()'s MMAP_THRESHOLD_MIB: the setting that decides whether each call's
    fresh output and temporaries cost page faults."""
    keep = [v for v in variants if v.name in MEMORY_BOUND_VARIANTS]
    if raised:  # an untimed round first grows the heap to what the variants need at most, in any order they take
        size_sweep(keep, (mib,), repeats=len(keep), number=1, seed=seed, mmap_threshold_mib=RAISED_MMAP_MIB)
        return size_sweep(keep, (mib,), repeats=repeats, number=number, seed=seed, mmap_threshold_mib=RAISED_MMAP_MIB)[0]
    # At the default threshold, blocks a raised run left in glibc's heap would be reused and never reach mmap:
    # release them first, and once more if a live allocation above them kept them (no page faults seen).
    for _ in range(3):
        release_freed_memory()
        result = size_sweep(keep, (mib,), repeats=repeats, number=number, seed=seed)[0]
        if any(f >= result.elements * 4 / 4096 / 64 for f in result.faults.values()):
            break
    return result


OP_WIDTHS = (16, 32, 64, 128, 256, 1024, 4096)  # op_width_sweep(): head sizes (QK-norm) up to model widths


def op_width_sweep(widths: Sequence[int] = OP_WIDTHS, repeats: int = 9, number: int = 3, seed: int = 0) -> BenchResult:
    """PyTorch's own pair, F.layer_norm against F.rms_norm (with γ, and β for LayerNorm), on the same 2**20 numbers
    reshaped to each width: at a small d there are many rows, and a kernel's cost per row shows."""
    ops = [v for v in default_variants(lambda *a: None, lambda *a: None) if v.name in (COPY, "F.layer_norm",
                                                                                      "F.rms_norm")]
    return run(ops, widths=widths, repeats=repeats, number=number, seed=seed)


def sweep_table(results: list[BenchResult]) -> str:
    """One line per size and variant: where the tensors live, GB/s, time in copies, page faults per call."""
    cache = results[0].cache_bytes if results else None
    lines = [f"last-level cache: {'unknown' if cache is None else f'{cache / 2 ** 20:.0f} MiB'}; "
             "input + output against it; faults: page faults per call",
             f"{'MiB/tensor':>10} {'in+out':>8}  {'variant':<24} {'median µs':>10} {'GB/s':>6} {'x copy':>7} "
             f"{'faults':>7}"]
    for r in results:
        mib = r.elements * 4 / 2 ** 20
        where = "?" if cache is None else ("in LLC" if 2 * mib * 2 ** 20 <= cache else "beyond")
        d = r.widths[0]
        for v in r.variants:
            if r.has(v):
                lines.append(f"{mib:>10g} {where:>8}  {v:<24} {r.median_s(v, d) * 1e6:>10.0f} {r.gbps(v, d):>6.1f} "
                             f"{r.x_copy(v, d):>7.2f} {r.faults.get((v, d), float('nan')):>7.0f}")
    return "\n".join(lines)


# The whole-block timing: one Pre-LN TransformerBlock, forward and backward, 4 sequences of 32 tokens of width 256.
BLOCK = dict(d_model=256, n_heads=4, batch=4, seq=32)


def block_timing(seed: int = 0, repeats: int = 15, number: int = 2, **shape) -> dict:
    """Forward+backward seconds of the same TransformerBlock (same weights) with LayerNorm and with RMSNorm (the
    course's reference norms, written with elementary ops like the notebook's), and of its two norms alone. Freed
    memory is kept for reuse (keep_freed_memory), as in run(), so the figures are the computation's.

    Returns {"block": {kind: median s}, "norms": {kind: median s}, "block_saving", "norm_saving", "norm_share"}:
    savings are 1 - t_rms / t_ln of the medians; norm_share is LayerNorm's two norms' time over its block's, and
    predicted the block saving the norms alone account for: the time they save over the LayerNorm block's time."""
    cfg = {**BLOCK, **shape}
    keep_freed_memory()  # as run() does: LayerNorm's extra temporaries would otherwise pay fresh-page faults
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(cfg["batch"], cfg["seq"], cfg["d_model"], generator=g)
    upstream = torch.randn(x.shape, generator=g)
    blocks, norms = {}, {}
    for kind in ("layer", "rms"):
        with torch.random.fork_rng():
            torch.manual_seed(seed)  # the same linear weights for both; the norms' γ (and β) start at 1 (and 0)
            blocks[kind] = TransformerBlock(cfg["d_model"], cfg["n_heads"], norm=kind)
        norms[kind] = blocks[kind].norm1

    def fwd_bwd(module):
        xg = x.detach().requires_grad_()
        params = [p for p in module.parameters()]
        torch.autograd.grad(module(xg), [xg] + params, upstream)

    def two_norms(kind):
        def step():
            fwd_bwd(norms[kind])
            fwd_bwd(norms[kind])
        return step
    jobs = {("block", k): (lambda k=k: fwd_bwd(blocks[k])) for k in blocks}
    jobs.update({("norms", k): two_norms(k) for k in norms})
    clock = time.thread_time if torch.get_num_threads() == 1 else time.perf_counter
    times = {key: [] for key in jobs}
    for job in jobs.values():
        job()
    for r in range(repeats):
        keys = list(jobs)
        keys = keys[r % len(keys):] + keys[:r % len(keys)]
        for key in keys:
            c0 = clock()
            for _ in range(number):
                jobs[key]()
            times[key].append((clock() - c0) / number)

    med = {key: statistics.median(t) for key, t in times.items()}

    def saving(what):  # from the medians printed beside it, so a reader can check it
        return 1 - med[(what, "rms")] / med[(what, "layer")]
    return {"block": {k: med[("block", k)] for k in blocks}, "norms": {k: med[("norms", k)] for k in norms},
            "block_saving": saving("block"), "norm_saving": saving("norms"),
            "norm_share": med[("norms", "layer")] / med[("block", "layer")], "shape": cfg,
            "predicted": (med[("norms", "layer")] - med[("norms", "rms")]) / med[("block", "layer")]}


def block_text(timing: dict) -> str:
    """block_timing's figures as a few lines."""
    cfg, b, n = timing["shape"], timing["block"], timing["norms"]
    return "\n".join([
        f"one Pre-LN block, d_model {cfg['d_model']}, {cfg['n_heads']} heads, {cfg['batch']}x{cfg['seq']} tokens, "
        "forward + backward, median times:",
        f"  whole block:        LayerNorm {b['layer'] * 1e3:7.2f} ms   RMSNorm {b['rms'] * 1e3:7.2f} ms   "
        f"RMSNorm saves {timing['block_saving']:+.1%}",
        f"  its two norms only: LayerNorm {n['layer'] * 1e3:7.2f} ms   RMSNorm {n['rms'] * 1e3:7.2f} ms   "
        f"RMSNorm saves {timing['norm_saving']:+.1%}",
        f"  LayerNorm's two norms take {timing['norm_share']:.0%} of the LayerNorm block's time, so the norms' saving "
        f"predicts a block saving of {timing['predicted']:+.1%}"])


def _machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cache = last_level_cache_bytes()
    return f"{model}; last-level cache {'unknown' if cache is None else f'{cache / 2 ** 20:.0f} MiB'}"


def compiled_pair(also: Sequence[str] = ()) -> list[Variant]:
    """Notebook 05's hand-written pair, plain and torch.compile'd, beside the copy (and the variants named in `also`)."""
    keep = (COPY, "LayerNorm by hand", "RMSNorm by hand", *also)
    return [v for v in lesson_variants(compiled=True) if v.name in keep or v.style == "compiled"]


SWEEP_VARIANTS = (COPY, "F.layer_norm", "RMSNorm by hand", "LayerNorm by hand")  # what the report's size sweep times


def lesson_sweep(sizes_mib: Sequence[int] = BIG_SWEEP_MIB, keep: Sequence[str] = SWEEP_VARIANTS) -> list[BenchResult]:
    """size_sweep of notebook 05's variants named in `keep`."""
    return size_sweep([v for v in lesson_variants() if v.name in keep], sizes_mib)


def store_compiled(path: Path = STORED, widths: Sequence[int] = (512,), repeats: int = 15, number: int = 5) -> dict:
    """Time the compiled pair against the copy and PyTorch's fused F.layer_norm (forward) and store it, dated."""
    variants = compiled_pair(also=("F.layer_norm",))
    result = run(variants, widths=widths, repeats=repeats, number=number)
    record = {"date": datetime.date.today().isoformat(), "machine": _machine(), "threads": result.threads,
              "torch": torch.__version__, "command": "python -m course_utils.normbench --store-compiled",
              "elements": result.elements, "table": result.table(),
              "median_us": {f"{v} @ d={d}": result.median_s(v, d) * 1e6 for v in result.variants for d in widths
                            if (v, d) in result.times},
              "compiled_saving": {str(d): result.saving("LayerNorm by hand, compiled", "RMSNorm by hand, compiled", d)
                                  for d in widths if result.has("RMSNorm by hand, compiled")},
              "compile_s": {f"{v} @ d={d}": t for (v, d), t in result.compile_s.items()}, "failed": result.failed}
    old = load_stored(path)
    if old and "sweep" in old:
        record["sweep"] = old["sweep"]  # store_sweep's result lives in the same file
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return record


SWEEP_KEEP = (COPY, "F.layer_norm", "RMSNorm by hand")


def store_sweep(path: Path = STORED, sizes_mib: Sequence[int] = BIG_SWEEP_MIB) -> dict:
    """Run the size sweep with the copy, F.layer_norm and RMSNorm by hand (64 MiB included: beyond the cache) and
    store it, dated, under "sweep" in the stored file (the compiled pair's record is kept)."""
    results = lesson_sweep(sizes_mib, SWEEP_KEEP)
    rows = [dict(mib=r.elements * 4 / 2 ** 20, variant=v, median_us=r.median_s(v, r.widths[0]) * 1e6,
                 gbps=r.gbps(v, r.widths[0]), x_copy=r.x_copy(v, r.widths[0]),
                 faults=r.faults.get((v, r.widths[0]), float("nan")))
            for r in results for v in r.variants if r.has(v)]
    record = load_stored(path) or {}
    record["sweep"] = {"date": datetime.date.today().isoformat(), "machine": _machine(),
                       "threads": results[0].threads, "torch": torch.__version__,
                       "command": "python -m course_utils.normbench --store-sweep", "table": sweep_table(results),
                       "rows": rows}
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return record["sweep"]


def stored_sweep_text(record: dict | None, mib: float = 64) -> str:
    """The stored size sweep's rows at `mib` MiB per tensor, labelled as stored, with date, machine and command."""
    sweep = (record or {}).get("sweep")
    if sweep is None:
        return "no stored size sweep: run `python -m course_utils.normbench --store-sweep`"
    rows = [r for r in sweep["rows"] if r["mib"] == mib]
    lines = [f"STORED RESULT (not measured in this run): {sweep['date']}, {sweep['machine']}, {sweep['threads']} "
             f"thread(s), torch {sweep['torch']}", f"command: {sweep['command']}",
             f"{'MiB/tensor':>10}  {'variant':<24} {'median µs':>10} {'GB/s':>6} {'x copy':>7} {'faults':>7}"]
    lines += [f"{r['mib']:>10g}  {r['variant']:<24} {r['median_us']:>10.0f} {r['gbps']:>6.1f} {r['x_copy']:>7.2f} "
              f"{r['faults']:>7.0f}" for r in rows]
    return "\n".join(lines)


def sweep_ratios(results: list[BenchResult], variant: str) -> list[tuple[float, float, float]]:
    """(MiB per tensor, the copy's GB/s, variant's time / the copy's) at each size of a size sweep."""
    return [(r.elements * 4 / 2 ** 20, r.gbps(COPY, r.widths[0]), r.x_copy(variant, r.widths[0])) for r in results]


def load_stored(path: Path = STORED) -> dict | None:
    """The stored compiled-pair result, or None if it was never stored."""
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def stored_text(record: dict | None) -> str:
    """The stored result, labelled as stored, with its date, machine and command."""
    if record is None:
        return "no stored compiled result: run `python -m course_utils.normbench --store-compiled`"
    return "\n".join([f"STORED RESULT (not measured in this run): {record['date']}, {record['machine']}, "
                      f"{record['threads']} thread(s), torch {record['torch']}", f"command: {record['command']}",
                      "", record["table"]])


def lesson_variants(compiled: bool = False) -> list[Variant]:
    """default_variants with notebook 05's own layer_norm and rms_norm, read from its lesson cells."""
    lessons = lesson_functions("05_rmsnorm")
    return default_variants(lessons["layer_norm"], lessons["rms_norm"], compiled=compiled)


def lesson_backward_variants() -> list[Variant]:
    """backward_variants with notebook 05's own layer_norm and rms_norm."""
    lessons = lesson_functions("05_rmsnorm")
    return backward_variants(lessons["layer_norm"], lessons["rms_norm"])


def report(long: bool = False, compiled: bool = True, block: bool = True,
           sweep_mib: Sequence[int] = BIG_SWEEP_MIB) -> str:
    """What course_utils.bench puts in its report: the cost model's micro-experiment, the forward table, a live
    compiled pair at d = 512, forward+backward, the whole block and the size sweep (with 64 MiB)."""
    lessons = lesson_functions("05_rmsnorm")
    ln, rms = lessons["layer_norm"], lessons["rms_norm"]
    parts = ["Cost model micro-experiment (one fused op against two, and more arithmetic in the same passes):",
             run(micro_variants(), **{**settings(False), "widths": (512,)}).table(),
             "Forward, the notebook's default run:", run(lesson_variants(compiled=long), **settings(long)).table()]
    if compiled:
        parts += ["The compiled pair (torch.compile of the hand-written norms), measured in this run:",
                  run(compiled_pair(), widths=(512,), repeats=15, number=5).table()]
    parts += ["Forward + backward:", run(backward_variants(ln, rms), widths=(512,), repeats=9, number=2).table()]
    if block:
        parts += ["Whole block against its norms alone:", block_text(block_timing())]
    if sweep_mib:
        parts += ["Size sweep (MiB per tensor) against the last-level cache:", sweep_table(lesson_sweep(sweep_mib))]
    return "\n\n".join(parts)


def main(argv: Sequence[str] | None = None) -> BenchResult | None:
    """Command line: the default run, the long one (--long), the size sweep (--sweep) or the stored compiled pair."""
    parser = argparse.ArgumentParser(prog="python -m course_utils.normbench", description=__doc__.split("\n")[0])
    parser.add_argument("--long", action="store_true",
                        help="8 widths, 41 repeats of 10 calls, and torch.compile'd versions (several minutes)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads while timing (default 1)")
    parser.add_argument("--no-compile", action="store_true", help="with --long, skip the torch.compile'd versions")
    parser.add_argument("--sweep", action="store_true", help=f"sizes {', '.join(map(str, BIG_SWEEP_MIB))} MiB per "
                                                             "tensor, against the last-level cache")
    parser.add_argument("--store-compiled", action="store_true",
                        help=f"time the compiled pair and store it in {STORED.name} (with date, machine, command)")
    parser.add_argument("--store-sweep", action="store_true",
                        help=f"run the size sweep (with 64 MiB) and store it in {STORED.name} under 'sweep'")
    args = parser.parse_args(argv)
    setup(threads=args.threads)
    if args.store_sweep:
        print(store_sweep()["table"])
        return None
    if args.store_compiled:
        print(stored_text(store_compiled()))
        return None
    if args.sweep:
        print(sweep_table(lesson_sweep()))
        return None
    if args.long:
        result = run(lesson_variants(compiled=not args.no_compile), **settings(long=True),
                     progress=lambda i, n, text: print(f"  [{i}/{n}] {text} done", flush=True))
    else:
        result = run(lesson_variants(), **settings(long=False))
    print(result.table())
    return result


if __name__ == "__main__":
    main()
