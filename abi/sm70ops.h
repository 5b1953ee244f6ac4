/*
 * sm70ops.h: the stable C ABI of libsm70ops.so, SM70 (V100) prefill kernels for sparse-attention
 * NVFP4 MoE models. This header is the whole API: anything not declared here is not API.
 *
 * C99 and C++, no CUDA header (streams are `void *`). Tensors are borrowed DLPack views.
 *
 * Lifecycle seen from a host:
 *   1. dlopen("libsm70ops.so", RTLD_NOW | RTLD_LOCAL); dlsym(SM70OPS_ENTRY_POINT_NAME).
 *   2. sm70ops_get_api(SM70OPS_ABI_MAJOR, SM70OPS_ABI_MINOR, &minor, &api): the one exported
 * symbol.
 *   3. api->context_create(&desc, &ctx): reads the environment once (see README, "Environment").
 *   4. Per call: api->check(ctx, op, &args, &decision). If it declines, run the host's own path.
 *      Otherwise api->execute(ctx, op, &args, stream, workspace, workspace_bytes).
 *   5. api->context_destroy(ctx); dlclose. The library stays mapped after dlclose (it carries a
 *      CUDA runtime that cannot be unloaded cleanly); a later dlopen returns the same instance.
 *
 * Fail-open contract: a host treats every status other than SM70OPS_OK, and every decline, as "use
 * your own implementation". The plugin never aborts, exits, throws or prints; it logs only through
 * the callback in sm70ops_context_desc.
 *
 * Versioning rules (see abi/CHANGELOG.md):
 *   - Every struct that crosses the boundary starts with `struct_size`; fields are only appended.
 *     A plugin reads a field only if struct_size covers it, and takes an argument struct of the
 *     size any minor up to its own defined (SM70OPS_*_ARGS_SIZE_1_0, _1_1 and sizeof): fields the
 *     host's size does not cover take their documented defaults. Any other size is declined
 *     (SM70OPS_REASON_STRUCT_SIZE: a larger one is a newer host); an output struct must hold
 *     1.0's fields.
 *   - The function table is append-only; a NULL slot means "not implemented".
 *   - Enums travel as int32_t; unknown values are declined, never trusted.
 */
#ifndef SM70OPS_H_
#define SM70OPS_H_

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SM70OPS_ABI_MAJOR 1
#define SM70OPS_ABI_MINOR 2

/* Semantic version of this header's plugin release. */
#define SM70OPS_VERSION_MAJOR 0
#define SM70OPS_VERSION_MINOR 3
#define SM70OPS_VERSION_PATCH 0

#define SM70OPS_ENTRY_POINT_NAME "sm70ops_get_api"

/* ------------------------------------------------------------------------------------------------
 * Status codes: the closed set every function returns. api->status_name gives the identifier
 * ("SM70OPS_ERR_INVALID_ARGUMENT"), api->status_string a sentence, api->last_error the detail of
 * the calling thread's most recent failure.
 */
typedef int32_t sm70ops_status;
enum {
  SM70OPS_OK = 0,
  SM70OPS_ERR_INVALID_ARGUMENT = 1, /* a NULL, a bad descriptor, a wrong dtype/rank/shape/stride */
  SM70OPS_ERR_ABI_MISMATCH = 2,     /* the host speaks an ABI major this plugin does not */
  SM70OPS_ERR_UNSUPPORTED = 3,      /* execute on a descriptor the capability check declines */
  SM70OPS_ERR_NOT_IMPLEMENTED = 4,  /* the op is known but its kernel is not in this build */
  SM70OPS_ERR_WORKSPACE_TOO_SMALL = 5, /* workspace_bytes below what check reported */
  SM70OPS_ERR_NO_DEVICE = 6,           /* no usable CUDA device */
  SM70OPS_ERR_CUDA = 7,                /* the CUDA runtime failed; last_error has its message */
  SM70OPS_ERR_INDEX_OUT_OF_RANGE = 8,  /* checked mode: an earlier call on the context saw a bad
                                          device-side index; last_error names it */
  SM70OPS_ERR_INTERNAL = 9             /* a bug in the plugin; please report last_error */
};
#define SM70OPS_STATUS_COUNT 10

