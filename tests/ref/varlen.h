// vLLM-style varlen batch metadata and paged-cache addressing shared by the QSA references.
#ifndef SM70OPS_TESTS_REF_VARLEN_H_
#define SM70OPS_TESTS_REF_VARLEN_H_

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace sm70ops::ref {

// Host metadata of one batch of R requests.
struct Varlen {
  std::vector<int32_t> query_start_loc;  // [R+1]: rows of request r are [qsl[r], qsl[r+1])
  std::vector<int32_t> seq_lens;         // [R]: context length including this chunk
  std::vector<int32_t> block_table;      // [R, max_pages]: logical page -> physical page
  int max_pages = 0;
  int page_size = 64;  // P: tokens per KV page (ops.md: 16, 32 or 64), shared by both caches
};

// Where one query row sits: it sees keys 0 .. pos, i.e. len = pos + 1 of them.
struct RowInfo {
  int request;
  int pos;
  int len;
};

int num_requests(const Varlen& meta);
int num_rows(const Varlen& meta);  // T = query_start_loc[R]

// One entry per row t; throws std::invalid_argument when the metadata is inconsistent.
std::vector<RowInfo> varlen_rows(const Varlen& meta);

// Index of token `position` of request `request` in a [num_pages, P, ...] cache, counted in
// tokens (physical page * P + position % P).
int64_t physical_token(const Varlen& meta, int request, int position);

// A batch for the GPU tests: requests given as {query_len, seq_len} (the rows are the last
// query_len positions of seq_len), their pages scattered over a shuffled pool of `spare` more
// pages than they use, so that a wrong block_table lookup reads other data.
struct ScatteredBatch {
  Varlen meta;
  int rows = 0, max_seq_len = 0, max_query_len = 0;
  int num_pages = 0;  // the pool
};
ScatteredBatch scattered_batch(const std::vector<std::pair<int, int>>& requests, int spare,
                               std::mt19937& rng, int page_size = 64);

}  // namespace sm70ops::ref

#endif  // SM70OPS_TESTS_REF_VARLEN_H_
