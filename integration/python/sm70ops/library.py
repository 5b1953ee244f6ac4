"""torch.ops.sm70ops: the four ops as torch custom ops, callable inside compiled graphs, and the
two forms the engines' drop-ins (sm70ops.engines) call: qsa_index_token_set (op 1's token set,
as vLLM's and SGLang's indexers hand it on) and qsa_attn_token_ids (op 2 over such token ids).

Importing this module (torch needed) registers them. The first call on a CUDA device creates the
plugin's context for that device (once, thread-safe: Plugin() finds the library as its docstring
says) and every later call there uses it; a host that wants another context, or none, says so:

    from sm70ops import Plugin, library
    library.register_context(Plugin().context(device=0, log=my_log))  # this one on device 0
    library.unregister_context(1)    # device 1: the generic path, no plugin
    blocks, mask, count = torch.ops.sm70ops.qsa_index(q, None, k_index, qsl, seq_lens, table,
                                                      2048, L, T, 4)   # topk, max L, max rows, c
    o = torch.ops.sm70ops.qsa_attn(q, k_cache, v_cache, qsl, seq_lens, table, blocks, mask,
                                   count, D**-0.5, L, T, gate)
    prepared = torch.ops.sm70ops.nvfp4_moe_prepare(*experts)  # at load; empty when declined
    y = torch.ops.sm70ops.nvfp4_moe(x, topk_ids, topk_weights, *experts, prepared)
    library.paths  # Counter {(op, "plugin" or "generic: REASON"): calls}

Each call takes the context of its tensors' CUDA device (or the one `using` sets on this thread,
which is asked even for CPU tensors: it declines them), asks the plugin's capability check
(host-only, microseconds) and runs the plugin on the device's current stream, or generic.py's
torch path when there is no context or the check declines. `paths` counts which ran and why.
The ops are functional: they allocate and return their outputs and mutate nothing. Shapes and
dtypes as in ops.py and shared/spec/ops.md; qsa_index returns the expansion only (no topk_idx).

Logging (routing.py), on the logger "sm70ops" (logging.getLogger("sm70ops").setLevel(
logging.ERROR) silences it): what the plugin says when it creates a context (the environment it
applied, the device), and a WARNING the first time each op falls back for each reason, with the
plugin's sentence:

    sm70ops: qsa_attn falls back to the generic path (ARCH): compute capability 9.0 is not
    SM70 (set SM70OPS_ALLOW_ARCH=90 to validate on it); logged once for this op and reason

Workspace: each plugin call allocates the check's workspace_bytes (none when it asks 0) on its
device right before execute, on that device's current stream: the caching allocator hands back a
cached block, its stream-ordered reuse makes that safe, and inside a CUDA-graph capture (also
torch.compile(mode="reduce-overhead")) the block comes from the graph's pool and lives with it.
Only the plugin path can be captured: the generic one reads the varlen metadata on the host.
`using` holds per thread; the contexts are shared (created under a lock); `paths` is shared and
unlocked: read it only as an estimate while calls run on other threads (Counter updates are not
atomic).
"""
import contextlib
import threading
from typing import Optional

import torch

from . import generic, ops, routing
from .dlpack import uint64_dtype
from .routing import (NO_CONTEXT, NO_PLUGIN, PLUGIN, paths, register_context,  # noqa: F401
                      reset_context, unregister_context)

_local = threading.local()  # .scope: (context, counter) while `using` holds


@contextlib.contextmanager
def using(ctx, counter=None):
    """Within the block, on this thread: every call uses `ctx` (None: the generic path) whatever
    its device, and counts its decision in `counter` too. TorchOps's per-object context."""
    saved = getattr(_local, "scope", None)
    _local.scope = (ctx, counter)
    try:
        yield
    finally:
        _local.scope = saved