/* ------------------------------------------------------------------------------------------------
 * Ops. Each op has one argument struct below; ids are stable and never reused.
 */
typedef int32_t sm70ops_op;
enum {
  SM70OPS_OP_QSA_INDEX = 1,        /* sm70ops_qsa_index_args: score, top-k, expand */
  SM70OPS_OP_QSA_ATTN = 2,         /* sm70ops_qsa_attn_args: selected sparse attention */
  SM70OPS_OP_NVFP4_MOE = 3,        /* sm70ops_nvfp4_moe_args: grouped W4A16 MoE */
  SM70OPS_OP_NVFP4_MOE_PREPARE = 4 /* sm70ops_nvfp4_moe_prepare_args: one-time weight repack */
};

/* ------------------------------------------------------------------------------------------------
 * Capability decisions. `reason` is stable across releases (hosts may switch on it); `message` is
 * for people and may change wording.
 */
typedef int32_t sm70ops_reason;
enum {
  SM70OPS_REASON_ACCEPTED = 0,
  SM70OPS_REASON_PLUGIN_DISABLED = 1, /* SM70OPS_DISABLE, or a malformed SM70OPS_* variable */
  SM70OPS_REASON_OP_DISABLED = 2, /* a per-op SM70OPS_DISABLE_* or VLLM_SM70_QSA_INDEXER_CUBLAS=0 */
  SM70OPS_REASON_NO_DEVICE = 3,   /* the context has no CUDA device */
  SM70OPS_REASON_ARCH = 4,        /* not SM70 and not allow-listed, no code for it in this build,
                                     or less shared memory per block than the kernels need */
  SM70OPS_REASON_UNKNOWN_OP = 5,  /* op id this plugin does not know */
  SM70OPS_REASON_STRUCT_SIZE = 6, /* args struct_size too small or newer than this plugin */
  SM70OPS_REASON_INVALID_ARGUMENT = 7, /* descriptor malformed (execute returns INVALID_ARGUMENT) */
  SM70OPS_REASON_UNSUPPORTED_DTYPE = 8, /* well-formed, but a dtype without a fast path */
  SM70OPS_REASON_UNSUPPORTED_SHAPE = 9, /* well-formed, but a shape outside the supported table */
  SM70OPS_REASON_BELOW_CROSSOVER = 10,  /* supported, but measured slower than the host's path */
  SM70OPS_REASON_NOT_IMPLEMENTED = 11,  /* supported shape whose kernel is not in this build */
  SM70OPS_REASON_TOO_LARGE = 12         /* sizes would overflow the kernels' index arithmetic */
};
#define SM70OPS_REASON_COUNT 13

/* Which implementation an accepted call runs; SM70OPS_ROUTE_NONE on a decline. */
typedef int32_t sm70ops_route;
enum {
  SM70OPS_ROUTE_NONE = 0,
  SM70OPS_ROUTE_QSA_INDEX_WMMA = 1,
  SM70OPS_ROUTE_QSA_ATTN_WMMA = 2,
  SM70OPS_ROUTE_NVFP4_MOE_WMMA = 3,
  SM70OPS_ROUTE_NVFP4_MOE_PREPARE = 4
};

#define SM70OPS_MESSAGE_BYTES 256

/* Output of api->check. The caller sets struct_size; the plugin fills the rest. */
typedef struct sm70ops_decision {
  uint32_t struct_size;
  int32_t accepted;         /* 1: execute will run this descriptor; 0: use the host's path */
  sm70ops_reason reason;    /* why; SM70OPS_REASON_ACCEPTED when accepted */
  sm70ops_route route;      /* what execute would run */
  uint64_t workspace_bytes; /* scratch execute needs on the device (0: pass NULL) */
  uint64_t output_bytes;    /* NVFP4 MoE prepare: bytes of the repacked weights; otherwise 0 */
  char message[SM70OPS_MESSAGE_BYTES]; /* NUL-terminated, for people: "rows 384 < 512: ..." */
} sm70ops_decision;

