#include "tests/fuzz/fuzz_args.h"

#include <math.h>
#include <string.h>

#include "integration/host/sm70ops_desc.h"
#include "kernels/nvfp4_moe/nvfp4_moe.h"

enum { kMaxDims = 6 };

static const DLDataType kDtypes[] = {
    {kDLFloat, 16, 1}, {kDLBfloat, 16, 1}, {kDLFloat, 32, 1}, {kDLFloat, 64, 1},   {kDLInt, 32, 1},
    {kDLInt, 64, 1},   {kDLUInt, 8, 1},    {kDLUInt, 64, 1},  {kDLInt, 8, 1},      {kDLFloat, 8, 1},
    {kDLFloat, 16, 2}, {kDLInt, 32, 0},    {kDLUInt, 1, 1},   {kDLComplex, 64, 1},
};

static const int64_t kDims[] = {0,
                                1,
                                -1,
                                2,
                                3,
                                15,
                                16,
                                17,
                                63,
                                64,
                                65,
                                127,
                                128,
                                256,
                                4096,
                                8192,
                                INT32_MAX,
                                (int64_t)INT32_MAX + 1,
                                (int64_t)1 << 40,
                                INT64_MAX,
                                INT64_MIN,
                                -(int64_t)INT32_MAX};

static const int64_t kStrides[] = {0,
                                   1,
                                   -1,
                                   2,
                                   8,
                                   16,
                                   24,
                                   (int64_t)1 << 31,
                                   (int64_t)1 << 40,
                                   ((int64_t)1 << 47) + 16,
                                   (int64_t)1 << 48,
                                   ((int64_t)1 << 48) + 8,
                                   INT64_MAX / 2 + 1,
                                   INT64_MAX,
                                   INT64_MIN,
                                   -((int64_t)1 << 40)};

static const uint64_t kOffsets[] = {1,          2,
                                    4,          8,
                                    16,         32,
                                    256,        4096,
                                    1ull << 40, (uint64_t)INT64_MAX,
                                    UINT64_MAX, UINT64_MAX - 15,
                                    1ull << 63};

/* 0x1000, 0x1100, ...: aligned for every rule of the ABI and never mapped (vm.mmap_min_addr). */
static uintptr_t fake_data(int32_t index) { return 0x1000u + 0x100u * (uintptr_t)(index % 0xF0); }

/* Two's complement addition: the harness itself must stay free of undefined behaviour. */
static int64_t wrap_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }

#define PICK(r, table) ((table)[fz_u8(r) % (sizeof(table) / sizeof((table)[0]))])

static void dense_strides(int32_t ndim, const int64_t *shape, int64_t *strides) {
  int64_t stride = 1;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    strides[d] = stride;
    int64_t extent = shape[d] > 1 ? shape[d] : 1;
    /* Dense strides of a shape already out of range are meaningless: keep them finite. */
    if (extent > ((int64_t)1 << 20) || stride > ((int64_t)1 << 40)) extent = 1;
    stride *= extent;
  }
}

/* A copy of a baseline tensor, broken as the bytes say: a mode byte below 0x80 (or end of input)
 * keeps what is there; otherwise its low 5 bits pick a mutation and bit 6 asks for another one.
 * NULL when `present` (or a mutation) says so. */
