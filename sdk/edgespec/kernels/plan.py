"""How edgespec's block kernel computes on this CPU: chosen by measurement, not by feature flags.

A CPU's flags say which SIMD paths it runs, not which is fastest for a model's shapes: on an
Intel Xeon with two real cores the AVX-512 path (the most work per instruction) decoded
slower than the AVX2 one, and whether a matrix is worth splitting between two threads
depends on whether they are two cores or two hyperthreads of one. So when a program that
calls `edgespec::block_linear` first loads on a CPU, `plan_program` records the shapes its
forward calls the op with, times those shapes (random weights of the same sizes, streamed
from memory as in decoding) under candidate choices, and installs the fastest, per regime
of row counts:

    one_row    1 row      (autoregressive decoding)
    few_rows   2..16 rows (speculative verification), timed at 4
    many_rows  > 16 rows  (prefill), timed at 64 on the first few MB of shapes

A choice is a SIMD path, a prefetch distance and a split rule (which calls are shared among
ExecuTorch's threads). The search is coordinate-wise (path, then prefetch, then split), each
stage's candidates timed in interleaved passes (median of `reps`), and takes one to three
seconds for the default model; the plan is cached beside the kernel library (whose name already holds the CPU,
the sources and the flags) under the thread count and the shapes. Every choice gives the same
bits (block_linear.h: every path, split and prefetch distance computes the same float
operations), so a plan changes speed only. A cached plan this CPU cannot install (damaged,
edited, of another version) is measured again; a cache that cannot be written is skipped with a
note, the plan measured every run.

A plan timed while other processes kept the machine busy (`TimingLoad`: their CPU time over
the timing's wall time, from /proc/stat, more than `BUSY_CORES` cores) is provisional: its
winner may be the one that suffered least from the contention, not the fastest on a quiet
machine (an export's validation timed "every matrix split" on a 2-core Xeon; quiet, it read
2.56 ms against 2.44 for the flags' choice). The next loads time it again, and the quieter
timing is kept, up to `RETIMES` timings; `edgespec info` says when the plan was timed and
under what load.

`EDGESPEC_KERNEL_PLAN=default` skips the measurement (the flags' choice: the widest path,
prefetch 16, matrices under 128 KB on one thread).
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import os
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from functools import cache
from pathlib import Path

from edgespec.config import Record, from_dict, parsing
from edgespec.errors import EdgespecError, EdgespecNote
from edgespec.kernels import library
from edgespec.kernels.block_linear import FORMAT_IDS, PAIR_ROWS, TILE_BYTES
from edgespec.output_dir import renamed_into_place

PATHS = ("portable", "avx2", "avx-vnni", "avx512-vnni", "neon-dotprod", "neon-i8mm", "amx-int8")  # block_linear.h's Path values
REGIMES = {"one_row": 1, "few_rows": 4, "many_rows": 64}  # block_linear.h's Regime order; rows timed
PREFETCH = (0, 8, 16, 32)  # pair blocks ahead
NEVER = 1 << 62
SPLITS = {"small matrices on one thread": 128 << 10, "every matrix split": 0, "no matrix split": NEVER}
MANY_ROWS_BYTES = 3 << 20  # the prefill regime is timed on the first shapes holding this many weight bytes
ENV = "EDGESPEC_KERNEL_PLAN"
BUSY_CORES = 0.25  # other processes' CPU use during a timing (cores) above which it is done again on a later load
RETIMES = 3  # timings of a plan on a busy machine before the quietest one is kept for good


@dataclass(frozen=True)
class TimingLoad(Record):
    """What else ran on the machine while a plan was timed: other processes' CPU time (steal
    time of a VM's neighbours included) over the timing's wall time, in cores of the `cores`
    the OS counts."""

    others_cores: float
    cores: int

    @property
    def busy(self) -> bool:
        return self.others_cores > BUSY_CORES

    def describe(self) -> str:
        return f"{'busy' if self.busy else 'quiet'}: other processes used {self.others_cores:.2f} of {self.cores} cores meanwhile"


def _cpu_seconds() -> tuple[float, float] | None:
    """(CPU seconds every process has used, this process's own), or None where the OS has no
    /proc/stat."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return None
    busy = sum(fields) - fields[3] - fields[4]  # user nice system [idle iowait] irq softirq steal
    own = os.times()
    return busy / os.sysconf("SC_CLK_TCK"), own.user + own.system


class _LoadMeter:
    """Measures `TimingLoad` over a block: ``with _LoadMeter() as m: ...`` then ``m.load``
    (None without /proc/stat)."""

    def __enter__(self) -> _LoadMeter:
        self.load: TimingLoad | None = None
        self._start, self._t0 = _cpu_seconds(), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        end, wall = _cpu_seconds(), time.perf_counter() - self._t0
        if self._start is not None and end is not None and wall > 0:
            others = (end[0] - self._start[0]) - (end[1] - self._start[1])
            self.load = TimingLoad(round(max(others, 0.0) / wall, 3), os.cpu_count() or 1)


@dataclass(frozen=True)
class Choice(Record):
    """How a call computes: SIMD path, prefetch distance (pair blocks), and the split rule
    (calls whose tiles times their rows are fewer bytes than `min_parallel_bytes` run on one
    thread)."""

    path: str
    prefetch: int
    min_parallel_bytes: int

    @property
    def split(self) -> str:
        return next((name for name, b in SPLITS.items() if b == self.min_parallel_bytes), f"under {self.min_parallel_bytes} bytes on one thread")

    def label(self) -> str:
        slow = " (no SIMD path for this CPU: ~16x slower)" if self.path == "portable" else ""
        return f"{self.path}{slow}, prefetch {self.prefetch}, {self.split}"


@dataclass(frozen=True)
class RegimePlan(Record):
    """One regime's winner, its median pass time and the default choice's, and the last
    stage's candidates (label -> median ms of a pass), all timed side by side."""

    rows: int
    choice: Choice
    ms: float
    default_ms: float
    tried: dict[str, float]
    timed: str = "bare linears"  # or "the program's forward"

    def why(self) -> str:
        gain = self.default_ms / self.ms if self.ms > 0 else 1.0
        return (
            f"{self.choice.label()}: {self.ms:.3f} ms ({self.timed}, {self.rows} rows), "
            f"{gain:.2f}x the speed of the flags' choice ({self.default_ms:.3f} ms), side by side"
        )


@dataclass(frozen=True)
class KernelPlan(Record):
    """The choice per regime for one program's shapes at `threads` threads; `timed_at` (UTC,
    ISO 8601) and `load`: when it was timed and what else ran meanwhile; `timings`: how many
    times it has been timed (a busy timing is done again, up to `RETIMES`)."""

    threads: int
    calls: int  # op calls of one forward (the shapes timed)
    weight_mb: float
    regimes: dict[str, RegimePlan]
    tune_s: float
    timed_at: str = ""
    load: TimingLoad | None = None
    timings: int = 1

    @property
    def provisional(self) -> bool:
        """Timed on a busy machine, or under a load not measured (a plan cached before loads
        were), and not yet `RETIMES` times: to be timed again."""
        return (self.load is None or self.load.busy) and self.timings < RETIMES

    def when(self) -> str:
        """When and under what load it was timed, for `edgespec info`."""
        load = self.load.describe() if self.load is not None else "load not measured"
        again = "; timed again at the next load" if self.provisional else ""
        return f"timed {self.timed_at or 'at an unknown time'} in {self.tune_s:.1f} s ({load}){again}"

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: object) -> KernelPlan:
        """The plan `to_json` gave; ValueError for anything else (another shape, another type)."""
        try:
            with parsing("kernel plan field"):
                return from_dict(cls, d, "")
        except EdgespecError as e:
            raise ValueError(str(e)) from None

    def summary(self) -> dict:
        """What was chosen and why, per regime (for `edgespec bench --json`)."""
        return {
            "threads": self.threads,
            "tune_s": self.tune_s,
            "timed": self.when(),
            "paths_on_this_cpu": supported_paths(),
            **{k: r.why() for k, r in self.regimes.items()},
        }


