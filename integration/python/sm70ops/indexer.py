"""The host's side of Qwen3.8-Flash-Next's QSA indexer, in torch: what an engine computes before
op 1 (shared/spec/ops.md v2, op 1 and the model's table; the public reference code's
Qwen4ExpTextQSAIndexer, read for these facts):

    q_h    = rope(rmsnorm(q_h) * (1 + w_q), position)                  # the index query
    key_g  = rope(rmsnorm(mean_fp32(k[c*g .. c*g + c - 1])) * (1 + w_k), c * g)
    s[t,g] = sum_h relu(q_h . key_g) / sqrt(128)                          # op 1, weight-free

RoPE is NeoX-style (rotate half) over the first ROTARY_DIM of an index head's 128 dims. The
compressed-key writer keeps a group's raw keys until all c exist, so chunks of any length give the
same cache as one pass. Importing this module needs no torch; its functions import it.
"""
ROTARY_DIM = 64  # of an index head's 128 dims (and of an attention head's 256)
ROPE_BASE = 10_000_000.0  # assumed from the Qwen3-Next family; any base costs the ops the same
NORM_EPS = 1e-6


def rms_norm(x, weight, eps=NORM_EPS):
    """Zero-centred RMSNorm over the last dim: x / rms(x) * (1 + weight), in fp32, cast back to
    x's dtype."""
    import torch

    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (normed * (1.0 + weight.float())).to(x.dtype)


def rope(x, positions, rotary_dim=ROTARY_DIM, base=ROPE_BASE):
    """NeoX RoPE of the first rotary_dim dims of x [n, ..., dim] at positions [n] (the rest pass
    through), in fp32, cast back to x's dtype."""
    import torch

    half = rotary_dim // 2
    inv_freq = base ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angle = positions.float().unsqueeze(1) * inv_freq  # [n, half]
    angle = angle.view(angle.shape[0], *([1] * (x.dim() - 2)), half)
    cos, sin = angle.cos(), angle.sin()
    xf = x.float()
    first, second = xf[..., :half], xf[..., half:rotary_dim]
    turned = torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)
    return torch.cat([turned, xf[..., rotary_dim:]], dim=-1).to(x.dtype)


def index_query(q, positions, norm_weight):
    """The index query [T, heads, dim] from its projection: normed per head, roped."""
    return rope(rms_norm(q, norm_weight), positions)


def compress(raw, first_group, compress_ratio, norm_weight):
    """Index keys [G, dim] of the G = len(raw) / c groups first_group.. from their raw keys [G*c,
    dim]: the fp32 mean of each group's c raw keys, cast to raw's dtype, normed, roped at the
    group's first token."""
    import torch

    c = compress_ratio
    mean = raw.float().view(-1, c, raw.shape[-1]).mean(dim=1).to(raw.dtype)
    groups = first_group + torch.arange(mean.shape[0], device=raw.device)
    return rope(rms_norm(mean, norm_weight), groups * c)


class CompressedKeyWriter:
    """Writes one request's index cache [pages, P / c, dim] through its block table [pages] as
    its raw keys arrive, chunk by chunk: a group's key once all c of its tokens exist."""

    def __init__(self, k_index, block_table, compress_ratio, norm_weight):
        self.k_index, self.block_table = k_index, block_table
        self.c, self.norm_weight = compress_ratio, norm_weight
        self.pending = k_index.new_empty((0, k_index.shape[-1]))  # the incomplete group's raw keys
        self.next_position = 0

    def append(self, raw):
        """The raw index keys [n, dim] of the next n positions."""
        import torch

        first = self.next_position - self.pending.shape[0]
        keys = torch.cat([self.pending, raw])
        whole = keys.shape[0] // self.c * self.c
        self.pending = keys[whole:]
        self.next_position += raw.shape[0]
        if whole:
            self._write(first // self.c, compress(keys[:whole], first // self.c, self.c,
                                                  self.norm_weight))

    def _write(self, first_group, groups):
        import torch

        per_page = self.k_index.shape[1]
        g = first_group + torch.arange(groups.shape[0], device=groups.device)
        slot = self.block_table[g // per_page].long() * per_page + g % per_page
        self.k_index.view(-1, self.k_index.shape[-1])[slot] = groups