static const DLTensor *make_tensor(fz_reader *r, const DLTensor *base, int32_t present,
                                   int32_t index) {
  int32_t ndim = base->ndim, shape_null = 0, strides_null = 0;
  int64_t shape[kMaxDims] = {0}, strides[kMaxDims] = {0};
  memcpy(shape, base->shape, (size_t)ndim * sizeof(int64_t));
  memcpy(strides, base->strides, (size_t)ndim * sizeof(int64_t));
  DLTensor t = {
      .data = (void *)fake_data(index),
      .device = base->device,
      .ndim = ndim,
      .dtype = base->dtype,
  };
  for (int32_t round = 0; round < 8; ++round) {
    uint8_t m = fz_u8(r);
    if (!(m & 0x80)) break;
    int32_t dims = ndim > 0 ? ndim : 0;
    switch (m & 0x0F) {
      case 0:
        present = !present;
        break;
      case 1: {
        int32_t n = (int32_t)(fz_u8(r) % (kMaxDims + 2)) - 1; /* -1..6 */
        for (int32_t d = dims; d < n; ++d) shape[d] = (int64_t)(fz_u8(r) % 5);
        ndim = n;
        dense_strides(ndim, shape, strides);
        break;
      }
      case 2:
        if (dims) shape[fz_u8(r) % dims] = PICK(r, kDims);
        break;
      case 3:
        if (dims) strides[fz_u8(r) % dims] = PICK(r, kStrides);
        break;
      case 4: /* a shape change that keeps the strides dense: only the shape relation breaks */
        if (dims) {
          int32_t d = fz_u8(r) % dims;
          shape[d] = (fz_u8(r) & 1) ? PICK(r, kDims) : wrap_add(shape[d], (int8_t)fz_u8(r));
          dense_strides(ndim, shape, strides);
        }
        break;
      case 5:
        strides_null = !strides_null;
        break;
      case 6:
        shape_null = !shape_null;
        break;
      case 7:
        t.dtype = PICK(r, kDtypes);
        break;
      case 8:
        t.dtype.code = fz_u8(r);
        t.dtype.bits = fz_u8(r);
        t.dtype.lanes = fz_u16(r);
        break;
      case 9:
        t.byte_offset = (fz_u8(r) & 1) ? PICK(r, kOffsets) : fz_u64(r);
        break;
      case 10: {
        static const int32_t kTypes[] = {kDLCPU, kDLCUDAHost, kDLCUDAManaged, kDLROCM, 0, -1};
        t.device.device_type =
            (fz_u8(r) & 1) ? (DLDeviceType)PICK(r, kTypes) : (DLDeviceType)(int32_t)fz_u32(r);
        break;
      }
      case 11: {
        static const int32_t kIds[] = {1, -1, 7, INT32_MAX, INT32_MIN};
        t.device.device_id = PICK(r, kIds);
        break;
      }
      case 12: {
        uint8_t k = fz_u8(r) % 6;
        uintptr_t base = fake_data(index);
        uintptr_t values[6] = {
            0, base + 1, base + 2, base + 16, (uintptr_t)fz_u64(r), (uintptr_t)0 - 256};
        t.data = (void *)values[k];
        break;
      }
      case 13: /* strides off by a little: +-1 element, doubled, swapped */
        if (dims) {
          int32_t d = fz_u8(r) % dims;
          uint8_t k = fz_u8(r) % 4;
          if (k == 0) strides[d] = wrap_add(strides[d], 1);
          if (k == 1) strides[d] = wrap_add(strides[d], -1);
          if (k == 2) strides[d] = wrap_add(strides[d], strides[d]);
          if (k == 3 && dims > 1) {
            int64_t tmp = strides[0];
            strides[0] = strides[dims - 1];
            strides[dims - 1] = tmp;
          }
        }
        break;
      case 14: /* a random shape: every dim from the bytes */
        for (int32_t d = 0; d < dims; ++d) shape[d] = (int64_t)fz_u64(r);
        break;
      case 15: /* random strides */
        for (int32_t d = 0; d < dims; ++d) strides[d] = (int64_t)fz_u64(r);
        break;
    }
    if (!(m & 0x40)) break;
  }
  if (!present) return NULL;
  size_t bytes = (size_t)(ndim > 0 ? ndim : 0) * sizeof(int64_t);
  t.ndim = ndim;
  if (!shape_null) {
    t.shape = fz_alloc(bytes);
    if (bytes) memcpy(t.shape, shape, bytes);
  }
  if (!strides_null) {
    t.strides = fz_alloc(bytes);
    if (bytes) memcpy(t.strides, strides, bytes);
  }
  DLTensor *out = fz_alloc(sizeof(DLTensor));
  *out = t;
  return out;
}

/* A scalar kept as is, unless the mode byte is 0xC0 or more: then a special or random value. */
static int32_t mut_i32(fz_reader *r, int32_t v) {
  static const int32_t kSpecial[] = {0,    1,     -1,     2,      15,        16,       63,
                                     64,   65,    511,    512,    2048,      4096,     4097,
                                     8192, 65536, 131072, 262144, INT32_MAX, INT32_MIN};
  uint8_t m = fz_u8(r);
  if (m < 0xC0) return v;
  if (m < 0xF0) return PICK(r, kSpecial);
  if (m < 0xF8) return (int32_t)wrap_add(v, (int8_t)fz_u8(r));
  return (int32_t)fz_u32(r);
}

