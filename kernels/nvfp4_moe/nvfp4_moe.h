/* Grouped NVFP4 (W4A16) MoE on SM70: the routed (token, slot) pairs are grouped by expert, two
 * grouped WMMA GEMMs decode the FP4 weights to fp16 in their main loop (W13 with a fused
 * silu(gate) * up epilogue, W2 with the router weight applied), and a combine kernel sums each
 * token's top-k contributions in slot order (pipeline: nvfp4_moe.cu). C interface for plugin/ and
 * the tests. */
#ifndef SM70OPS_KERNELS_NVFP4_MOE_NVFP4_MOE_H_
#define SM70OPS_KERNELS_NVFP4_MOE_NVFP4_MOE_H_

#include <stdint.h>

#include "kernels/common/checked.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the kernels are built for; plugin/nvfp4_moe.c's table of supported shapes names these. */
#define SM70_NVFP4_MOE_MAX_EXPERTS 512 /* the grouping keeps per-expert counters on chip */
#define SM70_NVFP4_MOE_MAX_TOPK 16
#define SM70_NVFP4_MOE_DIM_MULTIPLE 16 /* H and I: the NVFP4 scale block, the MMAs' k and n */
/* H x I bound: per-expert byte offsets stay far inside 32 bits (2^30 = 32768 x 32768). */
#define SM70_NVFP4_MOE_MAX_EXPERT_ELEMENTS (1ll << 30)

/* Checkpoint layout (ModelOpt/vLLM, unswizzled); device pointers, element 0 already offset. */
typedef struct sm70_nvfp4_moe_weights {
  const uint8_t *w13;       /* [E, 2I, H/2]: rows 0..I-1 gate, I..2I-1 up; low nibble even k */
  const uint8_t *w13_scale; /* [E, 2I, H/16] e4m3 */
  const float *w13_scale_2; /* [E, 2]: gate, up */
  const uint8_t *w2;        /* [E, H, I/2] */
  const uint8_t *w2_scale;  /* [E, H, I/16] e4m3 */
  const float *w2_scale_2;  /* [E] */
} sm70_nvfp4_moe_weights;

/* Strides in elements. Ids outside [0, E) contribute nothing (their weight is never read); in
 * checked mode the first one is recorded. */
typedef struct sm70_nvfp4_moe_params {
  const uint16_t *x; /* [T, H] fp16 */
  int64_t x_row_stride;
  const int32_t *topk_ids; /* [T, k] */
  int64_t topk_ids_row_stride;
  const float *topk_weights; /* [T, k] */
  int64_t topk_weights_row_stride;
  uint16_t *out; /* [T, H] fp16 */
  int64_t out_row_stride;
  sm70_nvfp4_moe_weights weights; /* read only when `prepared` is NULL */
  const uint8_t *prepared;        /* sm70_nvfp4_moe_prepare_launch's output, or NULL */
  int32_t tokens;                 /* T */
  int32_t topk;                   /* k */
  int32_t experts;                /* E */
  int32_t hidden;                 /* H */
  int32_t inter;                  /* I (per TP rank) */
  int32_t reserved0;
  sm70_checked_error *checked; /* device address of checked mode's record, or NULL */
} sm70_nvfp4_moe_params;

/* Device scratch for one call; 0 when tokens == 0. The op runs at most 16384 tokens per pass, so
 * this stops growing there. */
uint64_t sm70_nvfp4_moe_workspace(int32_t tokens, int32_t topk, int32_t experts, int32_t hidden,
                                  int32_t inter);

/* Shared memory per block of the op's largest kernel (the GEMMs' double-buffered tile), for the
 * capability check. */
uint32_t sm70_nvfp4_moe_smem_bytes(void);

/* Enqueues the op on `stream` (a cudaStream_t). Returns a cudaError_t (0 = success). */
int32_t sm70_nvfp4_moe_launch(const sm70_nvfp4_moe_params *p, void *workspace, void *stream);

/* The repacked layout: per expert, per K step of 64 and per half step of 32 k, the 16 payload
 * bytes (and 2 scale bytes) of every weight row one after another, K zero-padded to a multiple
 * of 32; then the experts' fp32 scale_2 (gate, up, w2, 0). A GEMM block's tile of one K step is
 * a few contiguous runs of 1-3 KiB, each warp's loads 256 contiguous bytes, whatever H and I are;
 * no row is padded, so at the model's shapes it takes the checkpoint's bytes. Bytes it takes for
 * these dimensions. */
uint64_t sm70_nvfp4_moe_prepared_bytes(int32_t experts, int32_t hidden, int32_t inter);

typedef struct sm70_nvfp4_moe_prepare_params {
  sm70_nvfp4_moe_weights weights; /* the checkpoint layout, read */
  uint8_t *prepared;              /* [sm70_nvfp4_moe_prepared_bytes] written */
  int32_t experts;
  int32_t hidden;
  int32_t inter;
  int32_t reserved0;
} sm70_nvfp4_moe_prepare_params;

/* Enqueues the repack on `stream`. Returns a cudaError_t. */
int32_t sm70_nvfp4_moe_prepare_launch(const sm70_nvfp4_moe_prepare_params *p, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* SM70OPS_KERNELS_NVFP4_MOE_NVFP4_MOE_H_ */
