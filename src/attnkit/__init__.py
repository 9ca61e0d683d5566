"""attnkit: scaled dot-product attention and its family, written once against the array API.

The same code runs on NumPy, PyTorch, JAX and any array-API library (through
``array-api-compat``), on CPU or accelerator::

    import attnkit as ak
    out = ak.scaled_dot_product_attention(query, key, value, is_causal=True)

Modules: :mod:`attnkit.attention` (the entry point), :mod:`attnkit.explain` (what a
call runs), :mod:`attnkit.blocked` (the blocked executor), :mod:`attnkit.reference`
(the plain formula), :mod:`attnkit.softmax`,
:mod:`attnkit.masks` (structured masks: causal, windows, padding, documents, global
tokens, BigBird, block-sparse), :mod:`attnkit.score_mods` (ALiBi, soft-capping),
:mod:`attnkit.merge`
(log-sum-exp merging), :mod:`attnkit.multi_head` (projections, heads, GQA),
:mod:`attnkit.multi_head.init`, :mod:`attnkit.rope` (rotary embeddings),
:mod:`attnkit.kv_cache` (incremental decoding), :mod:`attnkit.approx` (Linformer,
Performer, Nystromformer), :mod:`attnkit.rollout` (aggregating attention weights,
rollout), :mod:`attnkit.errors`. The command line is the application, :mod:`attnkit.app`.

The core call: ``scaled_dot_product_attention``
-----------------------------------------------

The signature, sketched (each argument's contract:
``help(attnkit.scaled_dot_product_attention)``)::

    out = ak.scaled_dot_product_attention(
        query, key, value,                 # (..., Hq, L, E), (..., Hkv, S, E), (..., Hkv, S, Ev)
        attn_mask=None,                    # bool (True = may attend) | additive float (0 / -inf)
        dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,   # as torch names them
        *, causal_alignment="top_left",    # or "bottom_right" (FlashAttention, kv-cache decoding)
        window=None,                       # (left, right) or W = (W, W): query i sees keys
                                           # i-left .. i+right; None on a side = unbounded
        return_weights=False,              # -> (out, weights (..., Hq, L, S))
        return_lse=False,                  # -> (out, lse (..., Hq, L)); lse = -inf on empty rows
        q_offset=0, kv_offset=0,           # absolute positions of the first query / key
        rng=None,                          # numpy Generator | torch.Generator | JAX key (dropout)
        impl="auto",                       # "auto" | "generic" | "reference"
        block_size=None,                   # query rows per block (default: a cost model)
        score_mod=None,                    # f(scores, q_idx, kv_idx, head): ALiBi, softcap, ...
    )
    out, lse = ak.merge_partials([out_a, out_b], [lse_a, lse_b])   # attention over a ∪ b

Semantics, each one a conformance case:

- Rank >= 2; leading dims broadcast by array-API rules; the 3-D `(batch, L, E)` and the
  2-D `(L, E)` work. Default scale `1/sqrt(E)`; any finite scale, negative or tiny.
- GQA when `enable_gqa` and `Hq % Hkv == 0`: query head `h` uses key/value head
  `h // (Hq/Hkv)` (as PyTorch), computed by reshaping the query to
  `(..., Hkv, Hq/Hkv, L, E)`; key and value heads are never copied. A key or value of
  one head broadcasts to the other's heads (PyTorch repeats them separately); other
  unequal key and value head counts raise a ShapeError.
- Causal alignment for `L = 2`, `S = 4`:

  ::

      top_left (PyTorch)      bottom_right (FlashAttention, decoding)
          k0 k1 k2 k3             k0 k1 k2 k3
      q0  x  .  .  .          q0  x  x  x  .
      q1  x  x  .  .          q1  x  x  x  x

  `bottom_right` is `top_left` with `q_offset` increased by `S - L`. With `q_offset` and
  `kv_offset` the causal and window rules compare absolute positions
  (`kv_offset + j <= q_offset + i`), so attention computed piece by piece (key blocks,
  a kv cache, ring attention) stays right: compute pieces with `top_left` and absolute
  offsets.
- A query row with nothing to attend (fully masked, causal with `L > S`, a window out of
  reach) gives output 0, weights 0, lse `-inf` and gradient 0, never NaN.
- Masked positions never influence anything, on every path (`auto`, `generic`,
  `reference`, every backend kernel):
  - a NaN or inf in a key changes only the rows allowed to attend that key: scores at
    masked positions are replaced with `where`, never added to;
  - a key/value row that no query may attend (padding, keys out of every window's or
    the causal reach, columns dead only through `attn_mask` AND a window, under any
    mask kind) cannot leak through `0 * NaN` in the products: where some pair is
    masked and the inputs are not known to be finite (a concrete check found NaN or
    inf, or the values are traced under `jax.jit`), each query block zeroes the key and
    value rows no row of the block may attend, and the query rows that attend nothing;
  - a value row that some query attends and that holds NaN may spread through the
    product `weights @ value` (0 * NaN) to rows that do not attend it, as in every
    framework; rows attending it are NaN in any case.

  The fused kernels that add `-inf` to a masked score (PyTorch's SDPA, whole or per
  block) are used only where this cannot matter: with a mask or causal structure the
  output of a whole-call SDPA is checked finite (one sum over `L x Ev`) and the call
  goes to the generic path otherwise; under autograd the inputs are checked instead,
  and the per-block kernels run only on inputs checked finite (one sum per operand,
  O((L + S) E) against the O(L S E) attention).
- A row that attends a NaN score gives NaN output and lse NaN on every path (it did
  attend something non-finite); rows with nothing to attend give lse `-inf`.
- float16 and bfloat16 inputs accumulate scores and softmax in float32 and return their
  own dtype (the lse is float32).
- Dropout only when `dropout_p > 0`, drawn from the explicit backend-native `rng` (attnkit
  keeps no hidden random state); the weights returned are the ones applied. The same rng
  state gives the same result for the same call (the pattern is drawn per query block, so
  it depends on `block_size`). JAX keys are not stateful: split them between calls.
- `impl="reference"` is the plain full-matrix formula; `impl="generic"` the array-API
  executor in query blocks, whose memory is O(block x S) unless weights are requested,
  and which touches only the key columns a block can see under causal and window
  structure; `impl="auto"` picks the best exact path (a backend's fused kernel where its
  semantics match exactly, `help(attnkit.backends)`; else the generic one).
- Every array created inside uses the inputs' namespace, dtype and device; `src/attnkit`
  imports no framework (a test enforces it). What the standard lacks (random numbers for
  dropout) lives in `backends/<name>/`, installed as `attnkit.backends.<name>`.

Bad input raises, before any work, a `ValueError` or `TypeError` subclass exported by
attnkit (`ShapeError`, `DTypeError`, `NamespaceMismatchError`, `DeviceMismatchError`,
`ParameterError`, `ArgumentTypeError`; all are `AttnkitError`), for example:

::

    ShapeError: key has 9 features on its last axis but query has 8: query (1, 1, 4, 8),
    key (1, 1, 4, 9), value (1, 1, 4, 8). Query and key must share E (value may differ).

Refinements of the design contract, and why:
- `block_size` was added so users (and the tests) can choose the blocked executor's
  granularity, like FlashAttention's block sizes; results do not depend on it. By default
  it is chosen by a cost model: the work of the key columns a block reads plus a fixed
  per-block overhead, within a 16 MiB score budget (for a backend kernel that holds only
  some heads' scores at once, what it holds).
- `score_mod` was added (FlexAttention's name and signature) for ALiBi, soft-capping and
  user functions, computed inside the blocked executor.
- `impl="auto"` uses PyTorch's fused `F.scaled_dot_product_attention` for the whole call
  where its semantics equal attnkit's exactly (no dropout, weights or lse requested, no
  window or structured mask, causal only with the diagonal at position 0); under windows
  and structured masks it runs the blocked executor and hands each block (query rows,
  the block's key columns, the tile's mask, the scale) to SDPA. The interior of a window
  (the blocks the sequence's ends do not clip, which all read the same key columns
  relative to their first row through the same tile: a *run*, `attnkit.blocked.translated_runs`) goes to
  SDPA in one call, in blocks of 32 rows over an `unfold`ed view of the keys (no copy):
  each row reads 31 keys beyond its window at most, and no per-block dispatch is paid.
  Under autograd the backward pass recomputes the run in pieces of at most 2^24
  unfolded key elements, adding into one gradient buffer per operand (SDPA returns the
  gradient of its unfolded keys, 9 times their size at 32 rows and a window of 256;
  autograd through slices would allocate a full-size zero tensor per piece). On NumPy, `auto` runs the
  blocked executor with a per-block kernel that computes each head's block, a slice of
  rows at a time, in one reused buffer per thread (matmul and exp in place). Heads run on
  as many threads as BLAS is set to use (`OPENBLAS_NUM_THREADS`, `threadpoolctl`), each
  product single-threaded meanwhile: NumPy's exp and masking passes use one core, and
  OpenBLAS splits these thin (rows x 64) x (64 x S) products poorly. While such a block
  runs, BLAS is held at one thread through `threadpoolctl` and then restored; one call
  runs in parallel at a time (a concurrent call from another thread runs its blocks
  sequentially), and with BLAS at one thread the kernel is sequential. Exponentials that
  would be subnormal (a score more than 87 below its row's maximum in float32) are
  flushed to 0: such a weight is below 2^-126 next to the maximum's 1, and x86 computes
  with subnormal operands several times slower. The generic path everywhere else. The
  conformance matrix runs `auto` on every case.
- Two exact shortcuts in the blocked executor save passes over each block's scores:
  when the Cauchy-Schwarz bound `scale * max|q_i| * max|k_j|` proves that every score
  is small enough (about 78 in float32 at S = 4096: no exp can overflow, underflow or
  turn subnormal), the row maximum is not subtracted, which is the same softmax; and
  without weights or dropout the row sums come out of the value product, `e @ [v | 1]`.
  The bound is decided on concrete values only (under `jax.jit` the maximum is always
  subtracted) and only where L and S are at least 2E (the norms must cost less than the
  passes they save).
- A call without mask, window, dropout or `score_mod` whose array types, shapes, dtypes,
  devices and scalar arguments match an earlier valid call reuses its validation (a
  decoding loop validates once); any difference is checked in full. Where that earlier
  call went to PyTorch's SDPA whole (and asked for no weights, lse or block size), the
  next goes straight to SDPA with the same arguments: a decoding step (L = 1, S = 1024,
  8 heads) costs about 5 us over SDPA's 75 to 100 us.
- A backend may declare the fixed cost of one executor block (`block_overhead_elements`):
  JAX does (each block is a dozen XLA operations of its own under `jax.jit`), so windows
  take blocks of 128 rows there, 64 elsewhere, and compile in half the time.
- With `return_weights`/`return_lse` the result is a named tuple (`AttentionWithWeights`,
  `AttentionWithLSE`, `AttentionWithWeightsAndLSE`): it unpacks as the contract's tuple
  and also has `.output`, `.weights`, `.lse`.
- Masks of rank 0 or 1 (such as a key-padding row `(S,)`) are accepted; they broadcast
  like any other mask.
- An additive float mask is converted to the compute dtype (float32 for 16-bit inputs):
  a float32 mask holding `-1e30` keeps that finite value with float16 inputs on every
  path (PyTorch's fused kernel would round it to `-inf`; `auto` does not hand it such a
  mask).
- PyTorch's `torch.nn.attention.bias.CausalBias` (`causal_upper_left`,
  `causal_lower_right`) is accepted as `attn_mask`: it means `is_causal` with the
  `top_left` or `bottom_right` alignment (checked against L and S). Nested (jagged)
  tensors are refused with the fix (pad them and use `masks.key_padding`).
- With float16/bfloat16 inputs that require gradients on the CPU, `auto` does not use
  PyTorch's fused kernel for the whole call: its 16-bit gradients were 2 to 4 times less
  accurate than float32 accumulation (GQA dK/dV, float-mask dK at L = 512); the generic
  path accumulates in float32 and matches it.
- Boolean arguments (`is_causal`, `enable_gqa`, `return_weights`, `return_lse`) must be
  `True` or `False`: `"no"`, `0` or `None` are refused rather than read by truthiness.
  Inputs must be float16, bfloat16, float32 or float64 (NumPy's `longdouble` is refused
  rather than computed in less precision than it claims).

Architecture
------------

Three layers, each importing only the ones below it (import-linter checks the contracts
in `pyproject.toml` in `nox -s lint`; `tests/test_layers.py` shows each contract breaking
on a deliberately violating import):

::

    application   attnkit.app (CLI, demo, verify, bench, golden vectors), attnkit.viz;
                  attnkit.app.{numpy,torch,jax}: the tools' framework code (each
                  framework's own attention for ``attnkit bench`` and ``attnkit verify``
                  to compare with, golden-vector readers, model capture, the
                  distributed benchmarks' workers)
                     │ may import both layers below; only attnkit.app.<framework>
                     │ imports its framework, and never another's
    backends      attnkit.backends: the Backend protocol (what the math calls,
                  MathBackend, declared by the math in attnkit/backend_protocol.py; what
                  tools call, ToolBackend, in backends/protocol.py); one subclass
                  per framework (numpy, torch, jax, strict) with its kernels and
                  front-ends (torch nn modules, the HF backend, torch.distributed ring,
                  jax.nn's drop-in, jax mha, the Flax module, JAX ring and Ulysses)
                     │ import only the math's public modules, never each other
    the math      attnkit: validation, dispatch, the blocked executor, softmax, merge, masks,
                  score mods, multi-head, RoPE, kv cache, approximations, rollout
                     standard library and array_api_compat only

Where each concept lives: the public function `attention.py` (contract, then
`call_checks.validate`, `_dispatch.attend`, finish); the call's options `options.py`; every
check of a call from `call_checks.py` (one entry, `validate`: plain arguments from
`checks.py`, arrays `array_checks.py`, masks `structure_checks.py`; multi-head's
`multi_head/checks.py`); the validated call `problem.py`; the planner `plan.py`; what `torch.compile` needs, in one place, `compiling.py`; the choice of
path, the caches of repeated calls and the autodiff hook `_dispatch.py`
(`explain.py` prints it); the executor `blocked/` (`executor.py` the loop over query
blocks, `block.py` the per-block formula and its exact variants, `tiles.py`,
`operands.py`, `shortcuts.py`, `cost.py` the block size, `translated_runs.py` a window's
interior, `backward.py` the backward pass and `accumulate.py` its key-segment sums);
`vjp.py` (`attention_vjp`, and the forward/backward pair the frameworks' autodiff
wraps); the plain formula `reference.py` (the file to read first); the NaN guard
`nan_guard.py`; `softmax.py`, `merge.py`, `dropout.py`; `masks/` (geometry, the
mask algebra, windows, layouts, array masks); `multi_head/` (`layer.py`,
`init.py`, `params.py`, `vjp.py`, `masks.py`, `checks.py`), `ring/` (`plan.py` the ring's
pieces, `backward.py` a key block's backward), `rope.py`,
`kv_cache.py`, `score_mods.py`, `approx/`, `rollout.py`. How the math finds a backend
without importing one: `registry.py` (the package root imports `attnkit.backends`, which
registers its lookups there). In the backends, one subpackage per family of front-ends:
PyTorch's kernels `torch/kernels.py`, its modules `torch/nn/` (`fit.py`: autocast,
nested tensors, torch's Transformer layers), the transformers backend `torch/hf/`
(`compat.py`: which families it serves), ring and Ulysses over processes
`torch/distributed/` (`checks.py`, `layout.py`, `ring.py`, `ulysses.py`); JAX's drop-in
for `jax.nn.dot_product_attention` `jax/nn.py`, `jax/mha.py`, `jax/flax.py`, ring and
Ulysses over a mesh `jax/sharding/` (`checks.py`, `zigzag.py`, `layout.py`, `steps.py`,
`ulysses.py`). Each
framework's own attention, which `attnkit bench` and `attnkit verify` compare with
(`peers*.py`), the golden vectors' readers (`numpy/golden*.py`), model capture
(`torch/capture*.py`) and the distributed benchmarks' workers live in
`attnkit.app.<framework>`.

**What a contributor may touch**: the math must stay framework-free; a framework's code
goes into its backend; a kernel must not change semantics (the conformance matrix runs
`auto`, `generic` and `reference` on every case, so a kernel that differs fails there).
Modules that moved in this structure (the old paths are gone: a math or backend module
may not import the application, so they cannot forward):

| was | now |
|---|---|
| `attnkit.cli` (the `attnkit` command's `main`), `attnkit.cli_verify`, `attnkit.cli_viz`, `attnkit.demo` | `attnkit.app.cli`, `attnkit.app.cli_verify`, `attnkit.app.cli_viz`, `attnkit.app.demo` |
| `attnkit.bench` (`python -m attnkit.bench`, the worker) | `attnkit.app.bench.cases`, `.measure`, `.worker` (`python -m attnkit.app.bench.worker`) |
| `attnkit.bench_targets`, `attnkit.bench_report` | `attnkit.app.bench.targets`, `.settings`, `.machine`, `.report` |
| `attnkit.bench_approx`, `attnkit.bench_approx_inputs`, `attnkit.bench_approx_report` | `attnkit.app.bench.approx.cases`, `.measure`, `.worker`, `.inputs`, `.errors`, `.report` |
| `attnkit.backends.torch.bench_hf` | `attnkit.app.bench.hf` (timing; the model it runs lives in the torch backend) |
| `attnkit.backends.{numpy,torch,jax}.bench` | the baselines of `attnkit bench`, in each backend |
| `attnkit.backends.verify`, `attnkit.backends.verify_frameworks` | `attnkit.app.verify`, `attnkit.app.verify_frameworks`, `.verify_findings` (reading and measuring the vectors, and each framework's half, in the backends) |
| `attnkit.golden`, `conformance/golden/` | `attnkit.app.golden` (`src/attnkit/app/golden/`, the one copy) |
| `attnkit.backends.display`, `attnkit.backends.plot` | `attnkit.app.display`, `attnkit.viz.figures` |
| `attnkit.viz.aggregate` (the module) | `attnkit.rollout`; `viz.aggregate` and `viz.rollout` are unchanged |
| `attnkit.dense` (the executor), `attnkit.runs` | `attnkit.blocked` (`.executor`, `.block`, `.tiles`, `.operands`, `.shortcuts`, `.cost`), `attnkit.blocked.translated_runs` |
| the signature caches and kernel lookup in `attnkit.attention` and `attnkit._validate` | `attnkit._dispatch` |
| `attnkit.backends.torch.fused`, `attnkit.backends.numpy.fused` | `attnkit.backends.torch.kernels`, `attnkit.backends.numpy.kernel` |
| the module functions of `attnkit.backends.<name>` | methods of `attnkit.backends.load(name)`, a `Backend` |
| `attnkit.masks` (one module), `attnkit._shapes` | `attnkit.masks` (a package, the same names), `attnkit.shapes` |
| `attnkit.backends.{numpy,torch,jax}.peers*`, `attnkit.backends.numpy.golden*`, `attnkit.backends.torch.capture*`, `.minilm_qkv`, `.distributed_bench`, `attnkit.backends.jax.sharding_bench` | the same module names under `attnkit.app.{numpy,torch,jax}` (e.g. `attnkit.app.torch.capture`, `python -m attnkit.app.jax.sharding_bench`) |
| `attnkit.validation` (a module, then a package), `attnkit._validate`, `._validate_arrays`, `._validate_structure`, `._mha_validate` | `attnkit.call_checks` (`check_call`, `CallInfo`, `validate`), `attnkit.array_checks`, `attnkit.structure_checks`, `attnkit.multi_head.checks`; `default_block_size` in `attnkit.plan` |
| `attnkit.problem.Problem` (returned by `check_call`), `attnkit._problem` | `attnkit.problem` (private); `check_call` returns the public `attnkit.call_checks.CallInfo` |
| `attnkit.multi_head`, `.multi_head_init`, `.multi_head_params`, `.multi_head_vjp`, `._mha_masks` | the package `attnkit.multi_head` (`.layer`, `.init`, `.params`, `.vjp`, `.masks`, `.checks`; the same public names) |
| `attnkit.ring_plan`, `attnkit.partial_backward`, `attnkit.masked_operands`, `attnkit.vjp.differentiable_attention` | `attnkit.ring.plan`, `attnkit.ring.backward`, `attnkit.nan_guard`, `attnkit._dispatch.differentiable_attention` |
| the call's 18 parameters passed positionally inside | one `attnkit.options.Options`, built once by each public function |
| `torch.compile`'s accommodations in registry, dispatch, cost and masks | `attnkit.compiling` |
| `attnkit.backends.torch.nn_*`, `.hf_*`, `.distributed_*`; `attnkit.backends.jax.sharding_*`, `.ring_*`, `.ulysses` | packages per family: `attnkit.backends.torch.nn`, `.hf`, `.distributed`, `attnkit.backends.jax.sharding` (their public names where they were) |
| `attnkit.backends.Backend`'s one docstring | `attnkit.backend_protocol.MathBackend` (what the math calls, with `Kernels`) and `attnkit.backends.protocol.ToolBackend`; `Backend` is both, under the same name, and `attnkit.backends` re-exports all four |

The old paths are gone (a math or backend module may not import the application, so
they cannot forward). `attnkit.viz`, `attnkit.backends.torch.nn` and
`attnkit.backends.torch.hf` keep their names and contents.

"""  # noqa: E501