/* ------------------------------------------------------------------------------------------------
 * Context: one per (host, device). Immutable after creation, so every call on it is thread-safe;
 * the one exception is checked mode's error record, which kernels write and which one execute
 * (whichever comes first after the faulting kernel finished) takes and reports.
 */
typedef struct sm70ops_context sm70ops_context; /* opaque */

typedef int32_t sm70ops_log_level;
enum { SM70OPS_LOG_ERROR = 0, SM70OPS_LOG_WARN = 1, SM70OPS_LOG_INFO = 2, SM70OPS_LOG_DEBUG = 3 };

/* Called on the thread that made the call; `message` is valid only during the call. */
typedef void (*sm70ops_log_fn)(void *user_data, sm70ops_log_level level, const char *message);

typedef struct sm70ops_context_desc {
  uint32_t struct_size;
  /* CUDA device the context's calls run on. An ordinal past the machine's devices is refused
   * (SM70OPS_ERR_INVALID_ARGUMENT); on a machine with none, every op declines NO_DEVICE. */
  int32_t device_ordinal;
  /* Compute capability as major*10+minor (70 for V100). 0: ask the CUDA runtime about
   * device_ordinal (the device count and attributes, and with SM70OPS_CHECKED a mapped host
   * allocation: context_create's only CUDA calls). Nonzero: trust it and touch no CUDA at all, for
   * planning on a machine without that GPU; execute then verifies it against the real device. */
  int32_t compute_capability;
  sm70ops_log_level log_level; /* messages above this level are not sent */
  sm70ops_log_fn log_fn;       /* may be NULL: no logging */
  void *log_user_data;
} sm70ops_context_desc;

/* ------------------------------------------------------------------------------------------------
 * Identity of the loaded plugin. All strings NUL-terminated.
 */
typedef struct sm70ops_identity {
  uint32_t struct_size;
  uint32_t abi_major;
  uint32_t abi_minor;
  uint32_t version_major;
  uint32_t version_minor;
  uint32_t version_patch;
  uint32_t dlpack_version; /* DLPACK_VERSION the plugin was built against */
  uint32_t cuda_version;   /* CUDA runtime the plugin was built with, 1000*major + 10*minor */
  char name[32];           /* "sm70ops" */
  char git_revision[48];   /* commit the build came from, "-dirty" appended for local changes */
  char sm_list[64];        /* SASS the library carries, e.g. "sm_70" */
} sm70ops_identity;

/* What the CUDA runtime reports for one device. */
typedef struct sm70ops_device_info {
  uint32_t struct_size;
  int32_t ordinal;
  int32_t compute_capability; /* major*10+minor */
  int32_t multiprocessors;
  uint64_t global_memory_bytes;
  char name[96];
} sm70ops_device_info;

/* ------------------------------------------------------------------------------------------------
 * Op arguments. Conventions shared by all ops (full contract: ../shared/spec/ops.md, version 2):
 *   - Tensors are borrowed DLTensor views on the context's device (kDLCUDA); `strides` is required
 *     (in elements), `byte_offset` honoured, the innermost dimension must be contiguous and rows
 *     16-byte aligned. check() reads only the descriptors; data may be NULL there. execute() also
 *     requires data for every tensor that is not marked optional.
 *   - Varlen batches, vLLM style: query_start_loc [R+1] int32, seq_lens [R] int32 (context
 *     including this chunk), block_table [R, max_pages] int32 (logical page -> physical page; the
 *     KV cache and the index cache share it). Row i of request r sits at pos = seq_len -
 *     query_len + i and sees the L = pos + 1 tokens 0..pos. The page size P (16, 32 or 64 tokens)
 *     is read from the caches' shapes.
 *   - max_seq_len / max_query_len are host-side bounds of seq_lens and of the per-request row
 *     counts (vLLM keeps both on the host). max_seq_len sizes the launches and the workspace, so
 *     the op is CUDA-graph safe; max_query_len is validated against the rows.
 */

