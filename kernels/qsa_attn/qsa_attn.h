/* QSA selected attention on SM70: per tile of adjacent rows of one request and one KV head, the
 * union of the rows' selected pages is walked once; the selected tokens are gathered in chunks
 * and attended with WMMA (the tile's rows x the GQA query heads of the KV head in the MMA's M)
 * and an fp32 online softmax, each row masked to its own selection and causal bound; an
 * optional sigmoid gate scales the output. */
#ifndef SM70OPS_KERNELS_QSA_ATTN_QSA_ATTN_H_
#define SM70OPS_KERNELS_QSA_ATTN_QSA_ATTN_H_

#include <stdint.h>

#include "kernels/common/checked.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SM70_QSA_ATTN_MIN_PAGE 16  /* page sizes: the powers of two from 16 to 64 tokens */
#define SM70_QSA_ATTN_MAX_PAGE 64  /* a page's tokens are one 64-bit mask */
#define SM70_QSA_ATTN_MAX_GROUP 16 /* query heads per KV head */
/* The union of a tile's pages is a bitmap on chip: 16384 pages of 16 tokens. */
#define SM70_QSA_ATTN_MAX_SEQ_LEN 262144

/* Device pointers (element 0 already offset); strides in elements. */
typedef struct sm70_qsa_attn_params {
  const uint16_t *q; /* [T, Hq, D] fp16 */
  int64_t q_row_stride;
  int64_t q_head_stride;
  const uint16_t *k_cache; /* [num_pages, P, Hkv, D] fp16 */
  const uint16_t *v_cache;
  int64_t k_page_stride, k_token_stride, k_head_stride;
  int64_t v_page_stride, v_token_stride, v_head_stride;
  const int32_t *query_start_loc; /* [R+1] */
  const int32_t *seq_lens;        /* [R] */
  const int32_t *block_table;     /* [R, max_pages] */
  int64_t block_table_stride;
  const int32_t *sel_blocks; /* [T, NB] */
  int64_t sel_blocks_stride;
  const uint64_t *sel_mask; /* [T, NB] */
  int64_t sel_mask_stride;
  const int32_t *sel_count; /* [T] */
  const uint16_t *gate;     /* [T, Hq, D] fp16 or NULL */
  int64_t gate_row_stride;
  int64_t gate_head_stride;
  uint16_t *out; /* [T, Hq, D] fp16 */
  int64_t out_row_stride;
  int64_t out_head_stride;
  float *lse; /* [T, Hq] or NULL */
  int64_t lse_row_stride;
  float sm_scale;
  int32_t rows;      /* T */
  int32_t requests;  /* R */
  int32_t q_heads;   /* Hq */
  int32_t kv_heads;  /* Hkv */
  int32_t page_size; /* P: 16, 32 or 64 */
  int32_t num_pages;
  int32_t max_pages;
  int32_t max_seq_len;
  int32_t sel_width;           /* NB */
  sm70_checked_error *checked; /* device address of checked mode's record, or NULL */
} sm70_qsa_attn_params;

/* The kernel of one head dim D. */
typedef struct sm70_qsa_attn_kernel {
  int32_t head_dim;
  /* Dynamic shared memory per block for `group` query heads per KV head (the plugin declines
   * GPUs that cannot give it). */
  uint32_t (*smem_bytes)(int32_t group);
  /* Rows a tile holds for `group` query heads per KV head: each tile gathers the union of its
   * rows' selections once. */
  int32_t (*tile_rows)(int32_t group);
  /* Enqueues the op on `stream` (a cudaStream_t); no workspace. Returns a cudaError_t. */
  int32_t (*launch)(const sm70_qsa_attn_params *p, void *stream);
} sm70_qsa_attn_kernel;

extern const sm70_qsa_attn_kernel sm70_qsa_attn_d128;
extern const sm70_qsa_attn_kernel sm70_qsa_attn_d256;

#ifdef __cplusplus
}
#endif

#endif /* SM70OPS_KERNELS_QSA_ATTN_QSA_ATTN_H_ */