static uint64_t mut_u64(fz_reader *r, uint64_t v) {
  static const uint64_t kSpecial[] = {
      1,          255,        256,        4096,       1u << 20,        1ull << 28,
      1ull << 32, 1ull << 40, 1ull << 63, UINT64_MAX, UINT64_MAX - 255};
  uint8_t m = fz_u8(r);
  if (m < 0xC0) return v;
  if (m < 0xF0) return PICK(r, kSpecial);
  return fz_u64(r);
}

static float mut_f32(fz_reader *r, float v) {
  static const float kSpecial[] = {0.0f,  -0.0f,    -1.0f,     1.0f, 1e-45f,
                                   1e38f, INFINITY, -INFINITY, NAN,  0.088388f};
  uint8_t m = fz_u8(r);
  if (m < 0xC0) return v;
  if (m < 0xF0) return PICK(r, kSpecial);
  uint32_t bits = fz_u32(r);
  float f;
  memcpy(&f, &bits, sizeof(f));
  return f;
}

/* The struct_size a host claims: usually sizeof, else smaller, larger or random. Returns the copy
 * of `full` (true_size bytes) the plugin gets: exactly as large as it claims, when that is small
 * enough to allocate, so ASan sees a read past the claim. NULL when the bytes ask for no struct. */
static const void *sized_copy(fz_reader *r, const void *full, uint32_t true_size, uint32_t *claim) {
  uint8_t m = fz_u8(r);
  uint32_t size = true_size;
  switch (m >> 5) {
    case 4:
      size = fz_u8(r) % true_size;
      break;
    case 5:
      size = true_size + 1 + fz_u8(r) % 64;
      break;
    case 6:
      size = fz_u32(r);
      break;
    case 7:
      if (m & 1) {
        *claim = 0;
        return NULL;
      }
      size = (uint32_t)PICK(r, ((const uint32_t[]){24, 56, 104, 112, 128, 40, 8, 0, 4}));
      break;
    default:
      break;
  }
  *claim = size;
  size_t alloc = size < 4 ? 4 : size;
  if (alloc > (size_t)true_size + 256) alloc = true_size; /* a huge claim: the plugin declines */
  char *copy = fz_alloc(alloc);
  memcpy(copy, full, alloc < true_size ? alloc : true_size);
  memcpy(copy, &size, sizeof(size)); /* struct_size is the first field of every struct */
  return copy;
}

/* Consistent model numbers; the variant byte shrinks or changes some of them together. */
typedef struct dims {
  int64_t rows, requests, seq_len, page, ratio, max_pages, num_pages, topk, sel_blocks;
  int32_t token_ids; /* qsa_attn's selection: 0 the triple, 1 token ids, 2 with a count column */
  int64_t heads_q, heads_kv, head_dim, experts, expert_topk, hidden, inter;
} dims;

static dims model_dims(fz_reader *r) {
  dims d = {.rows = 8192,
            .requests = 2,
            .seq_len = 4096,
            .page = 64,
            .ratio = 4,
            .topk = 2048,
            .heads_q = 6,
            .heads_kv = 1,
            .head_dim = 256,
            .experts = 512,
            .expert_topk = 10,
            .hidden = 2560,
            .inter = 160};
  uint8_t v = fz_u8(r);
  if (v & 0x80) {
    static const int64_t kRows[] = {0, 1, 16, 17, 100000};
    static const int64_t kHeadDim[] = {128, 256, 64};
    static const int64_t kHeadsQ[] = {1, 2, 8, 16, 32};
    static const int64_t kSeq[] = {1, 64, 65, 131072, 262144};
    static const int64_t kTopk[] = {1, 512, 511, 4096, 64, 2050};
    static const int64_t kPage[] = {16, 32, 64, 128, 8};
    static const int64_t kRatio[] = {1, 2, 4, 3};
    d.rows = (v & 1) ? PICK(r, kRows) : d.rows;
    d.head_dim = (v & 2) ? PICK(r, kHeadDim) : d.head_dim;
    d.heads_q = (v & 4) ? PICK(r, kHeadsQ) : d.heads_q;
    d.seq_len = (v & 8) ? PICK(r, kSeq) : d.seq_len;
    d.topk = (v & 16) ? PICK(r, kTopk) : d.topk;
    if (v & 64) {
      d.page = PICK(r, kPage);
      d.ratio = PICK(r, kRatio);
    }
    if (v & 32) {
      d.experts = 1 + fz_u8(r) % 4 * 256;
      d.hidden = 16 * (1 + fz_u8(r) % 256);
      d.inter = 16 * (1 + fz_u8(r) % 16);
      d.expert_topk = 1 + fz_u8(r) % 20;
    }
  }
  d.token_ids = fz_u8(r) % 3;
  d.max_pages = (d.seq_len + d.page - 1) / d.page;
  d.num_pages = d.requests * d.max_pages;
  d.sel_blocks = sm70ops_desc_selection_width(d.topk, d.ratio, d.max_pages);
  return d;
}

