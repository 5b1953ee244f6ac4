#include "integration/cli/bench.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

static const bench_ceiling kCeilings[] = {
    {90, "H200", 645.0, 3.97,
     "measured on the device machine: WMMA 16x16x16 fp16->fp32, copy kernel (toolchain notes)"},
    {70, "V100-SXM2", 125.0, 0.85, "fp16 tensor peak; HBM2 bandwidth reached (toolchain notes)"},
};

const bench_ceiling *bench_ceiling_for(int32_t compute_capability) {
  for (size_t i = 0; i < sizeof(kCeilings) / sizeof(kCeilings[0]); ++i) {
    if (kCeilings[i].compute_capability == compute_capability) return &kCeilings[i];
  }
  return NULL;
}

const bench_ceiling *bench_v100(void) { return bench_ceiling_for(70); }

static int cuda_ok(cudaError_t status, const char *what) {
  if (status == cudaSuccess) return 1;
  fprintf(stderr, "bench: %s: %s\n", what, cudaGetErrorString(status));
  return 0;
}

void *bench_alloc(uint64_t bytes) {
  void *p = NULL;
  return cuda_ok(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc") ? p : NULL;
}

void bench_free(void *p) { cudaFree(p); }

int bench_upload(void *dst, const void *src, uint64_t bytes) {
  return cuda_ok(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "upload");
}

static uint32_t next_random(uint32_t *state) {  // xorshift32: fast, and plenty for test data
  *state ^= *state << 13;
  *state ^= *state >> 17;
  *state ^= *state << 5;
  return *state;
}

static float uniform(uint32_t *state) { return (float)(next_random(state) >> 8) / 16777216.0f; }

void bench_random_halves(uint16_t *out, uint64_t n, uint32_t seed) {
  uint32_t state = seed | 1u;
  for (uint64_t i = 0; i < n; ++i) {
    /* Irwin-Hall: the sum of four uniforms, centred and scaled to unit variance. */
    float x =
        (uniform(&state) + uniform(&state) + uniform(&state) + uniform(&state) - 2.0f) * 1.7320508f;
    _Float16 h = (_Float16)x;
    memcpy(&out[i], &h, sizeof(h));
  }
}

void bench_random_floats(float *out, uint64_t n, uint32_t seed, float lo, float hi) {
  uint32_t state = seed | 1u;
  for (uint64_t i = 0; i < n; ++i) out[i] = lo + (hi - lo) * uniform(&state);
}

static int compare_floats(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

double bench_time_execute(const sm70ops_host *h, sm70ops_op op, const void *args, void *workspace,
                          uint64_t workspace_bytes, int32_t warmup, int32_t reps) {
  const sm70ops_api *api = sm70ops_host_api(h);
  const sm70ops_context *ctx = sm70ops_host_context(h);
  cudaEvent_t start, stop;
  if (!cuda_ok(cudaEventCreate(&start), "event") || !cuda_ok(cudaEventCreate(&stop), "event")) {
    return -1;
  }
  float samples[64];
  if (reps > 64) reps = 64;
  double result = -1;
  for (int32_t i = 0; i < warmup + reps; ++i) {
    cudaEventRecord(start, NULL);
    sm70ops_status status = api->execute(ctx, op, args, NULL, workspace, workspace_bytes);
    cudaEventRecord(stop, NULL);
    if (status != SM70OPS_OK) {
      fprintf(stderr, "bench: execute: %s: %s\n", api->status_name(status), api->last_error());
      goto done;
    }
    if (!cuda_ok(cudaEventSynchronize(stop), "run")) goto done;
    if (i >= warmup) cudaEventElapsedTime(&samples[i - warmup], start, stop);
  }
  qsort(samples, (size_t)reps, sizeof(float), compare_floats);
  result = samples[reps / 2];
done:
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return result;
}

const DLTensor *bench_view(bench_views *views, int i, void *data, DLDataType dtype, int ndim,
                           const int64_t *shape) {
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    views->shapes[i][d] = shape[d];
    views->strides[i][d] = stride;
    stride *= shape[d];
  }
  views->t[i] = (DLTensor){.data = data,
                           .device = {kDLCUDA, 0},
                           .ndim = ndim,
                           .dtype = dtype,
                           .shape = views->shapes[i],
                           .strides = views->strides[i]};
  return &views->t[i];
}

double bench_floor_ms(bench_work work, const bench_ceiling *c) {
  double compute = work.flops / (c->tflops * 1e12) * 1e3;
  double memory = work.bytes / (c->tbytes_s * 1e12) * 1e3;
  return compute > memory ? compute : memory;
}

void bench_print_header(void) {
  printf("  %-16s %-18s %10s %10s %12s %8s %14s\n", "case", "rows x keys", "ms", "TFLOP/s",
         "floor ms", "floor%", "V100 floor ms");
}

void bench_print_row(const char *label, const char *work, double ms, bench_work w,
                     const bench_ceiling *device) {
  char floor_text[32] = "-", fraction[16] = "-";
  if (device != NULL) {
    double floor = bench_floor_ms(w, device);
    snprintf(floor_text, sizeof(floor_text), "%.3f", floor);
    snprintf(fraction, sizeof(fraction), "%.0f%%", 100.0 * floor / ms);
  }
  printf("  %-16s %-18s %10.3f %10.1f %12s %8s %14.3f\n", label, work, ms,
         w.flops / (ms * 1e-3) / 1e12, floor_text, fraction, bench_floor_ms(w, bench_v100()));
}
