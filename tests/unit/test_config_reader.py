"""Reading config files: relaxed JSON (comments, trailing commas), error positions, bad sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelink.config import check_document, read_config
from pipelink.config.reader import loads_relaxed
from pipelink.errors import ConfigError, ErrorCode, InvalidArgumentError

SEED_34 = """{
  "pipeline": [
    {
      "name": "deform_conv2d_v2",
      "library": "libdeform.so",
      "inputs": ["input_tensor", "offset_tensor", "weight_tensor"],
      "outputs": ["conv_output"],
      "constraints": {
        "stream_affinity": "same_as_previous",
        "memory_alignment": 256,
        "precision_policy": "fp16_if_supported_else_fp32"
      }
    },
    {
      "name": "silu_activation",
      "library": "libactivation.so",
      "inputs": ["conv_output"],
      "outputs": ["final_output"],
      "constraints": {
        "stream_affinity": "async_preload", // 异步预取下一阶段数据
        "memory_alignment": 64
      }
    }
  ]
}
"""


def write(tmp_path: Path, text: str, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_seed_config_with_line_comment_reads_unmodified(tmp_path):
    doc, base_dir, source = read_config(write(tmp_path, SEED_34))
    assert doc["pipeline"][1]["constraints"] == {"stream_affinity": "async_preload", "memory_alignment": 64}
    assert base_dir == tmp_path.resolve()
    assert source == (tmp_path / "config.json").resolve()
    assert check_document(doc, check_operators=False) == []


def test_malformed_json_reports_file_line_and_column(tmp_path):
    path = write(tmp_path, '{"pipeline": [\n  {"name": "a" "inputs": []}\n]}')
    with pytest.raises(ConfigError) as info:
        read_config(path)
    err = info.value
    assert err.code is ErrorCode.PIPELINK_ERR_INVALID_CONFIG
    assert str(path) in err.message and "line 2, column 16" in err.message
    assert "Expecting ',' delimiter" in err.message
    assert len(err.errors) == 1 and err.errors[0].path == ""
    assert err.line == 2 and err.column == 16


def test_error_position_is_unchanged_by_comments_before_it(tmp_path):
    # Comments are blanked, not removed, so the parser's line/column still point into the original text.
    text = '/* header\n   two lines */ {"pipeline": // trailing\n  [1 2]}'
    with pytest.raises(ConfigError) as info:
        read_config(write(tmp_path, text))
    assert "line 3, column 6" in info.value.message


def test_comments_and_trailing_commas_are_accepted(tmp_path):
    text = """
    // leading comment
    {
      /* block
         comment */ "name": "p", // after a value
      "pipeline": [
        {"name": "relu", "inputs": ["x",], "outputs": ["y" /* inline */ ,],},
      ],
    }
    """
    doc, _, _ = read_config(write(tmp_path, text))
    assert doc == {"name": "p", "pipeline": [{"name": "relu", "inputs": ["x"], "outputs": ["y"]}]}


def test_comment_markers_inside_strings_are_kept(tmp_path):
    text = r"""{"a": "http://example.com//x", "b": "C:\\dir//lib.so", "c": "/* not a comment */",
               "d": "quote \" // still a string", "e": "ends with backslash \\" // real comment
               }"""
    doc, _, _ = read_config(write(tmp_path, text))
    assert doc == {
        "a": "http://example.com//x",
        "b": "C:\\dir//lib.so",
        "c": "/* not a comment */",
        "d": 'quote " // still a string',
        "e": "ends with backslash \\",
    }


@pytest.mark.parametrize("text", ['{"a": [,]}', '{"a": [1,,]}', "{,}", '{"a": 1,,}'])
def test_only_a_comma_after_a_value_may_trail(text, tmp_path):
    with pytest.raises(ConfigError, match="invalid JSON"):
        read_config(write(tmp_path, text))


def test_unterminated_block_comment_is_reported_with_its_position(tmp_path):
    with pytest.raises(ConfigError) as info:
        read_config(write(tmp_path, '{"a": 1,\n /* never closed\n}'))
    assert "line 2, column 2" in info.value.message and "unterminated /* comment" in info.value.message


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="config file not found: .*nope.json") as info:
        read_config(tmp_path / "nope.json")
    assert info.value.errors[0].path == ""


def test_json_text_passed_as_path_gets_a_hint():
    with pytest.raises(ConfigError, match="json.loads"):
        read_config('{"pipeline": []}')


def test_directory_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="is a directory"):
        read_config(tmp_path)


def test_non_utf8_file_is_a_config_error(tmp_path):
    path = tmp_path / "latin1.json"
    path.write_bytes('{"name": "caf\xe9"}'.encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8"):
        read_config(path)


def test_utf8_bom_is_accepted(tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"pipeline": []}')
    assert read_config(path)[0] == {"pipeline": []}


@pytest.mark.parametrize(
    ("text", "kind"), [("[1, 2]", "array"), ('"x"', "string"), ("3", "number"), ("null", "null")]
)
def test_top_level_must_be_an_object(text, kind, tmp_path):
    with pytest.raises(ConfigError, match=f"top level of a config must be an object.*got a JSON {kind}"):
        read_config(write(tmp_path, text))


def test_nan_is_rejected(tmp_path):
    with pytest.raises(ConfigError, match="NaN is not valid JSON"):
        read_config(write(tmp_path, '{"a": NaN}'))


def test_dict_source_is_copied_and_based_in_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    original = {"pipeline": [{"name": "relu", "inputs": ["x"], "outputs": ["y"]}]}
    doc, base_dir, source = read_config(original)
    doc["pipeline"][0]["name"] = "changed"
    assert original["pipeline"][0]["name"] == "relu"
    assert base_dir == tmp_path and source is None


def test_other_source_types_are_an_argument_error():
    with pytest.raises(InvalidArgumentError, match="got int"):
        read_config(42)  # type: ignore[arg-type]


# --- property: any JSON value, written with comments and trailing commas, reads back equal -------------

_tricky_text = st.lists(st.sampled_from(list('ab/*"\\,]} \n') + ["//", "/*", "*/", "é"]), max_size=8).map(
    "".join
)
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _tricky_text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_tricky_text, children, max_size=4),
    max_leaves=20,
)


def _relaxed_dump(value, draw_flags) -> str:
    """JSON with a comment after every item and a trailing comma after the last one (when flagged)."""
    if isinstance(value, list):
        items = [_relaxed_dump(v, draw_flags) for v in value]
    elif isinstance(value, dict):
        items = [json.dumps(k) + " /* k */ : " + _relaxed_dump(v, draw_flags) for k, v in value.items()]
    else:
        return json.dumps(value)
    body = "".join(
        f"{item}, // c\n" if i < len(items) - 1 or next(draw_flags) else f"{item} // c\n"
        for i, item in enumerate(items)
    )
    return ("[" if isinstance(value, list) else "{") + body + ("]" if isinstance(value, list) else "}")


@settings(max_examples=200)
@given(value=_json, flags=st.lists(st.booleans(), min_size=64, max_size=64))
def test_relaxed_json_round_trips(value, flags):
    text = "/* head */ " + _relaxed_dump(value, iter(flags * 8)) + " // tail"
    assert loads_relaxed(text) == value
