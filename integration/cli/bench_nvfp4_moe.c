/* sm70ops bench nvfp4_moe: the model's routed experts (E 512, top-10, H 2560) at a TP4 rank
 * (I 160) and at TP1 (I 640), or with --shapes v1 version 1's (H 2048, I 128 and 512), T = 512 ..
 * 32768 tokens, uniform random routing; the checkpoint and the prepared layouts. Next to them,
 * in the same run, an FP16 grouped GEMM through cuBLAS on pre-dequantized weights with the same
 * grouping: cuBLAS has no grouped GEMM (cublasGemmStridedBatched needs equal sizes), so it is
 * one cublasGemmEx per expert and GEMM, captured in a CUDA graph to take the launch overhead
 * out. It times the two GEMMs alone (rows already gathered; no SiLU, router weight or combine),
 * a lower bound of a cuBLAS MoE. cuBLAS is opened with dlopen: without it the comparison is
 * skipped, not the bench. */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "integration/cli/bench.h"

enum { kMaxTokens = 32768, kPage = 64 };
static const int32_t kTpSizes[] = {4, 1};
static const int32_t kTokenCounts[] = {512, 2048, 8192, 32768};

/* The routed experts of one rank. */
typedef struct moe_shape {
  int32_t experts, topk, hidden, inter;
} moe_shape;

static const DLDataType kF16 = {kDLFloat, 16, 1}, kF32 = {kDLFloat, 32, 1};
static const DLDataType kI32 = {kDLInt, 32, 1}, kU8 = {kDLUInt, 8, 1};

/* Device buffers. Activations are sized for kMaxTokens; weights for the current I. */
typedef struct moe_buffers {
  void *x, *ids, *weights, *out, *workspace;
  uint64_t workspace_bytes;
  int32_t *host_ids; /* [kMaxTokens, top-k] */
  void *w13, *w13_scale, *w13_scale_2, *w2, *w2_scale, *w2_scale_2, *prepared;
} moe_buffers;

typedef struct moe_call {
  bench_views views;
  sm70ops_nvfp4_weights w;
  sm70ops_nvfp4_moe_args args;
  sm70ops_nvfp4_moe_prepare_args prepare;
} moe_call;

/* Both ops' arguments for T tokens; `prepared_bytes` 0: no prepared. */
static void describe(moe_call *c, const moe_shape *s, const moe_buffers *b, int tokens,
                     uint64_t prepared_bytes) {
  const int64_t e = s->experts, h = s->hidden, i = s->inter, t = tokens, k = s->topk;
  memset(c, 0, sizeof(*c));
  c->w = (sm70ops_nvfp4_weights){
      .struct_size = sizeof(c->w),
      .w13 = bench_view(&c->views, 0, b->w13, kU8, 3, (int64_t[]){e, 2 * i, h / 2}),
      .w13_scale = bench_view(&c->views, 1, b->w13_scale, kU8, 3, (int64_t[]){e, 2 * i, h / 16}),
      .w13_scale_2 = bench_view(&c->views, 2, b->w13_scale_2, kF32, 2, (int64_t[]){e, 2}),
      .w2 = bench_view(&c->views, 3, b->w2, kU8, 3, (int64_t[]){e, h, i / 2}),
      .w2_scale = bench_view(&c->views, 4, b->w2_scale, kU8, 3, (int64_t[]){e, h, i / 16}),
      .w2_scale_2 = bench_view(&c->views, 5, b->w2_scale_2, kF32, 1, (int64_t[]){e}),
  };
  const DLTensor *prepared = prepared_bytes ? bench_view(&c->views, 10, b->prepared, kU8, 1,
                                                         (int64_t[]){(int64_t)prepared_bytes})
                                            : NULL;
  c->args = (sm70ops_nvfp4_moe_args){
      .struct_size = sizeof(c->args),
      .prepared = prepared,
      .x = bench_view(&c->views, 6, b->x, kF16, 2, (int64_t[]){t, h}),
      .topk_ids = bench_view(&c->views, 7, b->ids, kI32, 2, (int64_t[]){t, k}),
      .topk_weights = bench_view(&c->views, 8, b->weights, kF32, 2, (int64_t[]){t, k}),
      .weights = &c->w,
      .out = bench_view(&c->views, 9, b->out, kF16, 2, (int64_t[]){t, h}),
  };
  c->prepare = (sm70ops_nvfp4_moe_prepare_args){
      .struct_size = sizeof(c->prepare), .weights = &c->w, .prepared = prepared};
}

