"""The host's side of the model's indexer (sm70ops.indexer) on CPU: the zero-centred norm,
partial NeoX RoPE, and the compressed-key writer against its definition. Skipped without torch."""
import math

import pytest

from sm70ops import indexer


def test_rms_norm_is_zero_centred(torch):
    x = torch.tensor([[3.0, -4.0]])
    got = indexer.rms_norm(x, torch.tensor([0.0, 1.0]))
    rms = math.sqrt((9 + 16) / 2 + indexer.NORM_EPS)
    assert got[0].tolist() == pytest.approx([3.0 / rms, -8.0 / rms], rel=1e-6)


def test_rope_turns_the_first_64_dims_only_and_keeps_their_norm(torch):
    x = torch.randn((3, 4, 128), generator=torch.Generator().manual_seed(1))
    y = indexer.rope(x, torch.tensor([0, 5, 70000]))
    assert torch.equal(y[0], x[0])  # position 0 turns nothing
    assert torch.equal(y[..., 64:], x[..., 64:])
    assert torch.allclose(y[..., :64].norm(dim=-1), x[..., :64].norm(dim=-1), rtol=1e-5)
    half = torch.stack([x[1, :, 0], x[1, :, 32]])  # dims 0 and 32 turn as one pair, at base^0
    angle = torch.tensor(5.0)
    turned = torch.stack([half[0] * angle.cos() - half[1] * angle.sin(),
                          half[1] * angle.cos() + half[0] * angle.sin()])
    assert torch.allclose(torch.stack([y[1, :, 0], y[1, :, 32]]), turned, atol=1e-5)


def test_the_writer_is_the_groups_means_normed_and_roped(torch):
    g = torch.Generator().manual_seed(2)
    pages, per_page, c = 5, 4, 4  # 16-token pages
    table = torch.randperm(pages, generator=g).int()
    raw = torch.randn((70, 128), generator=g).half()
    w = torch.randn(128, generator=g) * 0.1
    one_pass = torch.zeros((pages, per_page, 128), dtype=torch.float16)
    indexer.CompressedKeyWriter(one_pass, table, c, w).append(raw)
    chunked = torch.zeros_like(one_pass)
    writer = indexer.CompressedKeyWriter(chunked, table, c, w)
    for a, b in ((0, 3), (3, 10), (10, 11), (11, 70)):  # chunks that cut groups
        writer.append(raw[a:b])
    assert torch.equal(one_pass, chunked) and writer.pending.shape == (2, 128)  # 70 = 4*17 + 2
    group = 13
    mean = raw[4 * group:4 * group + 4].float().mean(dim=0).half().unsqueeze(0)
    want = indexer.rope(indexer.rms_norm(mean, w), torch.tensor([4 * group]))[0]
    assert torch.equal(one_pass[table[group // per_page], group % per_page], want)
    assert not one_pass[table[17 // per_page], 17 % per_page].any()  # group 17 is incomplete