from __future__ import annotations

from . import approx, masks, score_mods
from .attention import (
    AttentionWithLSE,
    AttentionWithWeights,
    AttentionWithWeightsAndLSE,
    scaled_dot_product_attention,
)
from .errors import (
    ArgumentTypeError,
    AttnkitError,
    AttnkitWarning,
    DeviceMismatchError,
    DTypeError,
    NamespaceMismatchError,
    ParameterError,
    ShapeError,
)
from .explain import AttentionPlan, explain
from .kv_cache import KVCache, append_kv, init_kv_cache
from .merge import merge_partials
from .multi_head import (
    MultiHeadOutput,
    MultiHeadParams,
    init_multi_head_params,
    multi_head_attention,
    multi_head_attention_vjp,
)
from .rope import Rope, apply_rope
from .vjp import attention_vjp

__version__ = "0.1.0"

__all__ = [
    "ArgumentTypeError",
    "AttentionPlan",
    "AttentionWithLSE",
    "AttentionWithWeights",
    "AttentionWithWeightsAndLSE",
    "AttnkitError",
    "AttnkitWarning",
    "DTypeError",
    "DeviceMismatchError",
    "KVCache",
    "MultiHeadOutput",
    "MultiHeadParams",
    "NamespaceMismatchError",
    "ParameterError",
    "Rope",
    "ShapeError",
    "__version__",
    "append_kv",
    "apply_rope",
    "approx",
    "attention_vjp",
    "explain",
    "init_kv_cache",
    "init_multi_head_params",
    "masks",
    "merge_partials",
    "multi_head_attention",
    "multi_head_attention_vjp",
    "scaled_dot_product_attention",
    "score_mods",
]

# The composition root: the backends register their lookup with the math
# (attnkit.registry), so the math finds them without importing them.
from . import backends as backends