static uint32_t next_random(uint32_t *state) {
  *state ^= *state << 13;
  *state ^= *state >> 17;
  *state ^= *state << 5;
  return *state;
}

/* Uniform random routing: top-k distinct experts per token, equal router weights. */
static int fill_routing(moe_buffers *b, const moe_shape *s) {
  const int k = s->topk;
  const uint64_t n = (uint64_t)kMaxTokens * k;
  float *w = malloc(n * sizeof(float));
  int ok = w != NULL;
  uint32_t state = 17;
  for (uint64_t t = 0; ok && t < kMaxTokens; ++t) {
    for (int j = 0; j < k; ++j) {
      int32_t e;
      int fresh;
      do {
        e = (int32_t)(next_random(&state) % s->experts);
        fresh = 1;
        for (int i = 0; i < j; ++i) fresh &= b->host_ids[t * k + i] != e;
      } while (!fresh);
      b->host_ids[t * k + j] = e;
      w[t * k + j] = 1.0f / k;
    }
  }
  ok = ok && bench_upload(b->ids, b->host_ids, n * 4) && bench_upload(b->weights, w, n * 4);
  free(w);
  return ok;
}

/* x, out and the routing of kMaxTokens tokens (the same for every I of one run). */
static int alloc_activations(moe_buffers *b, const moe_shape *s) {
  const uint64_t x_bytes = (uint64_t)kMaxTokens * s->hidden * 2;
  const uint64_t pairs = (uint64_t)kMaxTokens * s->topk;
  b->host_ids = malloc(pairs * sizeof(int32_t));
  uint16_t *x = malloc(x_bytes);
  int ok = b->host_ids != NULL && x != NULL && (b->x = bench_alloc(x_bytes)) != NULL &&
           (b->out = bench_alloc(x_bytes)) != NULL && (b->ids = bench_alloc(pairs * 4)) != NULL &&
           (b->weights = bench_alloc(pairs * 4)) != NULL;
  if (ok) {
    bench_random_halves(x, (uint64_t)kMaxTokens * s->hidden, 31);
    ok = bench_upload(b->x, x, x_bytes) && fill_routing(b, s);
  }
  free(x);
  return ok;
}

/* Random payload bytes; e4m3 scales between 0.5 and 448 (no NaN codes); scale_2 that keeps the
 * activations in fp16 range. */
static int fill_bytes(void *dst, uint64_t n, uint32_t seed, int scales) {
  uint8_t *host = malloc(n);
  if (host == NULL) return 0;
  uint32_t state = seed | 1u;
  for (uint64_t i = 0; i < n; ++i) {
    const uint32_t r = next_random(&state);
    host[i] = scales ? (uint8_t)(0x30 + r % (0x7e - 0x30 + 1)) : (uint8_t)r;
  }
  int ok = bench_upload(dst, host, n);
  free(host);
  return ok;
}

static int fill_scale_2(void *dst, uint64_t n, float value) {
  float *host = malloc(n * sizeof(float));
  if (host == NULL) return 0;
  for (uint64_t i = 0; i < n; ++i) host[i] = value;
  int ok = bench_upload(dst, host, n * sizeof(float));
  free(host);
  return ok;
}

static uint64_t weight_bytes(const moe_shape *s) {
  return (uint64_t)s->experts * 3 * s->inter * s->hidden * 9 / 16; /* payload + e4m3 scales */
}

static int alloc_weights(moe_buffers *b, const moe_shape *s) {
  const uint64_t e = s->experts, h = s->hidden, i = s->inter;
  return (b->w13 = bench_alloc(e * 2 * i * h / 2)) != NULL &&
         (b->w13_scale = bench_alloc(e * 2 * i * h / 16)) != NULL &&
         (b->w13_scale_2 = bench_alloc(e * 2 * 4)) != NULL &&
         (b->w2 = bench_alloc(e * h * i / 2)) != NULL &&
         (b->w2_scale = bench_alloc(e * h * i / 16)) != NULL &&
         (b->w2_scale_2 = bench_alloc(e * 4)) != NULL &&
         fill_bytes(b->w13, e * 2 * i * h / 2, 41, 0) &&
         fill_bytes(b->w13_scale, e * 2 * i * h / 16, 42, 1) &&
         fill_bytes(b->w2, e * h * i / 2, 43, 0) &&
         fill_bytes(b->w2_scale, e * h * i / 16, 44, 1) &&
         fill_scale_2(b->w13_scale_2, e * 2, 1e-4f) && fill_scale_2(b->w2_scale_2, e, 1e-3f);
}

