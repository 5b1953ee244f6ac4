/* Checked mode (SM70OPS_CHECKED=1): kernels validate the device-side indices a host hands them
 * (page ids, selections, sequence lengths, expert ids) and record the first bad one here, in
 * host memory mapped into the device, so the next call on the context can report it without a
 * synchronisation. Out-of-range indices never read or write out of bounds either way: the
 * kernels skip them; checked mode only makes them visible. */
#ifndef SM70OPS_KERNELS_COMMON_CHECKED_H_
#define SM70OPS_KERNELS_COMMON_CHECKED_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  SM70_CHECKED_OK = 0,
  SM70_CHECKED_PAGE_ID = 1,   /* block_table entry outside [0, num_pages) */
  SM70_CHECKED_SEL_PAGE = 2,  /* sel_blocks entry outside [0, max_pages) */
  SM70_CHECKED_SEL_COUNT = 3, /* sel_count outside [0, NB] */
  SM70_CHECKED_SEQ_LEN = 4,   /* a row's context L outside [0, max_seq_len] */
  SM70_CHECKED_EXPERT_ID = 5, /* topk_ids entry outside [0, E) */
  SM70_CHECKED_SEL_ORDER =
      6, /* sel_blocks not ascending (value: the page, bound: the one before) */
  SM70_CHECKED_QUERY_START = 7,  /* query_start_loc not 0, ..., rows ascending (row: the entry) */
  SM70_CHECKED_TOKEN_ID = 8,     /* token_ids id outside [0, L) other than the padding -1 */
  SM70_CHECKED_TOKEN_REPEAT = 9, /* token_ids id given twice in its row (bound: L) */
  SM70_CHECKED_TOKEN_COUNT = 10  /* token_ids' count column outside [0, W - 1] (bound: W) */
} sm70_checked_kind;

typedef struct sm70_checked_error {
  uint32_t kind; /* sm70_checked_kind; the first writer wins */
  int32_t row;   /* the row (token) that carried it */
  int64_t value; /* the index seen */
  int64_t bound; /* the range it had to be in: [0, bound) */
} sm70_checked_error;

#ifdef __cplusplus
}
#endif

#endif /* SM70OPS_KERNELS_COMMON_CHECKED_H_ */