@cache
def _lib() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(library.load()))
    i64, p64 = ctypes.c_int64, ctypes.POINTER(ctypes.c_int64)
    lib.edgespec_path_supported.argtypes, lib.edgespec_path_supported.restype = [i64], i64
    lib.edgespec_default_choice.argtypes, lib.edgespec_default_choice.restype = [p64], None
    lib.edgespec_set_choice.argtypes, lib.edgespec_set_choice.restype = [i64, i64, i64, i64], i64
    lib.edgespec_get_choice.argtypes, lib.edgespec_get_choice.restype = [i64, p64], None
    lib.edgespec_record_calls.argtypes, lib.edgespec_record_calls.restype = [i64], None
    lib.edgespec_recorded_calls.argtypes, lib.edgespec_recorded_calls.restype = [p64, i64], i64
    lib.edgespec_bench_new.argtypes, lib.edgespec_bench_new.restype = [p64, i64, i64], ctypes.c_void_p
    lib.edgespec_bench_pass.argtypes, lib.edgespec_bench_pass.restype = [ctypes.c_void_p, i64, i64, i64, i64, i64, i64], ctypes.c_double
    lib.edgespec_bench_read.argtypes, lib.edgespec_bench_read.restype = [ctypes.c_void_p, i64, i64], ctypes.c_double
    lib.edgespec_bench_free.argtypes, lib.edgespec_bench_free.restype = [ctypes.c_void_p], None
    return lib


