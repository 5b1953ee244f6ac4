"""models.txt, the shapes both front ends read: the shipped file parses to the model's numbers,
and each way of breaking the format is refused naming the file, the line and what is wrong. The
C tool's parser has the same cases (integration/cli/model_file_test.cc)."""
import pathlib

import pytest

from sm70ops import model

# A minimal valid file, which the C tool's test reads too.
GOOD = (pathlib.Path(__file__).parent / "tiny_models.txt").read_text()


def test_shipped_file_holds_the_model():
    models, plan = model.parse_models(model.MODELS_FILE.read_text(), model.MODELS_FILE)
    m = models["model"]
    assert (m.name, m.hidden, m.q_heads, m.kv_heads, m.head_dim) == (
        "Qwen3.8-Flash-Next", 2560, 24, 2, 256)
    assert (m.compress_ratio, m.index_topk, m.experts, m.expert_topk, m.expert_inter) == (
        4, 2048, 512, 10, 640)
    assert m.attention_gate is True and m.index_weighted is False
    assert models["v1"].index_weighted is True and models["v1"].compress_ratio == 1
    assert plan == {"tp_sizes": (1, 2, 4, 8), "page_sizes": (16, 64),
                    "prefill_lengths": (8192, 32768, 131072, 262144), "chunk_rows": 8192}
    assert (model.QWEN38_FLASH_NEXT, model.V1, model.TP_SIZES) == (m, models["v1"], (1, 2, 4, 8))


def test_minimal_file_parses():
    models, plan = model.parse_models(GOOD)
    assert list(models) == ["model"] and models["model"].name == "Tiny Model"
    assert plan["tp_sizes"] == (1, 2)


def _line_of(text, needle):
    """The number of the last line that is `needle`."""
    lines = text.split("\n")
    return len(lines) - lines[::-1].index(needle)


# (how the good text is broken, the message, the line it names, None for the whole file)
BROKEN = [
    (lambda t: t.replace("hidden = 256", "hidden = 256\nhidden = 512"),
     "key 'hidden' given twice in [shapes model]", "hidden = 512"),
    (lambda t: t.replace("hidden = 256", "hiden = 256"),
     "unknown key 'hiden' in [shapes model]", "hiden = 256"),
    (lambda t: t.replace("hidden = 256\n", ""),
     "[shapes model] lacks 'hidden'", "[shapes model]"),
    (lambda t: t.replace("hidden = 256", "hidden = 2.5k"),
     "'2.5k' is not a decimal integer below 2^31", "hidden = 2.5k"),
    (lambda t: t.replace("hidden = 256", "hidden = -256"),
     "'-256' is not a decimal integer below 2^31", "hidden = -256"),
    (lambda t: t.replace("hidden = 256", "hidden = 2147483648"),
     "'2147483648' is not a decimal integer below 2^31", "hidden = 2147483648"),
    (lambda t: t.replace("attention_gate = 1", "attention_gate = 2"),
     "'2' is not 0 or 1", "attention_gate = 2"),
    (lambda t: t.replace("tp_sizes = 1 2", "tp_sizes = 1 0"),
     "'1 0' is not a list of positive integers", "tp_sizes = 1 0"),
    (lambda t: t.replace("page_sizes = 64", "page_sizes ="),
     "'' is not a list of positive integers", "page_sizes ="),
    (lambda t: t.replace("name = Tiny Model", "name ="), "empty name", "name ="),
    (lambda t: t.replace("chunk_rows = 8192", "chunk_rows 8192"),
     "'chunk_rows 8192' is not key = value", "chunk_rows 8192"),
    (lambda t: t.replace("[plan]", "[plans]"),
     "'[plans]' is not a section header ([plan] or [shapes ID])", "[plans]"),
    (lambda t: t + "[plan]\n", "section [plan] given twice", "[plan]"),
    (lambda t: "x = 1\n" + t, "key = value before any section", "x = 1"),
    (lambda t: t.replace("[shapes model]", "[shapes other]"), "no [shapes model] section", None),
    (lambda t: t.replace("hidden = 256", "hidden = 2\0" + "56"), "line holds a NUL byte",
     "hidden = 2\0" + "56"),
    # Values check cannot plan with.
    (lambda t: t.replace("hidden = 256", "hidden = 0"),
     "[shapes model] hidden must be positive", "[shapes model]"),
    (lambda t: t.replace("compress_ratio = 4", "compress_ratio = 0"),
     "[shapes model] compress_ratio must be positive", "[shapes model]"),
    (lambda t: t.replace("chunk_rows = 8192", "chunk_rows = 0"),
     "[plan] chunk_rows must be positive", "[plan]"),
    (lambda t: t.replace("compress_ratio = 4", "compress_ratio = 3"),
     "[shapes model] compress_ratio 3 does not divide page size 64", "[shapes model]"),
    (lambda t: t.replace("index_topk = 512", "index_topk = 510"),
     "[shapes model] compress_ratio 4 does not divide index_topk 510", "[shapes model]"),
    (lambda t: t.replace("prefill_lengths = 8192", "prefill_lengths = 8192 16384"),
     "[plan] prefill length 16384 exceeds [shapes model] max_context 8192", "[plan]"),
    # The C tool's capacities (integration/cli/model_file.h).
    (lambda t: t.replace("tp_sizes = 1 2", "tp_sizes = 1 2 3 4 5 6 7 8 9"), "more than 8 values",
     "tp_sizes = 1 2 3 4 5 6 7 8 9"),
    (lambda t: t + "[shapes a]\n[shapes b]\n[shapes c]\n[shapes d]\n",
     "more than 4 [shapes] sections", "[shapes d]"),
    (lambda t: t + "[shapes abcdefghijklmnop]\n",
     "id 'abcdefghijklmnop' longer than 15 characters", "[shapes abcdefghijklmnop]"),
    (lambda t: t.replace("name = Tiny Model", "name = " + "x" * 48),
     "name longer than 47 characters", "name = " + "x" * 48),
    (lambda t: "# " + "x" * 254 + "\n" + t, "line longer than 255 characters", "# " + "x" * 254),
]


@pytest.mark.parametrize("breaking, message, line", BROKEN, ids=[b[1] for b in BROKEN])
def test_broken_file_is_refused_saying_where(breaking, message, line):
    text = breaking(GOOD)
    with pytest.raises(model.ModelsFileError) as raised:
        model.parse_models(text, "models.txt")
    where = f"models.txt:{_line_of(text, line)}" if line else "models.txt"
    assert str(raised.value) == f"{where}: {message}"