static sm70ops_desc_batch batch_of(const dims *d) {
  return (sm70ops_desc_batch){.rows = d->rows,
                              .requests = d->requests,
                              .max_pages = d->max_pages,
                              .cache_pages = d->num_pages,
                              .page_size = d->page,
                              .selected_pages = d->sel_blocks,
                              .max_seq_len = (int32_t)d->seq_len,
                              .max_query_len = (int32_t)d->seq_len};
}

/* Op 4's output at `d`'s sizes, as the plugin's check asks for it (H and I padded for the
 * prepared tiles), so that the baseline passes the size check and the mutations reach beyond it. */
static int64_t prepared_bytes(const dims *d) {
  return (int64_t)sm70_nvfp4_moe_prepared_bytes((int32_t)d->experts, (int32_t)d->hidden,
                                                (int32_t)d->inter);
}

/* The valid descriptor of `op` at `d`'s sizes, every optional tensor given. */
static void build_baseline(sm70ops_desc_call *call, sm70ops_op op, const dims *d) {
  const sm70ops_desc_batch batch = batch_of(d);
  const sm70ops_desc_experts experts = {d->experts, d->hidden, d->inter};
  if (op == SM70OPS_OP_QSA_INDEX) {
    const sm70ops_desc_qsa_index_sizes s = {.batch = batch,
                                            .heads = 4,
                                            .dim = 128,
                                            .topk = (int32_t)d->topk,
                                            .compress_ratio = (int32_t)d->ratio,
                                            .with_weights = 1,
                                            .with_topk_idx = 1,
                                            .with_selection = 1};
    sm70ops_desc_qsa_index(call, &s, 0);
  } else if (op == SM70OPS_OP_QSA_ATTN) {
    /* ABI 1.2's token ids in place of the triple: vLLM's packed buffer [T, B + c] (count column)
     * or SGLang's [T, B + c - 1]. */
    const int32_t count_column = d->token_ids == 2;
    const sm70ops_desc_qsa_attn_sizes s = {
        .batch = batch,
        .q_heads = d->heads_q,
        .kv_heads = d->heads_kv,
        .head_dim = d->head_dim,
        .sm_scale = 1.0f / sqrtf((float)d->head_dim),
        .with_lse = 1,
        .with_gate = 1,
        .token_ids_width = d->token_ids ? d->topk + d->ratio - 1 + count_column : 0,
        .token_ids_count_column = count_column};
    sm70ops_desc_qsa_attn(call, &s, 0);
  } else if (op == SM70OPS_OP_NVFP4_MOE) {
    const sm70ops_desc_nvfp4_moe_sizes s = {.experts = experts,
                                            .rows = d->rows,
                                            .topk = d->expert_topk,
                                            .prepared_bytes = prepared_bytes(d)};
    sm70ops_desc_nvfp4_moe(call, &s, 0);
  } else {
    const sm70ops_desc_nvfp4_moe_prepare_sizes s = {.experts = experts,
                                                    .prepared_bytes = prepared_bytes(d)};
    sm70ops_desc_nvfp4_moe_prepare(call, &s, 0);
  }
}

/* Every tensor of the call replaced by a broken copy in the arena; op 3's baseline has no
 * `prepared` (checkpoint weights), which a mutation may add. */
