#include "tests/ref/varlen.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

namespace sm70ops::ref {
namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("varlen: " + what);
}

void validate(const Varlen& meta) {
  const int requests = static_cast<int>(meta.seq_lens.size());
  require(meta.query_start_loc.size() == meta.seq_lens.size() + 1, "query_start_loc needs R+1");
  require(meta.query_start_loc[0] == 0, "query_start_loc[0] must be 0");
  require(meta.max_pages >= 0, "max_pages must be >= 0");
  require(meta.page_size > 0, "page_size must be > 0");
  require(meta.block_table.size() == static_cast<size_t>(requests) * meta.max_pages,
          "block_table must be [R, max_pages]");
  for (int r = 0; r < requests; ++r) {
    const int query_len = meta.query_start_loc[r + 1] - meta.query_start_loc[r];
    require(query_len >= 0, "query_start_loc must not decrease");
    require(meta.seq_lens[r] >= query_len, "seq_len must cover the query chunk");
    require(meta.seq_lens[r] <= static_cast<int64_t>(meta.max_pages) * meta.page_size,
            "block_table too narrow for seq_len");
  }
}

}  // namespace

int num_requests(const Varlen& meta) { return static_cast<int>(meta.seq_lens.size()); }

int num_rows(const Varlen& meta) {
  return meta.query_start_loc.empty() ? 0 : meta.query_start_loc.back();
}

std::vector<RowInfo> varlen_rows(const Varlen& meta) {
  validate(meta);
  std::vector<RowInfo> rows;
  rows.reserve(num_rows(meta));
  for (int r = 0; r < num_requests(meta); ++r) {
    const int first = meta.query_start_loc[r];
    const int query_len = meta.query_start_loc[r + 1] - first;
    for (int i = 0; i < query_len; ++i) {
      const int pos = meta.seq_lens[r] - query_len + i;
      rows.push_back({r, pos, pos + 1});
    }
  }
  return rows;
}

int64_t physical_token(const Varlen& meta, int request, int position) {
  const int32_t page =
      meta.block_table[static_cast<size_t>(request) * meta.max_pages + position / meta.page_size];
  return static_cast<int64_t>(page) * meta.page_size + position % meta.page_size;
}

ScatteredBatch scattered_batch(const std::vector<std::pair<int, int>>& requests, int spare,
                               std::mt19937& rng, int page_size) {
  const auto pages = [page_size](int tokens) { return (tokens + page_size - 1) / page_size; };
  ScatteredBatch b;
  b.meta.page_size = page_size;
  b.meta.query_start_loc = {0};
  int used = 0;
  for (const auto& [query_len, seq_len] : requests) {
    b.meta.query_start_loc.push_back(b.meta.query_start_loc.back() + query_len);
    b.meta.seq_lens.push_back(seq_len);
    b.max_seq_len = std::max(b.max_seq_len, seq_len);
    b.max_query_len = std::max(b.max_query_len, query_len);
    used += pages(seq_len);
  }
  b.rows = b.meta.query_start_loc.back();
  b.meta.max_pages = pages(b.max_seq_len);
  b.num_pages = used + spare;
  std::vector<int32_t> physical(b.num_pages);
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), rng);
  b.meta.block_table.assign(requests.size() * b.meta.max_pages, -1);
  for (size_t r = 0, next = 0; r < requests.size(); ++r) {
    for (int p = 0; p < pages(requests[r].second); ++p) {
      b.meta.block_table[r * b.meta.max_pages + p] = physical[next++];
    }
  }
  return b;
}

}  // namespace sm70ops::ref
