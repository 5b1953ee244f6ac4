// Kernels that the SASS audit must pass or fail, one per rule (see tools/sass_audit.py).
#include <mma.h>

namespace wmma = nvcuda::wmma;

// Passes: declared tensor-core and compiles to HMMA.
__global__ void fixture_good_wmma(const half *a, const half *b, float *c) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(c, acc, 16, wmma::mem_row_major);
}

// Fails: its name declares tensor cores, its body has none.
__global__ void fixture_fake_wmma(float *c) { c[threadIdx.x] = 1.0f; }

// Fails: a dynamically indexed local array lives in local memory.
__global__ void fixture_local_memory(const float *in, float *out, int k) {
  float local[256];
  for (int i = 0; i < 256; ++i) local[i] = in[i * k];
  out[threadIdx.x] = local[(threadIdx.x * k) & 255];
}