def supported_paths() -> list[str]:
    """The SIMD paths this CPU runs (without the portable one, unless it is the only one)."""
    lib = _lib()
    simd = [p for i, p in enumerate(PATHS) if i > 0 and lib.edgespec_path_supported(i)]
    return simd or ["portable"]


def current(regime: str) -> Choice:
    """The choice in force for `regime`."""
    out = (ctypes.c_int64 * 3)()
    _lib().edgespec_get_choice(list(REGIMES).index(regime), out)
    return Choice(PATHS[out[0]], out[1], out[2])


def install(plan: KernelPlan) -> None:
    """Make `plan`'s choices the ones every block-linear call of this process uses."""
    for name, r in plan.regimes.items():
        c = r.choice
        known = name in REGIMES and c.path in PATHS
        if not (known and _lib().edgespec_set_choice(list(REGIMES).index(name), PATHS.index(c.path), c.prefetch, c.min_parallel_bytes)):
            raise ValueError(f"the plan's {name!r} choice ({c.path!r}, prefetch {c.prefetch}, {c.min_parallel_bytes} bytes) does not run on this CPU")


def install_flags_choice() -> None:
    """Back to the CPU's flags' choice in every regime."""
    c = flags_choice()
    for i in range(len(REGIMES)):
        _lib().edgespec_set_choice(i, PATHS.index(c.path), c.prefetch, c.min_parallel_bytes)


def record_shapes(run_forward: Callable[[], object]) -> list[tuple[int, int, int]]:
    """(out_features, in_features, format id) of each block-linear call `run_forward` makes."""
    lib = _lib()
    lib.edgespec_record_calls(1)
    try:
        run_forward()
    finally:
        lib.edgespec_record_calls(0)
    count = lib.edgespec_recorded_calls(None, 0)
    out = (ctypes.c_int64 * (3 * count))()
    lib.edgespec_recorded_calls(out, count)
    return [tuple(out[3 * i : 3 * i + 3]) for i in range(count)]


