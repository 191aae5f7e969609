"""Load an edgespec `.pte` with ExecuTorch's Python runtime and call its methods."""

from __future__ import annotations

import functools
import warnings
from pathlib import Path

import torch

from edgespec import host
from edgespec.errors import EdgespecError
from edgespec.export import constants as C


def bindings():
    """ExecuTorch's C++ runtime bindings (`executorch.extension.pybindings._C`), imported alone.

    ExecuTorch's Python wrappers over them (`portable_lib`, `executorch.runtime`) import the
    exporter too (`executorch.exir`, and with it torch._dynamo and torchao): 3.5 s and 134 MB
    resident in every process that only runs programs (measured: 354 MB after importing
    `executorch.runtime` against 220 MB for torch and the bindings). The bindings need torch's
    libraries loaded first, which the import of torch above does."""
    from executorch.extension.pybindings import _C

    return _C


@functools.cache
def _load_executorch_kernels() -> None:
    """Load ExecuTorch's kernel libraries for the LLM ops (`llama::`: custom SDPA, KV update) and
    the quantized ones (`quantized_decomposed::`), as its packages ship them: once per process."""
    import importlib.util

    bindings()
    root = Path(importlib.util.find_spec("executorch").submodule_search_locations[0])
    for lib in ("extension/llm/custom_ops/libcustom_ops_aot_lib.so", "kernels/quantized/libquantized_ops_aot_lib.so"):
        torch.ops.load_library(str(root / lib))


def load_runtime_kernels(program: Path | None = None) -> str | None:
    """Register the non-delegated kernels an LLM program may use (custom SDPA, KV update,
    quantized embedding) and edgespec's own (exact attention, block linears; built on first
    use) when `program` calls them (`uses_edgespec_ops`) or is None (any program to come);
    without them loading fails with 'Missing operator'. Returns why edgespec's kernels could
    not be built, or None.

    ExecuTorch's libraries are loaded as files, as its Python modules for them do (importing
    those modules would bring its exporter: `bindings`)."""
    _load_executorch_kernels()
    from edgespec.kernels import library

    if program is not None and not uses_edgespec_ops(program):
        return None
    try:
        library.load()
    except EdgespecError as e:
        return str(e)
    return None