/* Op 1, QSA index. The index cache holds one key per group of c tokens (c = compress_ratio);
 * row t sees G = floor(L / c) complete groups, scored s[t,g] = sum_h w[t,h] * relu(q[t,h,:] .
 * k[g,:]). It selects the topk / c best groups (all when G <= topk / c; ties to the lower group)
 * plus the tail tokens c*G .. pos that no complete group holds: the row's token set S, at most
 * topk + c - 1 tokens. */
typedef struct sm70ops_qsa_index_args {
  uint32_t struct_size;
  int32_t topk; /* the budget B in tokens, a multiple of compress_ratio */
  int32_t max_seq_len;
  int32_t max_query_len;
  /* Device scratch the host allows (0: 256 MiB). The op scores rows in chunks that fit it. */
  uint64_t max_workspace_bytes;
  const DLTensor *q; /* [T, 4, 128] fp16, norm and RoPE applied */
  /* [T, 4] fp32, every scale folded in. ABI 1.1: NULL weighs every head 1/sqrt(128) (the
   * weight-free indexer); a 1.0-sized struct must give it. */
  const DLTensor *weights;
  const DLTensor *k_index; /* [num_pages, P / c, 128] fp16: page p holds KV page p's groups */
  const DLTensor *query_start_loc; /* [R+1] int32 */
  const DLTensor *seq_lens;        /* [R] int32 */
  const DLTensor *block_table;     /* [R, max_pages] int32 */
  /* Outputs; each optional, at least one of topk_idx or the sel_* triple. NB must be at least
   * min(topk / c + 1, ceil(max_seq_len / P)) (c = 1: min(topk, ceil(max_seq_len / P))), the
   * most pages a row's set can touch. */
  const DLTensor *topk_idx;   /* [T, topk + c - 1] int32: S ascending, request-local, -1 padded */
  const DLTensor *sel_blocks; /* [T, NB] int32, sorted unique logical pages, -1 padded */
  const DLTensor *sel_mask;   /* [T, NB] uint64, bit b: token P*page+b is in S */
  const DLTensor *sel_count;  /* [T] int32, valid entries of sel_blocks */
  /* ABI 1.1 */
  int32_t compress_ratio; /* c: 1, 2 or 4 (Qwen3.8-Flash-Next: 4); 0 or absent: 1 */
  uint32_t reserved1;     /* must be 0 */
} sm70ops_qsa_index_args;

/* Op 2, QSA selected attention over the expansion of op 1, causal bound applied by the op:
 * o[t,h] = softmax(sm_scale * q[t,h] . k[S_t]) v[S_t], times sigmoid(gate[t,h]) when gated.
 * The set S_t comes as the sel_* triple or (ABI 1.2) as the engines' token ids, one of the two. */
