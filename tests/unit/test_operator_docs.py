"""docs/operators.md is generated from the descriptors: it must match them, and name every operator with
its attributes, dtypes, devices and ONNX correspondence."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelink.descriptor import REQUIRED, Attr, OperatorDescriptor, Port
from pipelink.ops import BUILTIN_OPERATORS
from pipelink.ops.docs import builtin_registry, main, render_operators

DOC = Path(__file__).resolve().parents[2] / "docs" / "operators.md"


def test_committed_page_is_what_the_descriptors_give():
    # Fails when an operator, attribute, default or dtype changed without regenerating the page.
    assert main(["--check", str(DOC)]) == 0, "run: python -m pipelink.ops.docs --output docs/operators.md"


def test_check_reports_a_stale_page(tmp_path, capsys):
    stale = tmp_path / "operators.md"
    stale.write_text(DOC.read_text().replace("ONNX: `Reshape`", "ONNX: none"))
    assert main(["--check", str(stale)]) == 1
    assert "is stale" in capsys.readouterr().err
    assert main(["--check", str(tmp_path / "missing.md")]) == 1


def test_output_writes_the_page(tmp_path):
    out = tmp_path / "ops.md"
    assert main(["--output", str(out)]) == 0
    assert out.read_text() == DOC.read_text()


def test_every_builtin_operator_has_a_section_with_its_facts():
    text = DOC.read_text()
    registry = builtin_registry()
    for name in BUILTIN_OPERATORS:
        desc = registry.get(name, source="builtin")
        section = text.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
        assert "devices: " + ", ".join(desc.devices) in section
        assert (f"ONNX: `{desc.onnx}`" if desc.onnx else "ONNX: none") in section
        for attr in desc.attrs:
            assert f"| `{attr.name}` | {attr.type} |" in section, (name, attr.name)
        for var, allowed in desc.dtype_vars.items():
            assert f"`{var}`: " + ", ".join(f"`{d}`" for d in sorted(allowed)) in section


def test_render_shows_defaults_choices_and_optional_ports():
    desc = OperatorDescriptor(
        name="demo",
        version="2.1.0",
        doc="A demo | with a pipe.",
        onnx="Demo",
        inputs=(Port("x", shape=["N", "C"], dtype="T"), Port("b", shape=["C"], dtype="T", optional=True)),
        outputs=(Port("y", shape="x", dtype="T"),),
        attrs=(
            Attr("mode", "str", "fast", choices=("fast", "exact")),
            Attr("k", "int", REQUIRED),
            Attr("axes", "ints", (0, 1)),
        ),
        dtype_vars={"T": frozenset({"float32", "float16"})},
    )
    page = render_operators([desc])
    assert "| [demo](#demo) | Demo | - | A demo \\| with a pipe. |" in page  # no variants: no device
    assert "| `mode` | str | `fast` | (one of `fast`, `exact`) |" in page
    assert "| `k` | int | required |" in page and "| `axes` | ints | `[0, 1]` |" in page
    assert "| `b` | `[C]` | `T` | optional |" in page and "| `y` | as `x` | `T` |" in page
    assert "`T`: `float16`, `float32`." in page


@pytest.mark.parametrize("argv", [["--output", "a", "--check", "b"], ["--bogus"]])
def test_bad_usage_exits_2(argv):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
