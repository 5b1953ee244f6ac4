/* Op argument structs built from fuzz bytes, starting from valid model-shape descriptors (the TP4
 * per-rank shapes of tests/abi/op_cases.h, built by integration/host/sm70ops_desc.h; qsa_attn's
 * selection as the sel_* triple or as token ids, with or without the count column) and breaking
 * fields the bytes choose: struct_size, scalars, and per tensor NULL, ndim -1..6 (shape/strides
 * arrays sized to ndim), shapes, strides (0, negative, huge, NULL), dtype, lanes, byte_offset,
 * device, data pointer.
 *
 * Every block lives in the fuzz arena (fz_alloc) with its exact size. Data pointers are fake:
 * 256-byte aligned addresses below 64 KiB (never mapped), an offset of them, or random 64-bit
 * values; the plugin must never dereference one. */
#ifndef SM70OPS_TESTS_FUZZ_FUZZ_ARGS_H_
#define SM70OPS_TESTS_FUZZ_FUZZ_ARGS_H_

#include "tests/fuzz/fuzz_common.h"

typedef struct fz_args {
  const void *args;     /* NULL when the bytes chose so */
  uint32_t struct_size; /* what args->struct_size claims (0 when args is NULL) */
  uint32_t true_size;   /* sizeof the op's struct the fields were filled for */
} fz_args;

/* The args struct for `op` (one of the four ABI ops). An exhausted reader gives the valid
 * baseline. */
fz_args fz_build_args(fz_reader *r, sm70ops_op op);

/* sizeof the args struct of `op` in this header's ABI minor, 0 for an unknown id. */
uint32_t fz_args_size(sm70ops_op op);
/* 1 when some ABI minor gives op's args struct `size` bytes (the plugin takes each). */
int32_t fz_is_args_size(sm70ops_op op, uint32_t size);

#endif /* SM70OPS_TESTS_FUZZ_FUZZ_ARGS_H_ */
