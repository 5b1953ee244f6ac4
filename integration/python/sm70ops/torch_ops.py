"""The three ops on torch tensors with the host's fallback built in, for an eager host:

    ops = TorchOps(ctx)          # ctx: a plugin Context, or None for the generic path only
    sel = ops.qsa_index(...)     # the plugin where its check accepts, else generic.qsa_index
    out = ops.qsa_attn(...)
    prepared = ops.prepare(experts)  # once at load; None when the plugin declines
    y = ops.nvfp4_moe(x, ids, weights, experts, prepared)

A thin layer over the torch custom ops of library.py (torch.ops.sm70ops.*): each method is one
call of its op with `ctx` in place of the registered contexts (library.using) and the decision
counted in `paths` as well as in library.paths. The ops decide and fall back as library.py says,
each plugin call allocating its own workspace. A compiled graph calls torch.ops.sm70ops.*
itself, with its contexts given by library.register_context. Importing this module needs no
torch; making a TorchOps does.
"""
import collections

from . import generic


class TorchOps:
    """Per-op dispatch between the plugin and generic.py under one context. Not thread-safe:
    its `paths` counter is updated without a lock."""

    def __init__(self, ctx=None):
        import torch

        from . import library

        self.ctx = ctx
        self.paths = collections.Counter()  # (op, "plugin" or "generic: REASON") -> calls
        self._library = library
        self._ops = torch.ops.sm70ops

    def _using(self):
        return self._library.using(self.ctx, self.paths)

    def qsa_index(self, q, weights, k_index, query_start_loc, seq_lens, block_table, *, topk,
                  max_seq_len, max_query_len, compress_ratio=1):
        """Op 1's expansion (sel_blocks, sel_mask, sel_count) at the caches' page size, NB =
        generic.selection_width, as a generic.QsaIndexResult whose topk_idx is None. weights
        None: the weight-free indexer."""
        with self._using():
            sel = self._ops.qsa_index(q, weights, k_index, query_start_loc, seq_lens,
                                      block_table, topk, max_seq_len, max_query_len,
                                      compress_ratio)
        return generic.QsaIndexResult(None, *sel)

    def qsa_attn(self, q, k_cache, v_cache, query_start_loc, seq_lens, block_table, sel, *,
                 sm_scale, max_seq_len, max_query_len, gate=None):
        """Op 2 over `sel` (a QsaIndexResult at the caches' page size): out [T, Hq, D] fp16,
        times sigmoid(gate) when a gate [T, Hq, D] is given."""
        with self._using():
            return self._ops.qsa_attn(q, k_cache, v_cache, query_start_loc, seq_lens,
                                      block_table, sel.sel_blocks, sel.sel_mask, sel.sel_count,
                                      sm_scale, max_seq_len, max_query_len, gate)

    def prepare(self, experts):
        """Op 4 on `experts` (the six checkpoint tensors as a dict): the repacked bytes, or None
        when the plugin declines (nvfp4_moe then reads the checkpoint layout)."""
        with self._using():
            prepared = self._ops.nvfp4_moe_prepare(**experts)
        return prepared if prepared.numel() else None

    def nvfp4_moe(self, x, topk_ids, topk_weights, experts, prepared=None, dense=None):
        """Op 3: out [T, H] fp16 (a partial sum at TP > 1). `dense`: the host's fp16 copy of the
        experts (generic.dequantize_experts) for its fallback, else it dequantizes per call."""
        w13_dense, w2_dense = dense if dense is not None else (None, None)
        with self._using():
            return self._ops.nvfp4_moe(x, topk_ids, topk_weights, **experts, prepared=prepared,
                                       w13_dense=w13_dense, w2_dense=w2_dense)