static void free_weights(moe_buffers *b) {
  void **all[] = {&b->w13,      &b->w13_scale,  &b->w13_scale_2, &b->w2,
                  &b->w2_scale, &b->w2_scale_2, &b->prepared};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) {
    bench_free(*all[i]);
    *all[i] = NULL;
  }
}

/* ---- cuBLAS */

typedef struct cublas_lib {
  void *lib;
  __typeof__(cublasCreate_v2) *create;
  __typeof__(cublasDestroy_v2) *destroy;
  __typeof__(cublasSetStream_v2) *set_stream;
  __typeof__(cublasGemmEx) *gemm;
  cublasHandle_t handle;
} cublas_lib;

/* The cuBLAS of the CUDA runtime this program links first, then any. */
static int cublas_open(cublas_lib *c) {
  static const char *const kNames[] = {"", "/usr/local/cuda/lib64/libcublas.so", "libcublas.so"};
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  char matching[32];
  snprintf(matching, sizeof(matching), "libcublas.so.%d", runtime / 1000);
  memset(c, 0, sizeof(*c));
  for (size_t i = 0; i < sizeof(kNames) / sizeof(kNames[0]) && c->lib == NULL; ++i) {
    c->lib = dlopen(i == 0 ? matching : kNames[i], RTLD_NOW | RTLD_LOCAL);
  }
  if (c->lib == NULL) {
    printf("  cuBLAS comparison skipped: no libcublas.so found\n");
    return 0;
  }
  *(void **)&c->create = dlsym(c->lib, "cublasCreate_v2");
  *(void **)&c->destroy = dlsym(c->lib, "cublasDestroy_v2");
  *(void **)&c->set_stream = dlsym(c->lib, "cublasSetStream_v2");
  *(void **)&c->gemm = dlsym(c->lib, "cublasGemmEx");
  if (c->create == NULL || c->destroy == NULL || c->set_stream == NULL || c->gemm == NULL ||
      c->create(&c->handle) != CUBLAS_STATUS_SUCCESS) {
    printf("  cuBLAS comparison skipped: libcublas lacks a symbol or cublasCreate failed\n");
    dlclose(c->lib);
    c->lib = NULL;
    return 0;
  }
  return 1;
}

static void cublas_close(cublas_lib *c) {
  if (c->lib == NULL) return;
  c->destroy(c->handle);
  dlclose(c->lib);
}

/* fp16 copies of the experts' weights, and the grouped rows: A [pairs, H], C [pairs, 2I] (the
 * gate/up output, also read as the down GEMM's input), Y [pairs, H]. Values do not matter to the
 * timing: constant fills. */
typedef struct fp16_buffers {
  void *w13, *w2, *a, *c, *y;
} fp16_buffers;

static int alloc_fp16(fp16_buffers *f, const moe_shape *s) {
  const uint64_t e = s->experts, h = s->hidden, i = s->inter, p = (uint64_t)kMaxTokens * s->topk;
  void **slots[] = {&f->w13, &f->w2, &f->a, &f->c, &f->y};
  const uint64_t sizes[] = {e * 2 * i * h * 2, e * h * i * 2, p * h * 2, p * 2 * i * 2, p * h * 2};
  memset(f, 0, sizeof(*f));
  for (size_t s = 0; s < 5; ++s) {
    if ((*slots[s] = bench_alloc(sizes[s])) == NULL) return 0;
    cudaMemset(*slots[s], s < 2 ? 0x1c : 0x3c, sizes[s]); /* ~0.004 and ~1.06 as fp16 */
  }
  return 1;
}

static void free_fp16(fp16_buffers *f) {
  void *all[] = {f->w13, f->w2, f->a, f->c, f->y};
  for (size_t i = 0; i < 5; ++i) bench_free(all[i]);
}