def _route(device):
    """(context or None, extra counter or None, the path and the sentence a call counts and
    logs without a context) of a call on torch device `device`."""
    scope = getattr(_local, "scope", None)
    if scope is not None:
        return (*scope, NO_CONTEXT, "the caller's scope has no context")
    if device.type != "cuda":
        return None, None, NO_CONTEXT, f"tensors on {device.type}, not on a CUDA device"
    index = device.index if device.index is not None else torch.cuda.current_device()
    ctx, path = routing.device_context(index)
    return ctx, None, path, f"no plugin context for CUDA device {index}"


def _accepted(op, device, args):
    """(context, decision, counter) when the plugin takes `args` (an ops.py builder's result) of
    a call on `device`; None, with the reason counted (and logged the first time), when the
    generic path must run."""
    ctx, counter, no_context, why = _route(device)
    if ctx is None:
        routing.fall_back(op, no_context, why, counter)
        return None
    decision = ctx.check(op, args)
    if not decision.accepted:
        routing.fall_back(op, f"generic: {decision.reason}", decision.message, counter)
        return None
    return ctx, decision, counter


def _execute(op, args, accepted):
    """Runs an accepted call on the context's device's current stream, with a workspace of the
    check's size allocated there for this call (None when it asks 0 bytes)."""
    ctx, decision, counter = accepted
    size = decision.workspace_bytes
    cuda = torch.device("cuda", ctx.device)
    workspace = torch.empty(size, dtype=torch.uint8, device=cuda) if size else None
    ctx.execute(op, args, torch.cuda.current_stream(cuda), workspace, size)
    routing.count(op, PLUGIN, counter)


def _plugin_ran(op, device, args):
    """Runs `op` on the plugin when it accepts; False (the reason counted) when it declines."""
    accepted = _accepted(op, device, args)
    if accepted is not None:
        _execute(op, args, accepted)
    return accepted is not None


# Op 1: QSA index ---------------------------------------------------------------------------------


def _selection(q, topk, compress_ratio, page_size, max_seq_len):
    """Empty (sel_blocks [T, NB] int32, sel_mask [T, NB] uint64, sel_count [T] int32), NB =
    generic.selection_width. Traced with a dynamic max_seq_len, its min() is a guard: a graph
    recompiles once when the context's pages outgrow the budget's."""
    rows = q.shape[0]
    nb = generic.selection_width(topk, compress_ratio, page_size, max_seq_len)
    return (q.new_empty((rows, nb), dtype=torch.int32),
            q.new_empty((rows, nb), dtype=uint64_dtype()),
            q.new_empty((rows,), dtype=torch.int32))


