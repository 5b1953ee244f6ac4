// The shared memory the kernels report for the capability check's per-architecture limit.
extern "C" {
#include "kernels/qsa_index/qsa_index.h"
}

#include <gtest/gtest.h>

namespace {

constexpr uint32_t kV100Smem = 96 * 1024;

// The index's select block holds a selection bitmap for the call's longest row: two blocks fit
// a V100 SM through a 32K prompt's last chunk, and one at the longest rows the op takes.
TEST(Plugin_KernelSmem, QsaIndexGrowsWithTheRows) {
  EXPECT_LE(sm70_qsa_index_smem_bytes(4096), kV100Smem / 2);
  EXPECT_LE(sm70_qsa_index_smem_bytes(32768), kV100Smem / 2);
  EXPECT_LE(sm70_qsa_index_smem_bytes(SM70_QSA_INDEX_MAX_SEQ_LEN), kV100Smem);
  EXPECT_LT(sm70_qsa_index_smem_bytes(32768),
            sm70_qsa_index_smem_bytes(SM70_QSA_INDEX_MAX_SEQ_LEN));
}

}  // namespace