def _weight_bytes(n: int, k: int, fmt: int) -> int:
    """Packed bytes of an [n, k] matrix of format id `fmt` (block_linear.py's `pack`)."""
    name = next(f for f, i in FORMAT_IDS.items() if i == fmt)
    return 2 * -(-n // PAIR_ROWS) * (k // 32) * TILE_BYTES[name]


def tune(shapes: Sequence[tuple[int, int, int]], threads: int, forward: Callable[[int], object] | None = None, reps: int = 5) -> KernelPlan:
    """Time candidate choices and return the fastest per regime (module docstring).

    With `forward` (`forward(rows)` runs the program over that many new rows), the one_row and
    few_rows regimes time the program itself with each candidate installed: between its
    linears run the glue and the attention, so whether splitting a matrix pays depends on
    what the other thread does meanwhile, which bare linears back to back do not show. The
    many_rows regime (and every regime without `forward`) times `shapes` (one forward's calls)
    as bare linears over random weights of the same sizes."""
    lib, t0 = _lib(), time.perf_counter()
    sizes = [_weight_bytes(*s) for s in shapes]
    head, acc = 0, 0
    while head < len(shapes) and acc < MANY_ROWS_BYTES:
        acc, head = acc + sizes[head], head + 1
    # the regimes the program runs are timed through it; only the others need random weights,
    # of just the shapes they time (a copy of every matrix doubled the peak memory of a first load)
    by_program = {name: forward is not None and name != "many_rows" and _runs(forward, rows) for name, rows in REGIMES.items()}
    bare_shapes = max((head if name == "many_rows" else len(shapes)) for name in REGIMES if not by_program[name])
    flat = (ctypes.c_int64 * (3 * bare_shapes))(*[v for s in shapes[:bare_shapes] for v in s])
    bench = lib.edgespec_bench_new(flat, bare_shapes, max(REGIMES.values()))
    default = flags_choice()
    regimes = {}
    try:
        for index, (name, rows) in enumerate(REGIMES.items()):
            last = head if name == "many_rows" else len(shapes)

            def bare(c: Choice, rows=rows, last=last) -> float:
                return lib.edgespec_bench_pass(bench, rows, PATHS.index(c.path), c.prefetch, c.min_parallel_bytes, 0, last)

            def program(c: Choice, rows=rows, index=index, calls=2) -> float:
                lib.edgespec_set_choice(index, PATHS.index(c.path), c.prefetch, c.min_parallel_bytes)
                start = time.perf_counter()
                for _ in range(calls):
                    forward(rows)
                return 1000 * (time.perf_counter() - start) / calls

            measure = program if by_program[name] else bare

            def timed(cands: list[Choice], measure=measure) -> dict[Choice, float]:
                measure(cands[0])  # warm-up
                runs: dict[Choice, list[float]] = {c: [] for c in cands}
                for _ in range(reps):  # interleaved: every candidate sees the same machine
                    for c in cands:
                        runs[c].append(measure(c))
                return {c: statistics.median(v) for c, v in runs.items()}

            best, times = default, {}
            stages = [
                lambda b: [Choice(p, b.prefetch, b.min_parallel_bytes) for p in supported_paths()],
                lambda b: [Choice(b.path, d, b.min_parallel_bytes) for d in PREFETCH],
                lambda b: [Choice(b.path, b.prefetch, s) for s in SPLITS.values()] if threads > 1 else [],
            ]
            for stage in stages:  # each stage times the best so far and the default beside its candidates
                cands = list(dict.fromkeys([best, default, *stage(best)]))
                if len(cands) > 1 or not times:
                    times = timed(cands)
                    best = min(cands, key=times.get)
            what = "the program's forward" if measure is program else "bare linears"
            tried = {c.label(): round(v, 4) for c, v in times.items()}
            regimes[name] = RegimePlan(rows, best, round(times[best], 4), round(times[default], 4), tried, what)
            lib.edgespec_set_choice(index, PATHS.index(best.path), best.prefetch, best.min_parallel_bytes)
    finally:
        lib.edgespec_bench_free(bench)
    return KernelPlan(threads, len(shapes), round(sum(sizes) / 1e6, 2), regimes, round(time.perf_counter() - t0, 3))


def _runs(forward: Callable[[int], object], rows: int) -> bool:
    """Whether the program takes `rows` new rows in one call (a program with a static shape
    may not): else its regime is timed on bare linears."""
    try:
        forward(rows)
    except Exception:  # noqa: BLE001  (ExecuTorch reports a shape it refuses as a RuntimeError or ValueError)
        return False
    return True


def flags_choice() -> Choice:
    """What the CPU's flags alone pick (block_linear.h's `default_choice`)."""
    out = (ctypes.c_int64 * 3)()
    _lib().edgespec_default_choice(out)
    return Choice(PATHS[out[0]], out[1], out[2])


def plan_path(shapes: Sequence[tuple[int, int, int]], threads: int) -> Path:
    digest = hashlib.sha256(json.dumps(list(shapes)).encode()).hexdigest()[:16]
    return library.kernels_dir() / "plans" / f"{library.library_path().stem}-{threads}t-{digest}.json"


def plan_program(forward: Callable[[int], object], threads: int) -> KernelPlan | None:
    """Record the block-linear shapes of one `forward(1)` (the program over one new row), then
    install the cached plan for them on this CPU at `threads` threads, measuring it first (with
    the program itself, `tune`) when there is none, or when the cached one was timed on a busy
    machine (`KernelPlan.provisional`): then the quieter of the two timings is kept. None: the
    program calls no block linear, or `EDGESPEC_KERNEL_PLAN=default`."""
    if os.environ.get(ENV) == "default":
        return None
    shapes = record_shapes(lambda: forward(1))
    if not shapes:
        return None
    path = plan_path(shapes, threads)
    cached = _cached(path)
    if cached is not None and not cached.provisional:
        return cached
    with _LoadMeter() as meter:
        fresh = tune(shapes, threads, forward)
    timings = 1 if cached is None else cached.timings + 1
    fresh = dataclasses.replace(fresh, timed_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), load=meter.load, timings=timings)
    plan = fresh if cached is None or _quieter(fresh, cached) else dataclasses.replace(cached, timings=timings)
    _save(plan, path)
    install(plan)
    return plan


