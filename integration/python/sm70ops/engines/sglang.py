"""SGLang's QSA calls for Qwen3.8-Flash-Next, same names, argument order and shapes: the
indexer's output, [rows, B + c - 1] int32 request-relative token ids, -1 padded (no count
column), and the attention backend's forward_extend that takes it as `topk_indices`. A fork
registers QsaAttnBackend as its QSA layers' backend and takes the indexer's ids from
qsa_topk_indices. SGLang's objects are read by the attribute names SGLang gives them (a layer's
layer_id, tp_q_head_num, tp_k_head_num, head_dim, v_head_dim, scaling; a ForwardBatch's
token_to_kv_pool, req_to_token_pool, req_pool_indices, seq_lens, extend_seq_lens,
out_cache_loc); SGLang itself is never imported.
"""


def qsa_topk_indices(q, k_cache, block_table, query_start_loc, seq_lens, index_topk,
                     compress_ratio, max_seq_len, max_query_len):
    """The indexer's output for the rows of an extend batch: [rows, index_topk + c - 1] int32,
    each row's token set (its index_topk / c best complete groups' tokens, then the tail of its
    open group), request-relative, ascending, -1 padded.

    q [rows, 4, 128] fp16; k_cache the compressed keys, [pages, P / c, 128] or
    [pages, P / c, 1, 128] fp16, paged by block_table [R, max_pages] int32 as the KV cache is;
    query_start_loc [R+1], seq_lens [R] int32; max_seq_len, max_query_len host bounds."""
    import torch

    from .. import library  # noqa: F401  registers torch.ops.sm70ops

    keys = k_cache[:, :, 0, :] if k_cache.dim() == 4 else k_cache
    return torch.ops.sm70ops.qsa_index_token_set(q, None, keys, query_start_loc, seq_lens,
                                                 block_table, index_topk, max_seq_len,
                                                 max_query_len, compress_ratio)


class QsaAttnBackend:
    """SGLang's attention backend interface, extend (prefill) only: the QSA layers of a V100
    fork. model_runner is accepted as SGLang passes it and not read."""

    def __init__(self, model_runner=None):
        self.model_runner = model_runner

    @staticmethod
    def _paged(forward_batch, layer):
        """(k_cache, v_cache [pages, P, Hkv, D], block_table [R, max_pages] int32): SGLang's
        token-slot pool seen as pages of its page_size P, whose slots a request's positions fill
        page by page (req_to_token[r, j * P] is page j's first slot)."""
        import torch

        pool = forward_batch.token_to_kv_pool
        page = pool.page_size
        paged = [b.view(-1, page, *b.shape[1:]) for b in (pool.get_key_buffer(layer.layer_id),
                                                          pool.get_value_buffer(layer.layer_id))]
        slots = forward_batch.req_to_token_pool.req_to_token[forward_batch.req_pool_indices.long()]
        block_table = torch.div(slots[:, ::page], page, rounding_mode="floor").to(torch.int32)
        return paged[0], paged[1], block_table

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
                       k_rope=None, topk_indices=None):
        """Attention of the batch's new rows over their topk_indices ([rows, B + c - 1] int32,
        qsa_topk_indices' layout): softmax(layer.scaling * q . k) v, fp32 math, fp16 out
        [rows, tp_q_head_num * v_head_dim]. k, v (the rows' own keys and values) go into the
        KV pool at out_cache_loc first when save_kv_cache. The gate is the model's, after."""
        import torch

        from .. import library  # noqa: F401  registers torch.ops.sm70ops

        if topk_indices is None:
            raise ValueError("QsaAttnBackend.forward_extend: QSA layers pass topk_indices")
        if save_kv_cache and k is not None:
            forward_batch.token_to_kv_pool.set_kv_buffer(layer, forward_batch.out_cache_loc, k, v)
        k_cache, v_cache, block_table = self._paged(forward_batch, layer)
        rows = q.shape[0]
        extend = forward_batch.extend_seq_lens.long()
        query_start_loc = torch.cat([extend.new_zeros(1), extend.cumsum(0)]).to(torch.int32)
        max_seq_len = block_table.shape[1] * k_cache.shape[1]
        out = torch.ops.sm70ops.qsa_attn_token_ids(
            q.view(rows, layer.tp_q_head_num, layer.head_dim), k_cache, v_cache, query_start_loc,
            forward_batch.seq_lens.to(torch.int32), block_table, topk_indices.to(torch.int32),
            False, layer.scaling, max_seq_len, max(1, min(rows, max_seq_len)))
        return out.view(rows, layer.tp_q_head_num * layer.v_head_dim)