static void break_tensors(fz_reader *r, sm70ops_desc_call *call) {
  for (int32_t i = 0; i < call->tensor_count; ++i) {
    const sm70ops_desc_tensor *t = &call->tensors[i];
    const int32_t present = call->op != SM70OPS_OP_NVFP4_MOE || strcmp(t->name, "prepared") != 0;
    *t->field = make_tensor(r, &t->tensor, present, i);
  }
}

static const sm70ops_nvfp4_weights *break_weights(fz_reader *r, sm70ops_nvfp4_weights *w) {
  w->reserved0 = (uint32_t)mut_i32(r, 0);
  uint32_t claim;
  return sized_copy(r, w, sizeof(*w), &claim);
}

int32_t fz_is_args_size(sm70ops_op op, uint32_t size) {
  switch (op) {
    case SM70OPS_OP_QSA_INDEX:
      return size == SM70OPS_QSA_INDEX_ARGS_SIZE_1_0 || size == fz_args_size(op);
    case SM70OPS_OP_QSA_ATTN:
      return size == SM70OPS_QSA_ATTN_ARGS_SIZE_1_0 || size == SM70OPS_QSA_ATTN_ARGS_SIZE_1_1 ||
             size == fz_args_size(op);
    default:
      return fz_args_size(op) != 0 && size == fz_args_size(op);
  }
}

uint32_t fz_args_size(sm70ops_op op) {
  switch (op) {
    case SM70OPS_OP_QSA_INDEX:
      return sizeof(sm70ops_qsa_index_args);
    case SM70OPS_OP_QSA_ATTN:
      return sizeof(sm70ops_qsa_attn_args);
    case SM70OPS_OP_NVFP4_MOE:
      return sizeof(sm70ops_nvfp4_moe_args);
    case SM70OPS_OP_NVFP4_MOE_PREPARE:
      return sizeof(sm70ops_nvfp4_moe_prepare_args);
    default:
      return 0;
  }
}

/* The scalars, then the tensors, then the weights struct, as the bytes say. */
static void break_fields(fz_reader *r, sm70ops_desc_call *call) {
  switch (call->op) {
    case SM70OPS_OP_QSA_INDEX: {
      sm70ops_qsa_index_args *a = &call->args.qsa_index;
      a->topk = mut_i32(r, a->topk);
      a->max_seq_len = mut_i32(r, a->max_seq_len);
      a->max_query_len = mut_i32(r, a->max_query_len);
      a->max_workspace_bytes = mut_u64(r, 0);
      a->compress_ratio = mut_i32(r, a->compress_ratio);
      a->reserved1 = (uint32_t)mut_i32(r, 0);
      break_tensors(r, call);
      break;
    }
    case SM70OPS_OP_QSA_ATTN: {
      sm70ops_qsa_attn_args *a = &call->args.qsa_attn;
      a->sm_scale = mut_f32(r, a->sm_scale);
      a->max_seq_len = mut_i32(r, a->max_seq_len);
      a->max_query_len = mut_i32(r, a->max_query_len);
      a->token_ids_count_column = mut_i32(r, a->token_ids_count_column);
      a->reserved2 = (uint32_t)mut_i32(r, 0);
      break_tensors(r, call);
      break;
    }
    case SM70OPS_OP_NVFP4_MOE:
      call->args.nvfp4_moe.reserved0 = (uint32_t)mut_i32(r, 0);
      break_tensors(r, call);
      call->args.nvfp4_moe.weights = break_weights(r, &call->weights);
      break;
    default:
      call->args.nvfp4_moe_prepare.reserved0 = (uint32_t)mut_i32(r, 0);
      break_tensors(r, call);
      call->args.nvfp4_moe_prepare.weights = break_weights(r, &call->weights);
      break;
  }
}

fz_args fz_build_args(fz_reader *r, sm70ops_op op) {
  fz_args out = {.true_size = fz_args_size(op)};
  if (out.true_size == 0) return out; /* an unknown op: no args, as the plugin must see them */
  const dims d = model_dims(r);
  sm70ops_desc_call call;
  build_baseline(&call, op, &d);
  break_fields(r, &call);
  out.args = sized_copy(r, &call.args, out.true_size, &out.struct_size);
  return out;
}