/* Enqueues both GEMMs of every expert with rows. Column-major view: C^T = W13_e^T A_e^T. */
static int enqueue_grouped(const cublas_lib *c, const fp16_buffers *f, const int32_t *counts,
                           const moe_shape *s) {
  const float one = 1.0f, zero = 0.0f;
  const int h = s->hidden, inter = s->inter, i2 = 2 * inter;
  int64_t row = 0;
  for (int e = 0; e < s->experts; ++e) {
    const int m = counts[e];
    if (m == 0) continue;
    const uint16_t *w13 = (const uint16_t *)f->w13 + (int64_t)e * i2 * h;
    const uint16_t *w2 = (const uint16_t *)f->w2 + (int64_t)e * h * inter;
    const uint16_t *a = (const uint16_t *)f->a + row * h;
    uint16_t *gate_up = (uint16_t *)f->c + row * i2, *y = (uint16_t *)f->y + row * h;
    if (c->gemm(c->handle, CUBLAS_OP_T, CUBLAS_OP_N, i2, m, h, &one, w13, CUDA_R_16F, h, a,
                CUDA_R_16F, h, &zero, gate_up, CUDA_R_16F, i2, CUBLAS_COMPUTE_32F,
                CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS ||
        c->gemm(c->handle, CUBLAS_OP_T, CUBLAS_OP_N, h, m, inter, &one, w2, CUDA_R_16F, inter,
                gate_up, CUDA_R_16F, i2, &zero, y, CUDA_R_16F, h, CUBLAS_COMPUTE_32F,
                CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
      return 0;
    }
    row += m;
  }
  return 1;
}

static int compare_floats(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Median milliseconds of the per-expert loop, replayed as one CUDA graph; < 0 on failure. */
static double time_cublas(const cublas_lib *c, const fp16_buffers *f, const int32_t *counts,
                          const moe_shape *s) {
  enum { kWarmup = 2, kReps = 9 };
  cudaStream_t stream;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  cudaEvent_t start, stop;
  double result = -1;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return -1;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  c->set_stream(c->handle, stream);
  cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  const int enqueued = enqueue_grouped(c, f, counts, s);
  if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && enqueued &&
      cudaGraphInstantiateWithFlags(&exec, graph, 0) == cudaSuccess) {
    float samples[kReps];
    int ok = 1;
    for (int r = 0; ok && r < kWarmup + kReps; ++r) {
      cudaEventRecord(start, stream);
      ok = cudaGraphLaunch(exec, stream) == cudaSuccess;
      cudaEventRecord(stop, stream);
      ok = ok && cudaEventSynchronize(stop) == cudaSuccess;
      if (ok && r >= kWarmup) cudaEventElapsedTime(&samples[r - kWarmup], start, stop);
    }
    if (ok) {
      qsort(samples, kReps, sizeof(float), compare_floats);
      result = samples[kReps / 2];
    }
  }
  if (result < 0)
    printf("  cuBLAS: capture or replay failed (%s)\n", cudaGetErrorString(cudaGetLastError()));
  if (exec != NULL) cudaGraphExecDestroy(exec);
  if (graph != NULL) cudaGraphDestroy(graph);
  c->set_stream(c->handle, NULL);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  return result;
}

/* ---- The sweep */

/* Rows per expert of the first `tokens` tokens, and how many experts have any. */
static int count_rows(const moe_buffers *b, const moe_shape *s, int tokens, int32_t *counts) {
  memset(counts, 0, s->experts * sizeof(int32_t));
  for (int64_t p = 0; p < (int64_t)tokens * s->topk; ++p) counts[b->host_ids[p]]++;
  int used = 0;
  for (int e = 0; e < s->experts; ++e) used += counts[e] > 0;
  return used;
}

/* FLOPs of both GEMMs; bytes an ideal fused op moves: the routed experts' NVFP4 weights, x, out,
 * ids and router weights (the workspace round trips are the implementation's, not the floor's). */
static bench_work moe_work(const moe_shape *s, int tokens, int experts_used) {
  const double pairs = (double)tokens * s->topk;
  bench_work w = {.flops = 6.0 * pairs * s->hidden * s->inter};
  w.bytes = (double)weight_bytes(s) * experts_used / s->experts + (double)tokens * s->hidden * 4 +
            pairs * 8;
  return w;
}

static double time_moe(const sm70ops_host *h, moe_buffers *b, moe_call *call) {
  sm70ops_decision d = {.struct_size = sizeof(d)};
  sm70ops_host_decide(h, SM70OPS_OP_NVFP4_MOE, &call->args, &d);
  if (!d.accepted) {
    printf("  declined: %s\n", d.message);
    return -1;
  }
  if (d.workspace_bytes > b->workspace_bytes) {
    bench_free(b->workspace);
    if ((b->workspace = bench_alloc(d.workspace_bytes)) == NULL) return -1;
    b->workspace_bytes = d.workspace_bytes;
  }
  const int reps = call->args.x->shape[0] >= 8192 ? 5 : 11;
  return bench_time_execute(h, SM70OPS_OP_NVFP4_MOE, &call->args, b->workspace, d.workspace_bytes,
                            2, reps);
}

/* Runs op 4 once into a fresh buffer; returns its bytes, 0 on failure. */
static uint64_t prepare(const sm70ops_host *h, const moe_shape *s, moe_buffers *b) {
  moe_call call;
  describe(&call, s, b, 1, 0);
  sm70ops_decision d = {.struct_size = sizeof(d)};
  sm70ops_host_decide(h, SM70OPS_OP_NVFP4_MOE_PREPARE, &call.prepare, &d);
  if (!d.accepted || (b->prepared = bench_alloc(d.output_bytes)) == NULL) {
    printf("  prepare declined or out of memory: %s\n", d.message);
    return 0;
  }
  describe(&call, s, b, 1, d.output_bytes);
  double ms = bench_time_execute(h, SM70OPS_OP_NVFP4_MOE_PREPARE, &call.prepare, NULL, 0, 0, 1);
  printf("  prepare (one-time repack): %.3f ms, %.1f MB\n", ms, d.output_bytes / 1e6);
  return ms < 0 ? 0 : d.output_bytes;
}

static void print_header(void) {
  printf("  %-16s %-18s %10s %10s %12s %8s %14s\n", "case", "T / weights read", "ms", "TFLOP/s",
         "floor ms", "floor%", "V100 floor ms");
}

static void sweep(const sm70ops_host *h, const moe_shape *s, moe_buffers *b,
                  const cublas_lib *cublas, const fp16_buffers *fp16, uint64_t prepared_bytes,
                  const bench_ceiling *device) {
  int32_t *counts = malloc(s->experts * sizeof(int32_t));
  if (counts == NULL) return;
  print_header();
  for (size_t i = 0; i < sizeof(kTokenCounts) / sizeof(kTokenCounts[0]); ++i) {
    const int tokens = kTokenCounts[i];
    const int used = count_rows(b, s, tokens, counts);
    const bench_work work = moe_work(s, tokens, used);
    char what[32];
    snprintf(what, sizeof(what), "%d / %.0f MB", tokens,
             (double)weight_bytes(s) * used / s->experts / 1e6);
    moe_call call;
    describe(&call, s, b, tokens, 0);
    double ms = time_moe(h, b, &call);
    if (ms >= 0) bench_print_row("checkpoint", what, ms, work, device);
    if (prepared_bytes) {
      describe(&call, s, b, tokens, prepared_bytes);
      ms = time_moe(h, b, &call);
      if (ms >= 0) bench_print_row("prepared", what, ms, work, device);
    }
    if (cublas != NULL) {
      ms = time_cublas(cublas, fp16, counts, s);
      if (ms >= 0) bench_print_row("cuBLAS fp16 GEMMs", what, ms, work, device);
    }
  }
  free(counts);
}

static void free_buffers(moe_buffers *b) {
  free_weights(b);
  void *all[] = {b->x, b->ids, b->weights, b->out, b->workspace};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) bench_free(all[i]);
  free(b->host_ids);
}

/* The routed experts of `o->model` on one rank of `tp`. */
static moe_shape rank_shape(const bench_options *o, int32_t tp) {
  const model_shape m = model_shape_for(o->model, tp, kPage);
  return (moe_shape){
      .experts = m.experts, .topk = m.expert_topk, .hidden = m.hidden, .inter = m.expert_inter};
}

int bench_nvfp4_moe(const sm70ops_host *h, const bench_ceiling *device, const bench_options *o) {
  moe_buffers b;
  memset(&b, 0, sizeof(b));
  cublas_lib cublas;
  const moe_shape first = rank_shape(o, kTpSizes[0]);
  int ok = alloc_activations(&b, &first);
  const int have_cublas = ok && cublas_open(&cublas);
  for (size_t i = 0; ok && i < sizeof(kTpSizes) / sizeof(kTpSizes[0]); ++i) {
    const moe_shape s = rank_shape(o, kTpSizes[i]);
    printf(
        "nvfp4_moe: %s, TP%d: E %d, top-%d, H %d, I %d, uniform routing; floor: NVFP4 weights "
        "read once, x, out\n",
        o->model->name, kTpSizes[i], s.experts, s.topk, s.hidden, s.inter);
    ok = alloc_weights(&b, &s);
    const uint64_t prepared_bytes = ok ? prepare(h, &s, &b) : 0;
    fp16_buffers fp16;
    memset(&fp16, 0, sizeof(fp16));
    const int fp16_ok = ok && have_cublas && alloc_fp16(&fp16, &s);
    if (ok) sweep(h, &s, &b, fp16_ok ? &cublas : NULL, &fp16, prepared_bytes, device);
    if (have_cublas) free_fp16(&fp16);
    free_weights(&b);
  }
  if (have_cublas) cublas_close(&cublas);
  free_buffers(&b);
  return ok;
}