typedef struct sm70ops_qsa_attn_args {
  uint32_t struct_size;
  float sm_scale;
  int32_t max_seq_len;
  int32_t max_query_len;
  const DLTensor *q;               /* [T, Hq, D] fp16, D in {128, 256}, Hq a multiple of Hkv */
  const DLTensor *k_cache;         /* [num_pages, P, Hkv, D] fp16 */
  const DLTensor *v_cache;         /* [num_pages, P, Hkv, D] fp16; may view the same buffer */
  const DLTensor *query_start_loc; /* [R+1] int32 */
  const DLTensor *seq_lens;        /* [R] int32 */
  const DLTensor *block_table;     /* [R, max_pages] int32 */
  /* The selection as op 1 expands it; each NULL when token_ids gives it instead. */
  const DLTensor *sel_blocks; /* [T, NB] int32, strictly ascending (as op 1 writes them) */
  const DLTensor *sel_mask;   /* [T, NB] uint64, bit b: token P*page+b */
  const DLTensor *sel_count;  /* [T] int32 */
  const DLTensor *out;        /* [T, Hq, D] fp16 */
  const DLTensor *lse;        /* [T, Hq] fp32, natural log of the ungated sums; optional */
  /* ABI 1.1 */
  const DLTensor *gate; /* [T, Hq, D] fp16: out *= sigmoid(gate) in fp32; optional (NULL) */
  /* ABI 1.2: the selection as vLLM's and SGLang's indexers give it, in place of the sel_* triple
   * (which must then be NULL). [T, W] int32: row t's tokens as request-relative positions
   * 0 .. pos_t, in any order, -1 padding anywhere. An id outside [0, pos_t], or one given twice,
   * is skipped (a repeat counts once); checked mode reports it. The plugin expands the ids into
   * its workspace (T x NB x 12 + T x 4 bytes, NB = min(ids a row holds, ceil(max_seq_len / P))),
   * then attends as over the triple. NULL (the default): the triple. */
  const DLTensor *token_ids;
  /* 1: token_ids' last column holds each row's count n of valid ids, which come first (vLLM's
   * packed buffer [T, B + c]): only columns 0 .. n-1 are read, n outside [0, W-1] is clamped
   * (checked mode reports it). 0 (the default): every column holds ids. */
  int32_t token_ids_count_column;
  uint32_t reserved2; /* must be 0 */
} sm70ops_qsa_attn_args;

/* The argument structs' sizes as earlier ABI minors defined them: what such a host sends. */
#define SM70OPS_QSA_INDEX_ARGS_SIZE_1_0 offsetof(sm70ops_qsa_index_args, compress_ratio)
#define SM70OPS_QSA_ATTN_ARGS_SIZE_1_0 offsetof(sm70ops_qsa_attn_args, gate)
#define SM70OPS_QSA_ATTN_ARGS_SIZE_1_1 offsetof(sm70ops_qsa_attn_args, token_ids)

/* NVFP4 expert weights in the ModelOpt/vLLM checkpoint layout (unswizzled); e4m3 travels as uint8.
 */
/* Every tensor of it dense (row-major, no padding), as checkpoints store them. */
typedef struct sm70ops_nvfp4_weights {
  uint32_t struct_size;
  uint32_t reserved0;  /* keeps the pointers 8-byte aligned; must be 0 */
  const DLTensor *w13; /* [E, 2I, H/2] uint8, rows 0..I-1 gate, I..2I-1 up; low nibble even k */
  const DLTensor *w13_scale;   /* [E, 2I, H/16] uint8 (e4m3) */
  const DLTensor *w13_scale_2; /* [E, 2] fp32 (gate, up) */
  const DLTensor *w2;          /* [E, H, I/2] uint8 */
  const DLTensor *w2_scale;    /* [E, H, I/16] uint8 (e4m3) */
  const DLTensor *w2_scale_2;  /* [E] fp32 */
} sm70ops_nvfp4_weights;

/* Op 4: repack checkpoint weights once into `prepared` (check's output_bytes tells its size). */
typedef struct sm70ops_nvfp4_moe_prepare_args {
  uint32_t struct_size;
  uint32_t reserved0; /* must be 0 */
  const sm70ops_nvfp4_weights *weights;
  const DLTensor *prepared; /* [output_bytes] uint8, written; may be NULL for check() */
} sm70ops_nvfp4_moe_prepare_args;

/* Op 3: out[t] = sum_j topk_weights[t,j] * expert_{topk_ids[t,j]}(x[t]); at TP>1 a partial sum. */
typedef struct sm70ops_nvfp4_moe_args {
  uint32_t struct_size;
  uint32_t reserved0;                   /* must be 0 */
  const DLTensor *x;                    /* [T, H] fp16 */
  const DLTensor *topk_ids;             /* [T, k] int32 */
  const DLTensor *topk_weights;         /* [T, k] fp32 */
  const sm70ops_nvfp4_weights *weights; /* shapes always; data when `prepared` is NULL */
  const DLTensor *prepared;             /* output of op 4, or NULL */
  const DLTensor *out;                  /* [T, H] fp16 */
} sm70ops_nvfp4_moe_args;