def _quieter(a: KernelPlan, b: KernelPlan) -> bool:
    """Whether plan `a` was timed on a quieter machine than `b` (a load not measured counts as quiet)."""
    return (a.load.others_cores if a.load else 0.0) <= (b.load.others_cores if b.load else 0.0)


def cached_plan(forward: Callable[[int], object], threads: int) -> KernelPlan | None:
    """The cached plan of the program `forward` runs (`plan_program`'s argument) at `threads`
    threads, installed, without timing anything; None where there is none yet."""
    shapes = record_shapes(lambda: forward(1))
    return _cached(plan_path(shapes, threads)) if shapes else None


def _cached(path: Path) -> KernelPlan | None:
    """The plan cached at `path`, installed; None (to measure it again) when there is none this
    CPU runs: no file, an unreadable or damaged one, one of another shape or naming a regime or
    choice this CPU does not have."""
    try:
        plan = KernelPlan.from_json(json.loads(path.read_text()))
        if plan.regimes.keys() != REGIMES.keys():
            return None
        install(plan)
    except (OSError, ValueError):  # ValueError: not UTF-8, not JSON, not a plan, not a plan of this CPU
        return None
    return plan


def _save(plan: KernelPlan, path: Path) -> None:
    """Cache `plan` at `path`; a cache that cannot be written is skipped with a note."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with renamed_into_place(path, ".plan-", ".json") as tmp:
            tmp.write_text(json.dumps(plan.to_json(), indent=1))
    except OSError as e:
        warnings.warn(
            f"the kernel plan could not be cached in '{path.parent}' ({e.strerror or e}), so it is measured again next run; set EDGESPEC_CACHE to a writable directory to keep it",
            EdgespecNote,
            stacklevel=3,
        )
