"""The ctypes mirrors against the C layout: every ABI_SIZE / ABI_OFFSET / ABI_VALUE line of
tests/abi/abi_layout_golden.inc (the numbers the C conformance suite pins), both ways, so a field
added to one side and not the other fails here."""
import ctypes
import re
import shutil
import subprocess

import pytest

from conftest import REPO_ROOT
from sm70ops import _abi

GOLDEN = REPO_ROOT / "tests" / "abi" / "abi_layout_golden.inc"


def golden():
    """{struct: size}, {struct: {field: offset}}, {constant: value} from the golden file."""
    text = GOLDEN.read_text()
    sizes = {name: int(n) for name, n in re.findall(r"^ABI_SIZE\((\w+), (\d+)\)", text, re.M)}
    offsets = {}
    for name, field, n in re.findall(r"^ABI_OFFSET\((\w+), (\w+), (\d+)\)", text, re.M):
        offsets.setdefault(name, {})[field] = int(n)
    values = {name: int(n) for name, n in re.findall(r"^ABI_VALUE\((\w+), (-?\d+)\)", text, re.M)}
    return sizes, offsets, values


SIZES, OFFSETS, VALUES = golden()


def test_golden_file_parsed_completely():
    text = GOLDEN.read_text()
    assert len(SIZES) == text.count("\nABI_SIZE(") == 10
    assert sum(map(len, OFFSETS.values())) == text.count("\nABI_OFFSET(")
    assert len(VALUES) == text.count("\nABI_VALUE(")
    assert set(OFFSETS) == set(SIZES)


def test_every_golden_struct_is_mirrored_and_vice_versa():
    assert set(_abi.STRUCTS) == set(SIZES)


@pytest.mark.parametrize("name", sorted(SIZES))
def test_struct_size(name):
    assert ctypes.sizeof(_abi.STRUCTS[name]) == SIZES[name]


@pytest.mark.parametrize("name", sorted(SIZES))
def test_field_offsets(name):
    cls = _abi.STRUCTS[name]
    mirrored = {field: getattr(cls, field).offset for field, _ in cls._fields_}
    assert mirrored == OFFSETS[name]  # same fields, same order, same offsets


def _python_value(constant):
    """The mirror of one golden constant (SM70OPS_REASON_ARCH -> Reason.ARCH)."""
    name = constant.removeprefix("SM70OPS_")
    plain = {"ABI_MAJOR": _abi.ABI_MAJOR, "MESSAGE_BYTES": _abi.MESSAGE_BYTES,
             "STATUS_COUNT": _abi.STATUS_COUNT, "REASON_COUNT": _abi.REASON_COUNT,
             "QSA_INDEX_ARGS_SIZE_1_0": _abi.QSA_INDEX_ARGS_SIZE_1_0,
             "QSA_ATTN_ARGS_SIZE_1_0": _abi.QSA_ATTN_ARGS_SIZE_1_0,
             "QSA_ATTN_ARGS_SIZE_1_1": _abi.QSA_ATTN_ARGS_SIZE_1_1}
    if name in plain:
        return plain[name]
    for prefix, enum in (("ERR_", _abi.Status), ("OP_", _abi.Op), ("REASON_", _abi.Reason),
                         ("ROUTE_", _abi.Route), ("LOG_", _abi.LogLevel)):
        if name.startswith(prefix):
            member = name if enum is _abi.Status else name.removeprefix(prefix)
            return enum[member].value
    raise KeyError(constant)


@pytest.mark.parametrize("constant", sorted(VALUES))
def test_constant(constant):
    assert _python_value(constant) == VALUES[constant]


def test_versions_match_the_header():
    """The minor and release the mirrors were written for, which the golden file does not pin."""
    text = (REPO_ROOT / "abi" / "sm70ops.h").read_text()
    defined = dict(re.findall(r"^#define SM70OPS_(\w+) (\d+)$", text, re.M))
    assert int(defined["ABI_MINOR"]) == _abi.ABI_MINOR
    assert tuple(int(defined[f"VERSION_{p}"]) for p in ("MAJOR", "MINOR", "PATCH")) == _abi.VERSION


def test_enum_counts_match_the_header():
    assert len(_abi.Status) == _abi.STATUS_COUNT
    assert len(_abi.Reason) == _abi.REASON_COUNT


def test_table_slots_are_function_pointers():
    for field, kind in _abi.sm70ops_api._fields_[4:]:
        assert issubclass(kind, ctypes._CFuncPtr), field


# DLPack 0.6, which the golden file does not cover: fixed numbers, then the C compiler's.
DLPACK_LAYOUT = {
    "DLDevice": (8, {"device_type": 0, "device_id": 4}),
    "DLDataType": (4, {"code": 0, "bits": 1, "lanes": 2}),
    "DLTensor": (48, {"data": 0, "device": 8, "ndim": 16, "dtype": 20, "shape": 24,
                      "strides": 32, "byte_offset": 40}),
}


def _mirror_layout(name):
    cls = getattr(_abi, name)
    return ctypes.sizeof(cls), {field: getattr(cls, field).offset for field, _ in cls._fields_}


@pytest.mark.parametrize("name", sorted(DLPACK_LAYOUT))
def test_dlpack_layout(name):
    assert _mirror_layout(name) == DLPACK_LAYOUT[name]


def test_dlpack_layout_matches_the_c_compiler(tmp_path):
    compiler = shutil.which("cc")
    header = REPO_ROOT / "abi" / "sm70ops.h"
    if compiler is None:
        pytest.skip("no C compiler to print the DLPack layout")
    lines = [f'printf("{n} %zu\\n", sizeof({n}));' for n in DLPACK_LAYOUT]
    lines += [f'printf("{n}.{f} %zu\\n", offsetof({n}, {f}));'
              for n, (_, fields) in DLPACK_LAYOUT.items() for f in fields]
    source = tmp_path / "layout.c"
    source.write_text(f'#include <stddef.h>\n#include <stdio.h>\n#include "{header}"\n'
                      f"int main(void) {{ {' '.join(lines)} return 0; }}\n")
    built = subprocess.run([compiler, str(source), "-o", str(tmp_path / "layout")],
                           capture_output=True, text=True)
    if built.returncode != 0:
        pytest.skip(f"cannot compile against abi/sm70ops.h here: {built.stderr.strip()[:200]}")
    printed = subprocess.run([str(tmp_path / "layout")], capture_output=True, text=True,
                             check=True).stdout.split("\n")
    expected = []
    for name in DLPACK_LAYOUT:
        expected.append(f"{name} {_mirror_layout(name)[0]}")
    for name in DLPACK_LAYOUT:
        expected += [f"{name}.{f} {o}" for f, o in _mirror_layout(name)[1].items()]
    assert printed[:-1] == expected
