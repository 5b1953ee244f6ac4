"""Index keys and queries for the QSA indexer's GPU tests and benches (issue 21; ops.md: "speed
may not depend on the values in the tensors"), one generator per kind of data:

    iid          keys and queries i.i.d. normal
    pages-S      each KV page's keys share one component of weight S (0.4, 0.7, 0.95)
    runs         runs of 8 alike keys (a shared component of weight 0.9), runs not page-aligned
    rising       scores rise with position: the best groups are the last ones a row sees
    falling      scores fall with position: the best are the first
    equal        every key the same: every score of a row equal, the selection all ties
    hot          one region of exactly B/c groups holds the whole top-K
    compressed   keys as the host writes them: correlated raw keys (neighbouring tokens alike),
                 the mean of c, normed, RoPE at the group's first token; queries normed, roped
    drift        page-clustered keys, queries drifting row to row (an AR(1) walk), so that
                 neighbouring rows select most of the same pages (the bench prints how many)

Each builds one request: the keys of a `seq_len`-token context in the index cache at P-token
pages (one key per group of c tokens, pages scattered through the block table) and the index
queries of its last `rows` rows.

The attention's benches take op 1's token sets (SELECTIONS) from one of two generators of the
consecutive rows of a prompt, both with about 70% of a row's pages shared with its neighbour's at
128K, whose tiles of rows differ in how fast their union grows:

    runs     a row takes the B/16 best runs of 16 tokens, run j scoring base[j] + z_t[j] with z_t a
             unit-variance moving average of N(0, 1) noise over the last 32 rows: scores drift
             slowly, and a row's set comes back to the runs its neighbours took (16 rows' union:
             about 2.5 sets)
    growing  a row keeps each of its neighbour's groups with probability 0.8 and draws the rest
             afresh: what it drops never comes back, and a tile's union grows by a fifth of a set
             a row (16 rows' union: about 4 sets)

The parameters are this module's own choice. Importing it needs no torch; the functions import it.
"""
import dataclasses
import math

from . import indexer

PAGE_STRENGTHS = (0.4, 0.7, 0.95)
RUN_KEYS, RUN_WEIGHT = 8, 0.9
TREND = 1.0  # rising/falling: the trend's weight against the keys' noise, in units of |q|^2
HOT_WEIGHT = 1.5  # hot: the hot keys' alignment with the queries, the same units
RAW_SPAN, RAW_NOISE = 16, 0.3  # compressed: raw keys move between anchors 16 tokens apart
DRIFT_STRENGTH, DRIFT_STEP = 0.7, 0.25  # drift: page clustering; each row's step away
RUN, RUN_WINDOW, RUN_BASE_WEIGHT = 16, 32, 1.0  # runs: tokens a run, rows averaged, base's weight
GROW_KEEP = 0.8  # growing: the chance a row keeps each of its neighbour's groups


