/* QSA index on SM70: sampled thresholds, a filtering WMMA scorer over the paged index keys (one
 * key per group of c tokens), an exact radix top-k of the groups, the tail tokens, and the
 * expansion to pages and 64-bit token masks, per chunk of rows (pipeline: qsa_index.cu). C
 * interface for plugin/ and the tests. */
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
#define SM70_QSA_INDEX_MIN_PAGE 16  /* KV page sizes P: powers of two from 16 to 64 tokens */
#define SM70_QSA_INDEX_MAX_PAGE 64  /* (a page's token mask is one 64-bit word) */
#define SM70_QSA_INDEX_MAX_RATIO 4  /* compress ratios c: 1, 2 or 4 tokens per key */
#define SM70_QSA_INDEX_MIN_TOPK 512 /* token budget B of the fast path */
#define SM70_QSA_INDEX_MAX_TOPK 4096
#define SM70_QSA_INDEX_MAX_SEQ_LEN 262144 /* the top-k keeps a row's selection bitmap on chip */

/* Pointers are device pointers (element 0 already offset); strides are in elements. Keys are
 * the index cache's entries, one per group of `ratio` tokens: row t scores its G = floor(L_t /
 * ratio) complete groups and selects topk / ratio of them. */
typedef struct sm70_qsa_index_params {
  const uint16_t *q; /* [T, 4, 128] fp16 */
  int64_t q_row_stride;
  int64_t q_head_stride;
  const float *weights; /* [T, 4], or NULL: every head weighs 1/sqrt(128) */
  int64_t weights_row_stride;
  const uint16_t *k_index; /* [num_pages, keys_per_page, 128] fp16 */
  int64_t k_page_stride;
  int64_t k_token_stride;
  const int32_t *query_start_loc; /* [R+1] */
  const int32_t *seq_lens;        /* [R] */
  const int32_t *block_table;     /* [R, max_pages] */
  int64_t block_table_stride;
  int32_t *topk_idx; /* [T, topk + ratio - 1] or NULL */
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
  int32_t max_seq_len;         /* bound of seq_lens in tokens; keys beyond it are never read */
  int32_t topk;                /* B, in tokens: a multiple of ratio */
  int32_t ratio;               /* c: tokens per key, 1, 2 or 4 */
  int32_t page_size;           /* P: tokens per page, 16, 32 or 64 (a multiple of ratio) */
  int32_t sel_width;           /* NB */
  int32_t chunk_rows;          /* rows scored per pass (sm70_qsa_index_split) */
  int32_t rescue_rows;         /* rows of a pass whose every score can be stored at once */
  sm70_checked_error *checked; /* device address of checked mode's record, or NULL */
  /* The most shared memory a block may opt into on the device (the context's). The select and
   * threshold opt in to it, capped at their largest need, on every call: one value per device, so
   * that no call lowers the attribute under another thread's launch. */
  uint32_t smem_optin;
} sm70_qsa_index_params;

/* The most shared memory one of the op's blocks uses in a call whose rows see at most
 * max_keys keys (max_seq_len / ratio). */
uint32_t sm70_qsa_index_smem_bytes(int32_t max_keys);

/* How a call's rows are cut to fit a workspace: chunk_rows rows are scored per pass, and of a
 * pass's rows, rescue_rows at a time have room for all their scores (what a row the sample
 * misjudged needs: qsa_index.cu). */
typedef struct sm70_qsa_index_split {
  int32_t chunk_rows;
  int32_t rescue_rows;
} sm70_qsa_index_split;

/* Workspace bytes for T rows against max_keys keys when at most `cap_bytes` may be used, and the
 * split that fits it. 0 (and a zero split) when even the smallest split does not fit the cap. */
uint64_t sm70_qsa_index_workspace(int32_t rows, int32_t max_keys, uint64_t cap_bytes,
                                  sm70_qsa_index_split *split);

/* Where one chunk's intermediate results lie in the workspace (device pointers), for tests that
 * check the passes directly. samples: [chunk_rows, sample_ld], column s the score of key
 * sm70_qsa_index_stratum_key(s), for the rows that see more than keep_all_max_len keys (the
 * others keep all their keys and need none); kept keys: [chunk_rows, candidates] scores and
 * positions, count[r] of them; tied[r] keys equal to the row's threshold, marked in ties
 * [chunk_rows, tie_words]. A row that kept more than `candidates`, or fewer than K with its ties,
 * is rescored: key j's score in column j of its row of stored [rescue_rows, stored_ld] (row t -
 * begin of the rescue group, rescue_rows of the chunk's rows at a time, that holds row t). A call
 * whose max_keys is at most keep_all_max_len writes only kept scores, key j in slot j, for rows
 * longer than K (a row of at most K keys needs no scores).
 */
typedef struct sm70_qsa_index_workspace_view {
  const float *samples;
  const int32_t *count;
  const int32_t *tied;
  const float *cand_score;
  const int32_t *cand_pos;
  const float *stored;
  int32_t sample_ld;
  int32_t stored_ld;
  int32_t stratum;
  int32_t candidates;
  int32_t keep_all_max_len;
} sm70_qsa_index_workspace_view;

void sm70_qsa_index_view(const void *workspace, const sm70_qsa_index_split *split, int32_t max_keys,
                         sm70_qsa_index_workspace_view *out);

/* The key that stratum s (keys stratum*s .. stratum*s + stratum-1) samples. */
int32_t sm70_qsa_index_stratum_key(int32_t stratum);

/* Enqueues the op on `stream` (a cudaStream_t). Returns a cudaError_t (0 = success). */
int32_t sm70_qsa_index_launch(const sm70_qsa_index_params *p, void *workspace, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* SM70OPS_KERNELS_QSA_INDEX_QSA_INDEX_H_ */