/* ------------------------------------------------------------------------------------------------
 * The function table. Append-only; a NULL slot means "not implemented". Unless stated otherwise a
 * function is thread-safe, does not allocate on the device, and returns SM70OPS_OK or a status with
 * the detail in last_error().
 */
typedef struct sm70ops_api {
  uint32_t struct_size; /* sizeof the plugin's table: slots beyond it are absent */
  uint32_t abi_major;
  uint32_t abi_minor; /* highest minor the plugin implements */
  uint32_t reserved0;

  /* Static strings, never NULL: unknown codes give "SM70OPS_STATUS_UNKNOWN" / "unknown status". */
  const char *(*status_name)(sm70ops_status status);
  const char *(*status_string)(sm70ops_status status);
  /* The enum's suffix, for tables and logs: "BELOW_CROSSOVER", unknown: "UNKNOWN_REASON". */
  const char *(*reason_name)(sm70ops_reason reason);
  /* The calling thread's last failure, "" if none. Valid until that thread's next call. */
  const char *(*last_error)(void);

  /* Fills `out` (struct_size at least the 1.0 size). No CUDA call. */
  sm70ops_status (*get_identity)(sm70ops_identity *out);
  /* Asks the CUDA runtime: number of devices (0 and SM70OPS_OK when none) and one device's info. */
  sm70ops_status (*device_count)(int32_t *count);
  sm70ops_status (*device_info)(int32_t ordinal, sm70ops_device_info *out);

  /* Reads the environment once and logs every setting it applied. On failure *out is NULL. */
  sm70ops_status (*context_create)(const sm70ops_context_desc *desc, sm70ops_context **out);
  /* NULL is a no-op. Not concurrent with other calls on the same context. */
  void (*context_destroy)(sm70ops_context *ctx);

  /* Capability check: pure, deterministic, no CUDA call. Returns SM70OPS_OK whenever it could
   * write a decision (a decline is still SM70OPS_OK); `args` points at the op's struct. */
  sm70ops_status (*check)(const sm70ops_context *ctx, sm70ops_op op, const void *args,
                          sm70ops_decision *out);
  /* The decision's workspace_bytes alone; declines return SM70OPS_ERR_UNSUPPORTED. */
  sm70ops_status (*workspace_size)(const sm70ops_context *ctx, sm70ops_op op, const void *args,
                                   uint64_t *bytes);
  /* Runs the op on `stream` (a cudaStream_t; NULL is the legacy default stream) with `workspace`
   * (device memory of at least workspace_bytes, 256-byte aligned). Asynchronous: no allocation,
   * no synchronisation, capture-safe; the caller's current device is restored. */
  sm70ops_status (*execute)(const sm70ops_context *ctx, sm70ops_op op, const void *args,
                            void *stream, void *workspace, uint64_t workspace_bytes);
} sm70ops_api;

/* The one exported symbol. Does no work: no CUDA call, no environment read, no allocation.
 * host_major must equal SM70OPS_ABI_MAJOR (else SM70OPS_ERR_ABI_MISMATCH and *api = NULL).
 * *negotiated_minor = min(host_minor, plugin minor): the host may use what that minor defines. */
typedef sm70ops_status (*sm70ops_get_api_fn)(uint32_t host_major, uint32_t host_minor,
                                             uint32_t *negotiated_minor, const sm70ops_api **api);

#if defined(SM70OPS_BUILDING_PLUGIN)
__attribute__((visibility("default")))
#endif
sm70ops_status
sm70ops_get_api(uint32_t host_major, uint32_t host_minor, uint32_t *negotiated_minor,
                const sm70ops_api **api);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SM70OPS_H_ */
