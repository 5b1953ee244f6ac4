/* The engines' selection as op 2's input (ABI 1.2): each row's token ids [W] int32, request-
 * relative positions in any order, -1 padded, optionally with a trailing count column (vLLM's
 * packed buffer; SGLang's has none), expanded on the device into the sel_* triple that the
 * attention kernel reads (ops.md, op 1's expansion): the row's sorted unique pages below its
 * causal bound, their token masks and their count. One block a row marks its ids in a token
 * bitmap and a page bitmap in shared memory, then writes the pages in order. The triple lies in
 * the call's workspace, NB = sm70_qsa_token_ids_width entries a row. */
#ifndef SM70OPS_KERNELS_QSA_ATTN_TOKEN_IDS_H_
#define SM70OPS_KERNELS_QSA_ATTN_TOKEN_IDS_H_

#include <stdint.h>

#include "kernels/common/checked.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Device pointers (element 0 already offset); strides in elements. */
typedef struct sm70_qsa_token_ids_params {
  const int32_t *token_ids; /* [T, W] */
  int64_t token_ids_stride;
  int32_t width;                  /* W, the count column included */
  int32_t count_column;           /* 1: column W - 1 holds the row's count of leading valid ids */
  const int32_t *query_start_loc; /* [R+1] */
  const int32_t *seq_lens;        /* [R] */
  int32_t rows;                   /* T */
  int32_t requests;               /* R */
  int32_t max_seq_len;
  int32_t page_size;           /* P: 16, 32 or 64 (a page's tokens are one 64-bit mask) */
  int32_t sel_width;           /* NB: sm70_qsa_token_ids_width */
  int32_t *sel_blocks;         /* [T, NB], written: the first sel_count[t] entries of each row */
  uint64_t *sel_mask;          /* [T, NB], written likewise */
  int32_t *sel_count;          /* [T] */
  sm70_checked_error *checked; /* device address of checked mode's record, or NULL */
} sm70_qsa_token_ids_params;

/* NB: the most pages a row can name, one per id and at most every page below max_seq_len. */
int32_t sm70_qsa_token_ids_width(int32_t ids_per_row, int32_t max_seq_len, int32_t page_size);

/* The workspace a call of T rows needs: sel_mask [T, NB] uint64 first (8-byte aligned at the
 * workspace's 256-byte base), then sel_blocks [T, NB] and sel_count [T] int32. */
uint64_t sm70_qsa_token_ids_workspace_bytes(int32_t rows, int32_t sel_width);

/* Points p's outputs (and sets its sel_width) at that layout in `workspace`. */
void sm70_qsa_token_ids_place(void *workspace, int32_t rows, int32_t sel_width,
                              sm70_qsa_token_ids_params *p);

/* Shared memory per block: a bit per token and a bit per page of a max_seq_len context, and the
 * block scan's words (34 KB at 262144 tokens of 16-token pages). */
uint32_t sm70_qsa_token_ids_smem_bytes(int32_t max_seq_len, int32_t page_size);

/* Enqueues the expansion on `stream` (a cudaStream_t). Returns a cudaError_t (0 = success). */
int32_t sm70_qsa_token_ids_launch(const sm70_qsa_token_ids_params *p, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* SM70OPS_KERNELS_QSA_ATTN_TOKEN_IDS_H_ */
