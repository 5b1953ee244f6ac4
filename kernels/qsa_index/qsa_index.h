/* QSA index on SM70: sampled thresholds, a filtering WMMA scorer over the paged index keys, an
 * exact radix top-k and the expansion to pages and 64-bit token masks, per chunk of rows
 * (pipeline: qsa_index.cu). C interface for plugin/ and the tests. */
#ifndef SM70OPS_KERNELS_QSA_INDEX_QSA_INDEX_H_
#define SM70OPS_KERNELS_QSA_INDEX_QSA_INDEX_H_

#include <stdint.h>

#include "kernels/common/checked.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the kernels are built for; plugin/qsa_index.c's table of supported shapes names these. */
#define SM70_QSA_INDEX_HEADS 4
#define SM70_QSA_INDEX_DIM 128
#define SM70_QSA_INDEX_PAGE 64
#define SM70_QSA_INDEX_MAX_TOPK 4096
#define SM70_QSA_INDEX_MAX_SEQ_LEN 131072 /* the top-k keeps a row's selection bitmap on chip */

/* Pointers are device pointers (element 0 already offset); strides are in elements. */
typedef struct sm70_qsa_index_params {
  const uint16_t *q; /* [T, 4, 128] fp16 */
  int64_t q_row_stride;
  int64_t q_head_stride;
  const float *weights; /* [T, 4] */
  int64_t weights_row_stride;
  const uint16_t *k_index; /* [num_pages, 64, 128] fp16 */
  int64_t k_page_stride;
  int64_t k_token_stride;
  const int32_t *query_start_loc; /* [R+1] */
  const int32_t *seq_lens;        /* [R] */
  const int32_t *block_table;     /* [R, max_pages] */
  int64_t block_table_stride;
  int32_t *topk_idx; /* [T, K] or NULL */
  int64_t topk_idx_stride;
  int32_t *sel_blocks; /* [T, NB] or NULL (then sel_mask and sel_count are NULL too) */
  int64_t sel_blocks_stride;
  uint64_t *sel_mask; /* [T, NB] */
  int64_t sel_mask_stride;
  int32_t *sel_count;          /* [T] */
  int32_t rows;                /* T */
  int32_t requests;            /* R */
  int32_t num_pages;           /* physical pages in k_index: page ids outside read as zero keys */
  int32_t max_pages;           /* block_table width */
  int32_t max_seq_len;         /* bound of seq_lens; keys beyond it are never read */
  int32_t topk;                /* K */
  int32_t sel_width;           /* NB */
  int32_t chunk_rows;          /* rows scored per pass, from sm70_qsa_index_workspace */
  sm70_checked_error *checked; /* device address of checked mode's record, or NULL */
} sm70_qsa_index_params;

/* The most shared memory one of the op's blocks uses in a call whose rows see at most
 * max_seq_len keys. */
uint32_t sm70_qsa_index_smem_bytes(int32_t max_seq_len);

/* Workspace bytes for T rows against max_seq_len keys when at most `cap_bytes` may be used;
 * *chunk_rows gets the rows per pass. 0 when even the smallest chunk does not fit the cap. */
uint64_t sm70_qsa_index_workspace(int32_t rows, int32_t max_seq_len, uint64_t cap_bytes,
                                  int32_t *chunk_rows);

/* Where one chunk's intermediate results lie in the workspace (device pointers), for tests that
 * check the scorer directly. samples: [chunk_rows, sample_ld], key g * sample_span + i at column
 * g * sample_group + i, of the rows that see more than keep_all_max_len keys (the others keep
 * all their keys and need none); kept keys: [chunk_rows, candidates] scores and positions,
 * count[r] of them (more than `candidates`: the row overflowed and was rescued); ties:
 * [chunk_rows, tie_words] bitmaps of the keys scoring exactly the row's threshold. A call whose
 * max_seq_len is at most keep_all_max_len writes only scores: slot j of a row longer than K
 * holds key j, for every j below its length (a row of at most K keys needs no scores). */
typedef struct sm70_qsa_index_workspace_view {
  const float *samples;
  const int32_t *count;
  const float *cand_score;
  const int32_t *cand_pos;
  const uint32_t *ties;
  int32_t sample_ld;
  int32_t sample_span;
  int32_t sample_group;
  int32_t candidates;
  int32_t tie_words;
  int32_t keep_all_max_len;
} sm70_qsa_index_workspace_view;

void sm70_qsa_index_view(const void *workspace, int32_t chunk_rows, int32_t max_seq_len,
                         sm70_qsa_index_workspace_view *out);

/* Enqueues the op on `stream` (a cudaStream_t). Returns a cudaError_t (0 = success). */
int32_t sm70_qsa_index_launch(const sm70_qsa_index_params *p, void *workspace, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* SM70OPS_KERNELS_QSA_INDEX_QSA_INDEX_H_ */
