// The varlen batch both reference tests use: R = 3 requests. Request 0 has 3 query rows at the end
// of 70 tokens (its second page holds 6), request 1 is a fresh 5-token prompt, request 2 has 2
// rows at the end of 130 tokens. Physical pages are scattered over a pool of kThreeRequestPages,
// so a wrong block_table lookup reads other data.
#pragma once

#include "tests/ref/varlen.h"

namespace sm70ops::ref {

constexpr int kThreeRequestPages = 7;

inline Varlen three_requests() {
  Varlen meta;
  meta.query_start_loc = {0, 3, 8, 10};
  meta.seq_lens = {70, 5, 130};
  meta.max_pages = 3;
  meta.block_table = {4, 1, -1, 6, -1, -1, 0, 5, 2};
  return meta;
}

}  // namespace sm70ops::ref