@dataclasses.dataclass
class IndexProblem:
    """One request's index inputs: `q` are the rows ending the context (the last rows)."""

    name: str
    q: object  # [rows, heads, dim] fp16, norm and RoPE applied
    weights: object  # [rows, heads] fp32, or None (weight-free)
    k_index: object  # [pages, P / c, dim] fp16
    block_table: object  # [1, pages] int32
    seq_len: int
    compress_ratio: int

    @property
    def page_size(self):
        return self.k_index.shape[1] * self.compress_ratio

    def chunk(self, end, rows):
        """The op's inputs (as generic.qsa_index takes them) for `rows` rows ending at position
        end - 1, a prefix of the context: a chunk of a prefill."""
        import torch

        first = end - rows - (self.seq_len - self.q.shape[0])  # into q's rows
        pages = -(-end // self.page_size)
        device = self.q.device
        return dict(q=self.q[first:first + rows],
                    weights=None if self.weights is None else self.weights[first:first + rows],
                    k_index=self.k_index,
                    query_start_loc=torch.tensor([0, rows], dtype=torch.int32, device=device),
                    seq_lens=torch.tensor([end], dtype=torch.int32, device=device),
                    block_table=self.block_table[:, :pages])

    def last_rows(self):
        return self.chunk(self.seq_len, self.q.shape[0])


@dataclasses.dataclass
class _Shape:
    """What a generator fills: keys for `slots` groups (logical order), queries for the rows at
    `positions`; `groups` the context's complete groups, `budget_groups` B/c."""

    torch: object
    gen: object
    slots: int
    groups: int
    budget_groups: int
    positions: object  # [rows] int64
    heads: int
    dim: int
    compress_ratio: int
    page_size: int

    def normal(self, *shape):
        return self.torch.randn(shape, generator=self.gen, device=self.gen.device)

    def direction(self):
        """A unit vector of norm sqrt(dim), which queries lean on."""
        d = self.normal(self.dim)
        return d * (math.sqrt(self.dim) / d.norm())

    def queries_near(self, d, noise=0.3):
        rows = self.positions.shape[0]
        return d + noise * self.normal(rows, self.heads, self.dim)


def _mix(a, b, weight):
    """a and b (unit variance each) mixed with `weight` on b, unit variance again."""
    return math.sqrt(1 - weight * weight) * a + weight * b


def _iid(s):
    return s.normal(s.slots, s.dim), s.normal(s.positions.shape[0], s.heads, s.dim)


def _pages(strength):
    def generate(s):
        per_page = s.page_size // s.compress_ratio
        shared = s.normal(s.slots // per_page, s.dim).repeat_interleave(per_page, dim=0)
        return (_mix(s.normal(s.slots, s.dim), shared, strength),
                s.normal(s.positions.shape[0], s.heads, s.dim))

    return generate


def _runs(s):
    shared = s.normal(-(-s.slots // RUN_KEYS) + 1, s.dim).repeat_interleave(RUN_KEYS, dim=0)
    offset = RUN_KEYS // 3  # runs that start inside pages
    keys = _mix(s.normal(s.slots, s.dim), shared[offset:offset + s.slots], RUN_WEIGHT)
    return keys, s.normal(s.positions.shape[0], s.heads, s.dim)


def _trend(rising):
    def generate(s):
        d = s.direction()
        g = s.torch.arange(s.slots, device=s.gen.device) / max(1, s.groups)
        ramp = g if rising else 1 - g
        keys = s.normal(s.slots, s.dim) + TREND * ramp.unsqueeze(1) * d
        return keys, s.queries_near(d)

    return generate


def _equal(s):
    key = s.normal(1, s.dim)
    return key.expand(s.slots, s.dim).clone(), s.normal(s.positions.shape[0], s.heads, s.dim)


def _hot(s):
    d = s.direction()
    keys = s.normal(s.slots, s.dim) * 0.5
    start = max(0, min(s.groups // 3, s.groups - s.budget_groups))
    keys[start:start + s.budget_groups] += HOT_WEIGHT * d
    return keys, s.queries_near(d)


def _compressed(s):
    """Raw keys per token drift between anchors RAW_SPAN tokens apart (neighbours alike); the
    host's writer makes the index keys of them."""
    torch, c = s.torch, s.compress_ratio
    tokens = s.slots * c
    anchors = s.normal(tokens // RAW_SPAN + 2, s.dim)
    t = torch.arange(tokens, device=s.gen.device, dtype=torch.float32) / RAW_SPAN
    lo, frac = t.long(), (t - t.floor()).unsqueeze(1)
    raw = (1 - frac) * anchors[lo] + frac * anchors[lo + 1] + RAW_NOISE * s.normal(tokens, s.dim)
    no_norm_weight = torch.zeros(s.dim, device=s.gen.device)
    keys = indexer.compress(raw.half(), 0, c, no_norm_weight).float()
    q = indexer.index_query(s.normal(s.positions.shape[0], s.heads, s.dim).half(), s.positions,
                            no_norm_weight).float()
    return keys, q


def _drift(s, block=64):
    """Queries on an AR(1) walk from a random start, q[r] = keep * q[r-1] + DRIFT_STEP *
    noise[r], a block of rows at a time: q[i] = keep^(i+1) q[before] + sum_j keep^(i-j) step[j]."""
    torch = s.torch
    keys, _ = _pages(DRIFT_STRENGTH)(s)
    rows = s.positions.shape[0]
    steps = s.normal(rows, s.heads * s.dim)
    keep = math.sqrt(1 - DRIFT_STEP * DRIFT_STEP)
    i = torch.arange(block, device=steps.device, dtype=torch.float32)
    decay = torch.tril(keep ** (i[:, None] - i[None, :]).clamp(min=0))  # [block, block]
    q = torch.empty_like(steps)
    previous = s.normal(s.heads * s.dim)
    for start in range(0, rows, block):
        n = min(block, rows - start)
        q[start:start + n] = (keep ** (i[:n, None] + 1) * previous
                              + decay[:n, :n] @ (DRIFT_STEP * steps[start:start + n]))
        previous = q[start + n - 1]
    return keys, q.view(rows, s.heads, s.dim)


GENERATORS = {"iid": _iid, **{f"pages-{s}": _pages(s) for s in PAGE_STRENGTHS}, "runs": _runs,
              "rising": _trend(True), "falling": _trend(False), "equal": _equal, "hot": _hot,
              "compressed": _compressed, "drift": _drift}


def generate(name, torch, *, seq_len, rows, compress_ratio, page_size, budget, weighted=False,
             heads=4, dim=128, seed=0, device="cuda"):
    """An IndexProblem from generator `name` (GENERATORS): a `seq_len`-token context and its last
    `rows` rows, one key per group of compress_ratio tokens on page_size-token pages; budget B
    tokens (the hot region's size); per-head weights when `weighted`."""
    gen = torch.Generator(device=device).manual_seed(seed)
    per_page = page_size // compress_ratio
    pages = -(-seq_len // page_size)
    positions = torch.arange(seq_len - rows, seq_len, device=device)
    s = _Shape(torch, gen, pages * per_page, seq_len // compress_ratio, budget // compress_ratio,
               positions, heads, dim, compress_ratio, page_size)
    keys, q = GENERATORS[name](s)
    table = torch.randperm(pages, generator=gen, device=device).int()
    k_index = torch.empty((pages, per_page, dim), dtype=torch.float16, device=device)
    k_index[table.long()] = keys.view(pages, per_page, dim).half()
    weights = None
    if weighted:
        weights = torch.rand((rows, heads), generator=gen, device=device) * 2 - 1
    return IndexProblem(name, q.half(), weights, k_index, table.view(1, -1), seq_len,
                        compress_ratio)


def neighbour_overlap(sel_blocks, sel_count):
    """Mean Jaccard overlap of adjacent rows' page sets (op 1's expansion)."""
    import torch

    pages = int(sel_blocks.max()) + 2
    rows = sel_blocks.shape[0]
    member = torch.zeros((rows, pages), dtype=torch.bool, device=sel_blocks.device)
    counted = torch.arange(sel_blocks.shape[1], device=sel_blocks.device) < sel_count[:, None]
    member.scatter_(1, torch.where(counted, sel_blocks.long(), pages - 1), True)
    member[:, pages - 1] = False
    both = (member[1:] & member[:-1]).sum(dim=1).float()
    either = (member[1:] | member[:-1]).sum(dim=1).clamp(min=1).float()
    return float((both / either).mean()) if rows > 1 else 1.0


class _Selections:
    """Token sets of the consecutive rows of one prompt, chunk after chunk: tokens(lengths)."""

    def __init__(self, torch, prompt, budget, compress_ratio, seed):
        self.torch, self.budget, self.ratio, self.prompt = torch, budget, compress_ratio, prompt
        self.gen = torch.Generator(device="cuda").manual_seed(seed)

    def tokens(self, lengths):
        """Token sets [n, B + c - 1] (int64, ascending, -1 padded) of rows seeing `lengths`
        tokens: every token when the row has at most B/c complete groups."""
        torch, c = self.torch, self.ratio
        width = self.budget + c - 1
        chosen = self._groups(lengths).unsqueeze(2) * c + torch.arange(c, device="cuda")
        tail = (lengths // c * c).unsqueeze(1) + torch.arange(c - 1, device="cuda")
        chosen = torch.cat([chosen.flatten(1), torch.where(tail < lengths.unsqueeze(1), tail, -1)],
                           dim=1)
        every = torch.arange(width, device="cuda").expand(lengths.shape[0], width)
        every = torch.where(every < lengths.unsqueeze(1), every, -1)
        return torch.where((lengths // c <= self.budget // c).unsqueeze(1), every, chosen)


class RunSelections(_Selections):
    """The module docstring's runs."""

    def __init__(self, torch, prompt, budget, compress_ratio, seed):
        super().__init__(torch, prompt, budget, compress_ratio, seed)
        self.runs = prompt // RUN
        normal = dict(generator=self.gen, device="cuda", dtype=torch.float64)  # exact sums
        self.base = RUN_BASE_WEIGHT * torch.randn(self.runs, **normal)
        self.recent = torch.randn((RUN_WINDOW - 1, self.runs), **normal)

    def _groups(self, lengths):
        """The groups of the B/16 best complete runs of each row [n, B/c], ascending."""
        torch = self.torch
        fresh = torch.randn((lengths.shape[0], self.runs), generator=self.gen, device="cuda",
                            dtype=torch.float64)
        draws = torch.cat([self.recent, fresh])
        self.recent = draws[1 - RUN_WINDOW:]
        sums = torch.cat([draws.new_zeros(1, self.runs), draws.cumsum(0)])
        scores = self.base + (sums[RUN_WINDOW:] - sums[:-RUN_WINDOW]) / math.sqrt(RUN_WINDOW)
        run = torch.arange(self.runs, device="cuda")
        scores.masked_fill_(run >= (lengths // RUN).unsqueeze(1), float("-inf"))
        runs = scores.topk(self.budget // RUN, dim=1).indices.sort(dim=1).values
        per_run = RUN // self.ratio
        return (runs.unsqueeze(2) * per_run + torch.arange(per_run, device="cuda")).flatten(1)


class GrowingSelections(_Selections):
    """The module docstring's growing sets: row by row, on the device."""

    def __init__(self, torch, prompt, budget, compress_ratio, seed):
        super().__init__(torch, prompt, budget, compress_ratio, seed)
        self.kept = torch.zeros(prompt // compress_ratio, dtype=torch.bool, device="cuda")

    def _groups(self, lengths):
        torch, want = self.torch, self.budget // self.ratio
        out = torch.empty((lengths.shape[0], want), dtype=torch.int64, device="cuda")
        for i, length in enumerate(lengths.tolist()):
            complete = length // self.ratio
            if complete <= want:  # tokens() takes every token of such a row
                self.kept[:complete] = True
                out[i] = torch.arange(want, device="cuda")
                continue
            groups = self.kept[:complete]
            keep = torch.rand(complete, generator=self.gen, device="cuda") < GROW_KEEP
            self.kept[:complete] = groups & keep
            self.kept[complete:] = False
            # The rest afresh, uniform among the groups not kept (a random key each, the lowest
            # taken), so that the row holds exactly B/c (its neighbour held at most that many).
            draw = torch.rand(complete, generator=self.gen, device="cuda")
            draw.masked_fill_(self.kept[:complete], 2.0)
            need = want - int(self.kept[:complete].sum())
            self.kept[draw.topk(need, largest=False).indices] = True
            out[i] = torch.where(self.kept[:complete])[0]
        return out


SELECTIONS = {"runs": RunSelections, "growing": GrowingSelections}
