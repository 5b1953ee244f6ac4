"""Drop-ins for the engines' own QSA calls (Qwen3.8-Flash-Next, `qwen4_exp`): functions with the
names, argument order, shapes and buffers of vLLM's and SGLang's, so that a V100 fork changes one
import. They adapt the signature and call torch.ops.sm70ops (sm70ops.library): the plugin where
its check accepts, the generic torch path where it declines, with the checks and the fallback in
library.py alone. They import no engine; torch is imported when a function runs.

    vllm     qsa_select_paged_prefill, expand_qsa_block_indices, qsa_sparse_paged_attention
    sglang   qsa_topk_indices, QsaAttnBackend.forward_extend
"""