@torch.library.custom_op("sm70ops::qsa_index", mutates_args=())
def qsa_index(q: torch.Tensor, weights: Optional[torch.Tensor], k_index: torch.Tensor,
              query_start_loc: torch.Tensor, seq_lens: torch.Tensor, block_table: torch.Tensor,
              topk: int, max_seq_len: int, max_query_len: int,
              compress_ratio: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Op 1's expansion at the caches' page size P = k_index.shape[1] * compress_ratio:
    (sel_blocks [T, NB] int32, sel_mask [T, NB] uint64, sel_count [T] int32), NB =
    generic.selection_width(topk, c, P, max_seq_len). weights None: the weight-free indexer."""
    page = k_index.shape[1] * compress_ratio
    # Allocated before the check, which describes them: the caching allocator makes that cheap,
    # and a declined call (whose generic path allocates its own) drops them.
    sel = _selection(q, topk, compress_ratio, page, max_seq_len)
    args = ops.qsa_index(q, weights, k_index, query_start_loc, seq_lens, block_table, topk=topk,
                         max_seq_len=max_seq_len, max_query_len=max_query_len,
                         compress_ratio=compress_ratio, sel_blocks=sel[0], sel_mask=sel[1],
                         sel_count=sel[2])
    if _plugin_ran("qsa_index", q.device, args):
        return sel
    result = generic.qsa_index(q, weights, k_index, query_start_loc, seq_lens, block_table, topk,
                               sel[0].shape[1], compress_ratio)
    return result.sel_blocks, result.sel_mask, result.sel_count


@qsa_index.register_fake
def _qsa_index_fake(q, weights, k_index, query_start_loc, seq_lens, block_table, topk,
                    max_seq_len, max_query_len, compress_ratio=1):
    return _selection(q, topk, compress_ratio, k_index.shape[1] * compress_ratio, max_seq_len)


def _token_set(q, topk, compress_ratio):
    """Empty topk_idx [T, topk + c - 1] int32."""
    return q.new_empty((q.shape[0], topk + compress_ratio - 1), dtype=torch.int32)


@torch.library.custom_op("sm70ops::qsa_index_token_set", mutates_args=())
def qsa_index_token_set(q: torch.Tensor, weights: Optional[torch.Tensor], k_index: torch.Tensor,
                        query_start_loc: torch.Tensor, seq_lens: torch.Tensor,
                        block_table: torch.Tensor, topk: int, max_seq_len: int,
                        max_query_len: int, compress_ratio: int = 1) -> torch.Tensor:
    """Op 1's token set: topk_idx [T, topk + c - 1] int32, each row's tokens (its groups', then
    its tail) as request-relative positions, ascending, -1 padded."""
    topk_idx = _token_set(q, topk, compress_ratio)
    args = ops.qsa_index(q, weights, k_index, query_start_loc, seq_lens, block_table, topk=topk,
                         max_seq_len=max_seq_len, max_query_len=max_query_len,
                         compress_ratio=compress_ratio, topk_idx=topk_idx)
    if _plugin_ran("qsa_index", q.device, args):
        return topk_idx
    return generic.qsa_index(q, weights, k_index, query_start_loc, seq_lens, block_table, topk,
                             None, compress_ratio).topk_idx


@qsa_index_token_set.register_fake
def _qsa_index_token_set_fake(q, weights, k_index, query_start_loc, seq_lens, block_table, topk,
                              max_seq_len, max_query_len, compress_ratio=1):
    return _token_set(q, topk, compress_ratio)


# Op 2: QSA selected attention --------------------------------------------------------------------


@torch.library.custom_op("sm70ops::qsa_attn", mutates_args=())
def qsa_attn(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             query_start_loc: torch.Tensor, seq_lens: torch.Tensor, block_table: torch.Tensor,
             sel_blocks: torch.Tensor, sel_mask: torch.Tensor, sel_count: torch.Tensor,
             sm_scale: float, max_seq_len: int, max_query_len: int,
             gate: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Op 2 over qsa_index's expansion at the caches' page size: out [T, Hq, D] fp16, times
    sigmoid(gate) when a gate [T, Hq, D] is given."""
    out = q.new_empty(q.shape, dtype=torch.float16)
    args = ops.qsa_attn(q, k_cache, v_cache, query_start_loc, seq_lens, block_table, sel_blocks,
                        sel_mask, sel_count, out, sm_scale=sm_scale, max_seq_len=max_seq_len,
                        max_query_len=max_query_len, gate=gate)
    if _plugin_ran("qsa_attn", q.device, args):
        return out
    return generic.qsa_attn(q, k_cache, v_cache, query_start_loc, seq_lens, block_table,
                            sel_blocks, sel_mask, sel_count, sm_scale, gate)[0]


@qsa_attn.register_fake
def _qsa_attn_fake(q, *_, **__):
    return q.new_empty(q.shape, dtype=torch.float16)


@torch.library.custom_op("sm70ops::qsa_attn_token_ids", mutates_args=())
def qsa_attn_token_ids(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                       query_start_loc: torch.Tensor, seq_lens: torch.Tensor,
                       block_table: torch.Tensor, token_ids: torch.Tensor, count_column: bool,
                       sm_scale: float, max_seq_len: int, max_query_len: int,
                       gate: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Op 2 over the engines' selection (ABI 1.2): token_ids [T, W] int32, request-relative
    positions in any order, -1 padded, the last column each row's count of leading ids when
    count_column (vLLM's packed buffer); ids outside [0, L_t) are left out, a repeat counts
    once. out [T, Hq, D] fp16, times sigmoid(gate) when a gate [T, Hq, D] is given."""
    out = q.new_empty(q.shape, dtype=torch.float16)
    args = ops.qsa_attn(q, k_cache, v_cache, query_start_loc, seq_lens, block_table, None, None,
                        None, out, sm_scale=sm_scale, max_seq_len=max_seq_len,
                        max_query_len=max_query_len, gate=gate, token_ids=token_ids,
                        token_ids_count_column=count_column)
    if _plugin_ran("qsa_attn", q.device, args):
        return out
    lengths = generic.row_lengths(query_start_loc, seq_lens, q.device)
    selection = generic.token_ids_selection(token_ids, count_column, lengths, k_cache.shape[1])
    return generic.qsa_attn(q, k_cache, v_cache, query_start_loc, seq_lens, block_table,
                            *selection, sm_scale, gate)[0]


@qsa_attn_token_ids.register_fake
def _qsa_attn_token_ids_fake(q, *_, **__):
    return q.new_empty(q.shape, dtype=torch.float16)


# Op 3: grouped NVFP4 MoE, and op 4, its one-time repack ------------------------------------------


@torch.library.custom_op("sm70ops::nvfp4_moe_prepare", mutates_args=())
def nvfp4_moe_prepare(w13: torch.Tensor, w13_scale: torch.Tensor, w13_scale_2: torch.Tensor,
                      w2: torch.Tensor, w2_scale: torch.Tensor,
                      w2_scale_2: torch.Tensor) -> torch.Tensor:
    """Op 4 on the checkpoint experts: the repacked bytes [output_bytes] uint8, or an empty
    tensor when the plugin declines (nvfp4_moe then reads the checkpoint layout)."""
    experts = ops.nvfp4_weights(w13, w13_scale, w13_scale_2, w2, w2_scale, w2_scale_2)
    accepted = _accepted("nvfp4_moe_prepare", w13.device, ops.nvfp4_moe_prepare(experts))
    if accepted is None:
        return w13.new_empty((0,), dtype=torch.uint8)
    prepared = w13.new_empty((accepted[1].output_bytes,), dtype=torch.uint8)
    _execute("nvfp4_moe_prepare", ops.nvfp4_moe_prepare(experts, prepared), accepted)
    return prepared


@nvfp4_moe_prepare.register_fake
def _nvfp4_moe_prepare_fake(w13, *_):
    size = torch.library.get_ctx().new_dynamic_size()  # the plugin's, or 0: known at run time
    return w13.new_empty((size,), dtype=torch.uint8)


@torch.library.custom_op("sm70ops::nvfp4_moe", mutates_args=())
def nvfp4_moe(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
              w13: torch.Tensor, w13_scale: torch.Tensor, w13_scale_2: torch.Tensor,
              w2: torch.Tensor, w2_scale: torch.Tensor, w2_scale_2: torch.Tensor,
              prepared: Optional[torch.Tensor] = None, w13_dense: Optional[torch.Tensor] = None,
              w2_dense: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Op 3: out [T, H] fp16 (a partial sum at TP > 1). prepared: nvfp4_moe_prepare's output
    (empty or None: the checkpoint layout). w13_dense, w2_dense: the host's fp16 copy of the
    experts (generic.dequantize_experts) for the generic path, else it dequantizes per call."""
    experts = (w13, w13_scale, w13_scale_2, w2, w2_scale, w2_scale_2)
    if prepared is not None and prepared.numel() == 0:
        prepared = None
    out = x.new_empty(x.shape, dtype=torch.float16)
    if _plugin_ran("nvfp4_moe", x.device,
                   ops.nvfp4_moe(x, topk_ids, topk_weights, experts, out, prepared)):
        return out
    if w13_dense is not None and w2_dense is not None:
        return generic.moe_dense(x, topk_ids, topk_weights, w13_dense, w2_dense)
    return generic.nvfp4_moe(x, topk_ids, topk_weights, *experts)


@nvfp4_moe.register_fake
def _nvfp4_moe_fake(x, *_, **__):
    return x.new_empty(x.shape, dtype=torch.float16)
