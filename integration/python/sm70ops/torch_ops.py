"""The three ops on torch tensors with the host's fallback built in: what an engine calls.

    ops = TorchOps(ctx)          # ctx: a plugin Context, or None for the generic path only
    sel = ops.qsa_index(...)     # the plugin where its check accepts, else generic.qsa_index
    out = ops.qsa_attn(...)
    prepared = ops.prepare(experts)  # once at load; None when the plugin declines
    y = ops.nvfp4_moe(x, ids, weights, experts, prepared)

Every call asks the capability check (host-only, microseconds) and runs the plugin on the
current stream of the inputs' device with a workspace this object owns there, or the generic
torch path when the plugin declines (tensors on another device than the context's, or on the
CPU, are declined); `paths` counts what ran and why, so a host can show it. Outputs are allocated
here. Shapes and layouts as in ops.py and shared/spec/ops.md.
"""
import collections

from . import generic, ops
from .dlpack import uint64_dtype

PLUGIN = "plugin"


class TorchOps:
    """Per-op dispatch between the plugin and generic.py. Not thread-safe, and one workspace (a
    context serves one device): calls on different streams must be ordered by the caller."""

    def __init__(self, ctx=None):
        self.ctx = ctx
        self.paths = collections.Counter()  # (op, "plugin" or "generic: REASON") -> calls
        self._workspace = None  # uint8 tensor on the context's device, grown on demand

    def _workspace_for(self, size):
        """The workspace, replaced by a larger one when `size` bytes do not fit in it."""
        import torch

        if self._workspace is None or self._workspace.numel() < size:
            self._workspace = torch.empty(max(size, 1), dtype=torch.uint8,
                                          device=torch.device("cuda", self.ctx.device))
        return self._workspace

    def _plugin_ran(self, op, args, device):
        """Runs `op` on the plugin when its check accepts; False (and why, in paths) if not."""
        if self.ctx is None:
            self.paths[op, "generic: no plugin context"] += 1
            return False
        d = self.ctx.check(op, args)
        if not d.accepted:
            self.paths[op, f"generic: {d.reason}"] += 1
            return False
        import torch

        self.ctx.execute(op, args, torch.cuda.current_stream(device),
                         self._workspace_for(d.workspace_bytes), d.workspace_bytes)
        self.paths[op, PLUGIN] += 1
        return True

    def qsa_index(self, q, weights, k_index, query_start_loc, seq_lens, block_table, *, topk,
                  max_seq_len, max_query_len, compress_ratio=1):
        """Op 1's expansion (sel_blocks, sel_mask, sel_count) at the caches' page size, NB =
        generic.selection_width: generic.QsaIndexResult with topk_idx None on the plugin
        path. weights None: the weight-free indexer."""
        import torch

        page = k_index.shape[1] * compress_ratio
        rows, nb = q.shape[0], generic.selection_width(topk, compress_ratio, page, max_seq_len)
        sel = generic.QsaIndexResult(
            None, torch.empty((rows, nb), dtype=torch.int32, device=q.device),
            torch.empty((rows, nb), dtype=uint64_dtype(), device=q.device),
            torch.empty((rows,), dtype=torch.int32, device=q.device))
        args = ops.qsa_index(q, weights, k_index, query_start_loc, seq_lens, block_table,
                             topk=topk, max_seq_len=max_seq_len, max_query_len=max_query_len,
                             compress_ratio=compress_ratio, sel_blocks=sel.sel_blocks,
                             sel_mask=sel.sel_mask, sel_count=sel.sel_count)
        if self._plugin_ran("qsa_index", args, q.device):
            return sel
        return generic.qsa_index(q, weights, k_index, query_start_loc, seq_lens, block_table,
                                 topk, nb, compress_ratio)

    def qsa_attn(self, q, k_cache, v_cache, query_start_loc, seq_lens, block_table, sel, *,
                 sm_scale, max_seq_len, max_query_len, gate=None):
        """Op 2 over `sel` (a QsaIndexResult at the caches' page size): out [T, Hq, D] fp16,
        times sigmoid(gate) when a gate [T, Hq, D] is given."""
        import torch

        out = torch.empty_like(q, memory_format=torch.contiguous_format)
        args = ops.qsa_attn(q, k_cache, v_cache, query_start_loc, seq_lens, block_table,
                            sel.sel_blocks, sel.sel_mask, sel.sel_count, out, sm_scale=sm_scale,
                            max_seq_len=max_seq_len, max_query_len=max_query_len, gate=gate)
        if self._plugin_ran("qsa_attn", args, q.device):
            return out
        return generic.qsa_attn(q, k_cache, v_cache, query_start_loc, seq_lens, block_table,
                                sel.sel_blocks, sel.sel_mask, sel.sel_count, sm_scale, gate)[0]

    def prepare(self, experts):
        """Op 4 on `experts` (the six checkpoint tensors as a dict): the repacked bytes, or None
        when the plugin declines (nvfp4_moe then reads the checkpoint layout)."""
        import torch

        if self.ctx is None:
            self.paths["nvfp4_moe_prepare", "generic: no plugin context"] += 1
            return None
        d = self.ctx.check("nvfp4_moe_prepare", ops.nvfp4_moe_prepare(experts))
        if not d.accepted:
            self.paths["nvfp4_moe_prepare", f"generic: {d.reason}"] += 1
            return None
        device = experts["w13"].device
        prepared = torch.empty(d.output_bytes, dtype=torch.uint8, device=device)
        if not self._plugin_ran("nvfp4_moe_prepare", ops.nvfp4_moe_prepare(experts, prepared),
                                device):
            return None
        return prepared

    def nvfp4_moe(self, x, topk_ids, topk_weights, experts, prepared=None, dense=None):
        """Op 3: out [T, H] fp16 (a partial sum at TP > 1). `dense`: the host's fp16 copy of the
        experts (generic.dequantize_experts) for its fallback, else it dequantizes per call."""
        import torch

        out = torch.empty_like(x, memory_format=torch.contiguous_format)
        if self._plugin_ran("nvfp4_moe",
                            ops.nvfp4_moe(x, topk_ids, topk_weights, experts, out, prepared),
                            x.device):
            return out
        if dense is not None:
            return generic.moe_dense(x, topk_ids, topk_weights, *dense)
        return generic.nvfp4_moe(x, topk_ids, topk_weights, **experts)
