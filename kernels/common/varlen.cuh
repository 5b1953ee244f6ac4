// Varlen batches on the device (ops.md, "Common rules": rows of request r are
// query_start_loc[r] .. query_start_loc[r+1]-1, row i sits at seq_len - query_len + i): tiles of
// adjacent rows that never span two requests, found from the block index, and the keys a row
// sees. A grid of varlen_slots blocks covers every row: its size comes from host shapes alone,
// so the kernels that use it stay graph-capturable.
#pragma once

#include <cstdint>

#include "kernels/common/checked.cuh"
#include "kernels/common/search.h"

namespace sm70ops {

struct VarlenTile {
  int request;
  int row0;  // first row (global index)
  int rows;
};

// The grid that covers `rows` rows of `requests` requests in tiles of tile_rows: one slot per
// tile_rows rows, plus one per request for its partial last tile.
__host__ __device__ inline int varlen_slots(int rows, int tile_rows, int requests) {
  return rows / tile_rows + requests;
}

// Tile slots of request r among rows [c0, c1) start here: a request of n rows in that range owns
// at least ceil(n / tile_rows) slots.
__device__ __forceinline__ int varlen_first_slot(const int32_t *query_start_loc, int c0, int c1,
                                                 int tile_rows, int r) {
  const int begin = min(max(query_start_loc[r], c0), c1);
  return (begin - c0) / tile_rows + r;
}

// The tile of `slot` among rows [c0, c1); false for a slot a request leaves unused.
__device__ __forceinline__ bool varlen_find_tile(const int32_t *query_start_loc, int requests,
                                                 int c0, int c1, int tile_rows, int slot,
                                                 VarlenTile *tile) {
  // The last request whose slots start at or before `slot`.
  const int r = last_true(requests, [=](int i) {
    return varlen_first_slot(query_start_loc, c0, c1, tile_rows, i) <= slot;
  });
  const int begin = min(max(query_start_loc[r], c0), c1);
  const int end = min(max(query_start_loc[r + 1], c0), c1);
  const int row0 =
      begin + (slot - varlen_first_slot(query_start_loc, c0, c1, tile_rows, r)) * tile_rows;
  if (row0 >= end) return false;
  *tile = {r, row0, min(tile_rows, end - row0)};
  return true;
}

// Checked mode: query_start_loc must run 0 = qsl[0] <= qsl[1] <= ... <= qsl[R] = rows, or rows
// fall outside every request (and are written as empty) or into the wrong one. One block of a
// launch calls it.
__device__ __forceinline__ void varlen_check_starts(const int32_t *query_start_loc, int requests,
                                                    int rows, sm70_checked_error *checked) {
  if (checked == nullptr) return;
  for (int r = threadIdx.x; r <= requests; r += blockDim.x) {
    const int v = query_start_loc[r], before = r == 0 ? 0 : query_start_loc[r - 1];
    const bool ends = r == 0 || r == requests;
    if (ends ? v != (r == 0 ? 0 : rows) : v < before || v > rows) {
      report_bad_index(checked, SM70_CHECKED_QUERY_START, r, v, rows + 1ll);
    }
  }
}

// Keys row t of request r sees: pos + 1, bounded to [0, max_seq_len] so bad metadata cannot make
// a kernel read or write past what the host sized (checked mode reports it).
__device__ __forceinline__ int varlen_row_length(const int32_t *query_start_loc,
                                                 const int32_t *seq_lens, int max_seq_len,
                                                 sm70_checked_error *checked, int r, int t) {
  const int begin = query_start_loc[r];
  const int64_t pos =
      (int64_t)seq_lens[r] - (query_start_loc[r + 1] - begin) + (int64_t)(t - begin);
  if (pos + 1 < 0 || pos + 1 > max_seq_len) {
    report_bad_index(checked, SM70_CHECKED_SEQ_LEN, t, pos + 1, max_seq_len + 1ll);
  }
  return (int)min(max(pos + 1, (int64_t)0), (int64_t)max_seq_len);
}

}  // namespace sm70ops
