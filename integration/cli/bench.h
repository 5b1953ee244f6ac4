/* sm70ops bench: CUDA-event timings of accepted ops next to their roofline floor. */
#ifndef SM70OPS_INTEGRATION_CLI_BENCH_H_
#define SM70OPS_INTEGRATION_CLI_BENCH_H_

#include <stdint.h>

#include "integration/cli/cli.h"
#include "integration/cli/model_shapes.h"

/* What `sm70ops bench` was asked for. */
typedef struct bench_options {
  const model_shape *model; /* &kModelQwen38FlashNext, or &kModelV1 (--shapes v1) */
} bench_options;

/* Peak rates a floor is computed from: FLOPs at the tensor-core rate, bytes at copy bandwidth. */
typedef struct bench_ceiling {
  int32_t compute_capability;
  const char *device;
  double tflops;   /* fp16 tensor core, fp32 accumulate */
  double tbytes_s; /* DRAM, read + write */
  const char *source;
} bench_ceiling;

/* The ceiling of `compute_capability`, or NULL; and the V100's, for projections. */
const bench_ceiling *bench_ceiling_for(int32_t compute_capability);
const bench_ceiling *bench_v100(void);

/* Device memory for a benchmark; every helper prints the CUDA error and returns 0 on failure. */
void *bench_alloc(uint64_t bytes);
void bench_free(void *p);
int bench_upload(void *dst, const void *src, uint64_t bytes);

/* Fills n fp16 values (as bits) with pseudo-random N(0,1)-like numbers from `seed`. */
void bench_random_halves(uint16_t *out, uint64_t n, uint32_t seed);
void bench_random_floats(float *out, uint64_t n, uint32_t seed, float lo, float hi);

/* Median milliseconds of `reps` timed executes after `warmup` untimed ones; < 0 on failure. */
double bench_time_execute(const sm70ops_host *h, sm70ops_op op, const void *args, void *workspace,
                          uint64_t workspace_bytes, int32_t warmup, int32_t reps);

/* DLTensor views on device 0 that own their shape and stride arrays. */
enum { kBenchMaxViews = 16, kBenchMaxRank = 4 };
typedef struct bench_views {
  int64_t shapes[kBenchMaxViews][kBenchMaxRank];
  int64_t strides[kBenchMaxViews][kBenchMaxRank];
  DLTensor t[kBenchMaxViews];
} bench_views;

/* View i of `views`: dense row-major `shape` over `data`. */
const DLTensor *bench_view(bench_views *views, int i, void *data, DLDataType dtype, int ndim,
                           const int64_t *shape);

/* Roofline of one measurement. */
typedef struct bench_work {
  double flops;
  double bytes;
} bench_work;

double bench_floor_ms(bench_work work, const bench_ceiling *c);

/* "1024 x 131072  0.512 ms  268.1 TFLOP/s  floor 0.213 ms (flops)  42% of floor  V100 floor 1.10
 * ms" */
void bench_print_header(void);
void bench_print_row(const char *label, const char *work, double ms, bench_work w,
                     const bench_ceiling *device);

int bench_qsa_index(const sm70ops_host *h, const bench_ceiling *device, const bench_options *o);
int bench_qsa_attn(const sm70ops_host *h, const bench_ceiling *device);
int bench_nvfp4_moe(const sm70ops_host *h, const bench_ceiling *device, const bench_options *o);

#endif /* SM70OPS_INTEGRATION_CLI_BENCH_H_ */