def uses_edgespec_ops(program: str | Path) -> bool:
    """Whether a `.pte` calls an `edgespec::` operator. Every operator's name is a string in the
    program's flatbuffer, which ends at `program_size` of ExecuTorch's extended header (bytes
    8-32: b"eh00", its length, program_size, segment_base_offset) when the file has segments
    (constants, delegate blobs) after it."""
    import mmap

    if Path(program).stat().st_size < 32:  # not a program: ExecuTorch's loading says so
        return False
    with open(program, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        end = int.from_bytes(m[16:24], "little") if m[8:12] == b"eh00" else len(m)
        return m.find(b"edgespec::", 0, end) >= 0


def set_threads(n: int) -> None:
    """ExecuTorch's threadpool size (0: leave its default, one thread per core). Call it
    before loading a program: XNNPACK keeps the pool it was loaded with, and resizing
    afterwards frees that pool under it (use after free)."""
    if n > 0:
        bindings()._unsafe_reset_threadpool(n)


def threads() -> int:
    """ExecuTorch's threadpool size now (what `set_threads` set; by default one per core)."""
    return int(bindings()._threadpool_get_thread_count())


def execute(method, inputs: list) -> list:
    """Run a loaded ExecuTorch method with torch's own OpenMP pool at one thread for the call.
    ExecuTorch's kernels that reach torch's parallel_for (llama::custom_sdpa in XNNPACK
    programs, from two rows on) would otherwise wake torch's workers beside ExecuTorch's own
    threads: the XNNPACK program's 2-row forward took 54.6 ms instead of 8.5 at one thread and
    29.8 instead of 12.8 at two (2-core AMD EPYC, 2026-12-04). Restored after, so eager torch
    code in the same process keeps its threads."""
    n = torch.get_num_threads()
    if n == 1:
        return method.execute(inputs)
    torch.set_num_threads(1)
    try:
        return method.execute(inputs)
    finally:
        torch.set_num_threads(n)


class LoadedMethod:
    """One method of a loaded program (as `executorch.runtime.Method`)."""

    def __init__(self, method):
        self._method = method

    def execute(self, inputs):
        """The method's outputs for `inputs` (a list of tensors and scalars)."""
        return self._method(inputs)


class LoadedProgram:
    """A program ExecuTorch's bindings loaded (as `executorch.runtime.Program`): its method
    names, each method loaded once on first use."""

    def __init__(self, program):
        self._program = program
        self._methods: dict[str, LoadedMethod | None] = {program.get_method_name(i): None for i in range(program.num_methods())}

    @property
    def method_names(self) -> set[str]:
        return set(self._methods)

    def load_method(self, name: str) -> LoadedMethod:
        if self._methods.get(name) is None:
            self._methods[name] = LoadedMethod(self._program.load_method(name))
        return self._methods[name]


class Program:
    """A loaded `.pte`: its methods by name and its metadata (constant) methods."""

    def __init__(self, path: str | Path, data_path: str | Path | None = None):
        """data_path: the data file holding the constants the program keeps outside it
        (a bundle's ``base.ptd``: manifest `program_data`), or None."""
        path = Path(path)
        if not path.is_file():
            raise EdgespecError(f"program '{path}' not found")
        if data_path is not None and not Path(data_path).is_file():
            raise EdgespecError(f"program data '{data_path}' not found (the program '{path.name}' reads its base weights from it)")
        no_kernels = load_runtime_kernels(path)
        et = bindings()
        try:
            loaded = et._load_program(
                str(path),
                enable_etdump=False,
                debug_buffer_size=0,
                program_verification=et.Verification.InternalConsistency,
                data_path=None if data_path is None else str(data_path),
            )
            self.program = LoadedProgram(loaded)
            self._forward = self.program.load_method(C.FORWARD)
        except Exception as e:
            why = f" (edgespec's kernels are not loaded: {no_kernels})" if no_kernels else ""
            raise EdgespecError(f"program '{path}' could not be loaded by ExecuTorch: {e}{why}") from None
        self.path = path

    def constant(self, name: str, many: bool = False):
        """The value a metadata method returns."""
        if name not in self.program.method_names:
            raise EdgespecError(f"program '{self.path}' has no metadata method '{name}'")
        out = execute(self.program.load_method(name), [])
        return list(out) if many else out[0]

    def call_forward(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        """`forward`'s outputs for these inputs."""
        return list(execute(self._forward, list(inputs)))


_said_openmp_spins = False


def _say_openmp_spins() -> None:
    """Warn once when torch's OpenMP workers spin beside the program's threads (torch imported
    before edgespec: edgespec.host.passive_openmp)."""
    global _said_openmp_spins
    if host.openmp_spins() and not _said_openmp_spins:
        _said_openmp_spins = True
        warnings.warn(
            "torch was imported before edgespec, so torch's OpenMP workers spin after each torch op and take cores from the "
            "program's threads (2-3x slower 2-thread decoding on a 2-core machine): import edgespec before torch, or set OMP_WAIT_POLICY=PASSIVE",
            RuntimeWarning,
            stacklevel=3,
        )


class ProgramRunner(Program):
    """A language-model program: `forward` plus its metadata methods."""

    def __init__(self, path: str | Path, data_path: str | Path | None = None, plan_kernels: bool = True):
        """plan_kernels: install the block kernel's plan for this program, timing it first where
        none is cached (False: the plan in force is left alone; `edgespec info` reads the cache)."""
        super().__init__(path, data_path)
        _say_openmp_spins()
        self.max_seq_len = int(self.constant(C.GET_MAX_CONTEXT_LEN))  # the context
        # the most tokens one call takes (ExecuTorch's get_max_seq_len; programs before
        # export.prefill_chunk answered the context there and took one token less)
        self.call_tokens = min(int(self.constant(C.GET_MAX_SEQ_LEN)), self.max_seq_len - 1)
        self.vocab_size = int(self.constant(C.GET_VOCAB_SIZE))
        self.eos_ids = tuple(int(x) for x in self.constant(C.GET_EOS_IDS, many=True))
        self.has_spec = C.SPEC_STEP in self.program.method_names
        self.has_next_token = C.NEXT_TOKEN in self.program.method_names
        self._next_token = None  # loaded on first use
        # sequences decode_rows decodes side by side (1: no batched method)
        self.batch_slots = int(self.constant(C.GET_BATCH_SLOTS)) if C.DECODE_ROWS in self.program.method_names else 1
        self._decode_rows = None  # loaded on first use
        self.kernel_plan = self._plan_kernels() if plan_kernels else None
        if self.has_spec:  # the SpecMethods of the program (edgespec.runtime.generate)
            self.depth = int(self.constant(C.GET_SPEC_DEPTH))
            self.topk = int(self.constant(C.GET_SPEC_TOPK))
            self.tree_size = int(self.constant(C.GET_SPEC_TREE_SIZE))
            self.branching = tuple(int(x) for x in self.constant(C.GET_SPEC_BRANCHING, many=True))
            self._step = None  # loaded on first use: each method holds its own packed weights

    def _plan_kernels(self):
        """The block kernel's plan for this program on this CPU and thread count, chosen by
        measurement the first time (edgespec.kernels.plan); None for a program without block
        linears. Its forwards write the first cache slots, which any prompt overwrites."""
        if not uses_edgespec_ops(self.path):
            return None
        from edgespec.kernels.plan import plan_program

        return plan_program(self.plan_forward, threads())

    def plan_forward(self, rows: int) -> torch.Tensor:
        """The program over `rows` new rows at position 0: what the kernel plan records and times
        (it writes the first cache slots, which any prompt overwrites)."""
        return self.forward(torch.zeros((1, rows), dtype=torch.long), 0)

    def forward(self, tokens: torch.Tensor, start_pos: int) -> torch.Tensor:
        """Logits of the last position, [V], after feeding tokens [1, T] at start_pos (in calls
        of at most `call_tokens`: on edgespec's kernels the bits of one call)."""
        out = execute(self._forward, [*self._feed_all_but_last(tokens, start_pos)])
        return out[0].reshape(-1, self.vocab_size)[-1]

    def next_token(self, tokens: torch.Tensor, start_pos: int) -> int:
        """The greedy next token after feeding tokens [1, T] at start_pos: `forward`'s argmax,
        from the program's `next_token` (a screened head: fewer bytes read than forward's)."""
        if self._next_token is None:
            self._next_token = self.program.load_method(C.NEXT_TOKEN)
        return int(execute(self._next_token, [*self._feed_all_but_last(tokens, start_pos)])[0][0])

    def decode_rows(self, tokens: torch.Tensor, slots: torch.Tensor, positions: torch.Tensor, emit: torch.Tensor) -> torch.Tensor:
        """Rows of several sequences in one call (`edgespec.export.constants.DECODE_ROWS`;
        edgespec.runtime.batch_decode drives it): logits [E, V] of the rows `emit` names."""
        if self.batch_slots == 1:
            raise EdgespecError(f"program '{self.path}' has no batched method: export it with export.batch_slots > 1")
        if self._decode_rows is None:
            self._decode_rows = self.program.load_method(C.DECODE_ROWS)
        return execute(self._decode_rows, [tokens, slots, positions, emit])[0]

    def _feed_all_but_last(self, tokens: torch.Tensor, start_pos: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Feed `forward` every chunk of `call_tokens` but the last; the last's inputs."""
        n = self.call_tokens
        last = (tokens.shape[1] - 1) // n * n
        for s in range(0, last, n):
            execute(self._forward, [tokens[:, s : s + n], torch.tensor([start_pos + s], dtype=torch.long)])
        return tokens[:, last:], torch.tensor([start_pos + last], dtype=torch.long)

    def spec_step(
        self, last: int, draft: torch.Tensor, pos: int, temperature: float, uniforms: torch.Tensor, gumbel: torch.Tensor
    ) -> tuple[list[int], torch.Tensor]:
        """One verify-and-draft call: (emitted tokens, next draft [D, K])."""
        if self._step is None:
            self._step = self.program.load_method(C.SPEC_STEP)
        toks, n, nxt = execute(
            self._step,
            [
                torch.tensor([last], dtype=torch.long),
                draft,
                torch.tensor([pos], dtype=torch.long),
                torch.tensor([temperature], dtype=torch.float32),
                uniforms,
                gumbel,
            ],
        )
        return toks[: int(n[0])].tolist(), nxt
