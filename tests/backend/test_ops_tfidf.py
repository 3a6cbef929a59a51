"""tfidf_vectorizer (ONNX TfIdfVectorizer on integer tokens) against ONNX's reference evaluator on random
pools and inputs (every mode, with and without weights, 1- to 3-grams, skips, pools with repeated n-grams,
columns permuted and shared, int32 and int64 tokens, [C] and [N, C]), on every device (a host computation:
on CUDA its reference runs on staged copies); every refusal of its attributes and shapes; the import.
"""

from __future__ import annotations

import numpy as np
import pytest

import pipelink as pl
from pipelink.descriptor import infer_outputs
from pipelink.errors import InvalidArgumentError, ShapeMismatchError
from pipelink.ops.indexing.tfidf import MAX_POOL

from .ops_helpers import make_registry, run_op


@pytest.fixture(scope="module")
def reg():
    return make_registry()


def _pool(rng, counts: tuple[int, ...], vocab: int, repeat: bool):
    """A pool of ``counts[i]`` (i + 1)-grams over tokens ``0 .. vocab - 1`` (some n-grams twice when
    ``repeat``), its ngram_counts, and columns for them: shared and permuted, so a column is no n-gram's
    position."""
    pool, starts = [], []
    for level, count in enumerate(counts):
        starts.append(len(pool))
        grams = rng.integers(0, vocab, (count, level + 1))
        if repeat and count > 1:
            grams[-1] = grams[0]  # the last occurrence's column counts (onnx's reference, onnxruntime)
        pool.extend(int(v) for v in grams.reshape(-1))
    total = sum(counts)
    indexes = rng.permutation(total)
    indexes[rng.random(total) < 0.3] = rng.integers(0, max(1, total - 1))  # some columns shared
    return pool, starts, [int(v) for v in indexes]


CASES = [
    # (mode, min, max, skip, levels, vocab, with weights, repeated n-grams, x's shape, dtype)
    ("TF", 1, 1, 0, (5,), 6, False, False, (13,), "int64"),
    ("TF", 2, 2, 0, (3, 6), 4, False, True, (2, 11), "int32"),
    ("TF", 1, 2, 3, (4, 7), 4, False, True, (3, 12), "int64"),
    ("TF", 2, 3, 2, (2, 5, 6), 3, False, False, (2, 15), "int32"),
    ("IDF", 1, 3, 1, (4, 6, 3), 3, True, True, (4, 10), "int64"),
    ("IDF", 1, 2, 2, (3, 5), 4, False, False, (9,), "int32"),
    ("TFIDF", 1, 2, 4, (5, 6), 4, True, True, (3, 14), "int32"),
    ("TFIDF", 2, 3, 0, (0, 4, 5), 3, True, False, (2, 9), "int64"),  # no 1-grams in the pool
    ("TFIDF", 1, 1, 2, (6, 3), 5, False, False, (5, 8), "int64"),  # the 2-grams are not counted
    ("TF", 3, 3, 5, (2, 2, 4), 2, False, True, (2, 6), "int32"),  # skips longer than the row allows
]


@pytest.mark.parametrize(
    ("mode", "lo", "hi", "skip", "levels", "vocab", "weighted", "repeat", "shape", "dtype"), CASES
)
def test_tfidf_vectorizer_matches_onnx(
    reg, device, mode, lo, hi, skip, levels, vocab, weighted, repeat, shape, dtype
):
    """Counts per column (each n-gram at every skip, 1-grams once, a repeated n-gram in its last
    column) and their weighting: a wrong skip rule, level boundary or column gives other numbers."""
    pytest.importorskip("onnx")
    from .onnx_oracle import run_onnx

    rng = np.random.default_rng(70 + len(levels) * 7 + skip)
    pool, starts, indexes = _pool(rng, levels, vocab, repeat)
    attrs = {
        "mode": mode,
        "min_gram_length": lo,
        "max_gram_length": hi,
        "max_skip_count": skip,
        "ngram_counts": starts,
        "ngram_indexes": indexes,
        "pool_int64s": pool,
    }
    if weighted:
        attrs["weights"] = [float(np.float32(w)) for w in rng.uniform(0.1, 3.0, len(indexes))]
    x = rng.integers(0, vocab, shape).astype(dtype)
    if weighted or mode == "TF":
        (ref,) = run_onnx("TfIdfVectorizer", [x], attrs, opset=9)
    else:  # onnx's reference fails without weights (None has no len): the spec's 1 per hit, from TF
        (counts,) = run_onnx("TfIdfVectorizer", [x], {**attrs, "mode": "TF"}, opset=9)
        ref = (counts > 0).astype(np.float32) if mode == "IDF" else counts
    (y,) = run_op(reg, "tfidf_vectorizer", [x], attrs, device=device)
    assert y.dtype == np.float32 and y.shape == ref.shape
    assert ref.any()  # the inputs do hit the pool
    np.testing.assert_array_equal(y, ref)


BASE = {
    "mode": "TF",
    "min_gram_length": 1,
    "max_gram_length": 2,
    "max_skip_count": 1,
    "ngram_counts": [0, 2],
    "ngram_indexes": [0, 1, 2, 3],
    "pool_int64s": [4, 5, 4, 5, 6, 7],
}


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"min_gram_length": 0}, "1 <= min_gram_length <= max_gram_length"),
        ({"min_gram_length": 3}, "1 <= min_gram_length <= max_gram_length"),
        ({"max_skip_count": -1}, "'max_skip_count' must be >= 0"),
        ({"ngram_counts": []}, "'ngram_counts' must be where each level starts"),
        ({"ngram_counts": [1, 2]}, "'ngram_counts' must be where each level starts"),
        ({"ngram_counts": [0, 4, 2]}, "'ngram_counts' must be where each level starts"),
        ({"ngram_counts": [0, 7]}, "'ngram_counts' must be where each level starts"),
        ({"ngram_counts": [0, 3]}, "level 2 of the pool .* holds 3 tokens, not a multiple of 2"),
        ({"ngram_indexes": [0, 1, 2]}, "one output column per n-gram of the pool \\(4"),
        ({"ngram_indexes": [], "pool_int64s": [], "ngram_counts": [0]}, "at least 1"),
        ({"ngram_indexes": [0, -1, 2, 3]}, "output columns in \\[0, 2147483648\\)"),
        ({"ngram_indexes": [0, 1, 2, 2**31]}, "output columns in \\[0, 2147483648\\)"),
        ({"mode": "IDF", "weights": [1.0, 2.0]}, "'weights' needs one weight per n-gram \\(4\\)"),
        ({"weights": [1.0, 2.0, 3.0, 4.0]}, "'weights' apply to modes IDF and TFIDF, not TF"),
        (
            {"mode": "TFIDF", "ngram_indexes": [0, 1, 2, 5], "weights": [1.0, 2.0, 3.0, 4.0]},
            "applied per output column, so at least 6",
        ),
        ({"pool_int64s": [1] * (MAX_POOL + 2), "ngram_counts": [0, 4]}, f"more than {MAX_POOL}"),
    ],
)
def test_attributes_that_disagree_are_refused_at_load(reg, change, match):
    """Lengths that disagree, negative or out-of-range columns, weights that cannot cover the columns and
    huge pools: refused with the rule, never run or read out of bounds."""
    x = np.array([[4, 5, 6, 7]], np.int64)
    with pytest.raises(InvalidArgumentError, match=match) as e:
        run_op(reg, "tfidf_vectorizer", [x], {**BASE, **change})
    assert e.value.code == pl.ErrorCode.PIPELINK_ERR_INVALID_ARGUMENT


def test_mode_and_shapes_are_checked(reg):
    desc = reg.get("tfidf_vectorizer")
    with pytest.raises(InvalidArgumentError, match="must be one of"):
        desc.resolve_attrs({**BASE, "mode": "BM25"}, where="s")
    attrs = desc.resolve_attrs(BASE, where="s")
    for bad in [(), (2, 3, 4)]:
        with pytest.raises(ShapeMismatchError, match=r"input 'x' must be \[C\] or \[N, C\]"):
            infer_outputs(desc, (bad,), ("int64",), attrs, stage="s")
    with pytest.raises(pl.PipeLinkError, match="dtype"):
        infer_outputs(desc, ((4,),), ("float32",), attrs, stage="s")  # tokens are integers
    assert infer_outputs(desc, (("N", 7),), ("int32",), attrs, stage="s") == ((("N", 4),), ("float32",))


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 5), (1, 1)])
def test_empty_and_short_rows_count_nothing(reg, device, shape):
    """An empty row, an empty batch, and a row shorter than any n-gram with a skip: zeros (every output
    written: the poison would show)."""
    x = np.full(shape, 4, np.int32)
    (y,) = run_op(reg, "tfidf_vectorizer", [x], {**BASE, "min_gram_length": 2}, device=device)
    assert y.shape == shape[:-1] + (4,) and not np.isnan(y).any() and not y.any()


# -- import ---------------------------------------------------------------------------------------------
def _model(attrs, dtype=np.int64, shape=(2, 6)):
    pytest.importorskip("onnx")
    from . import onnx_models as om

    x = np.zeros(shape, dtype)
    return om.one_node_model("TfIdfVectorizer", ["x"], {"x": x}, {}, attrs, ["y"], opset=9)


@pytest.mark.parametrize("mode", ["TF", "TFIDF"])
def test_import_runs_tfidf_vectorizer_as_onnx(device, mode):
    """The attributes carried over (TF's weights, which the spec ignores, dropped) and the values
    onnx's reference gives."""
    from . import onnx_models as om

    attrs = {**BASE, "mode": mode, "weights": [0.5, 1.25, 2.0, 0.1]}
    model = _model(attrs)
    x = np.random.default_rng(71).integers(3, 8, (2, 6)).astype(np.int64)
    (ours,) = om.run_pipeline(model, {"x": x}, device)
    (ref,) = om.reference_evaluator(model, {"x": x})
    assert ref.any()
    np.testing.assert_array_equal(ours, ref)


def test_import_refuses_string_pools_and_missing_attributes():
    from . import onnx_models as om

    strings = {k: v for k, v in BASE.items() if k != "pool_int64s"}
    strings["pool_strings"] = ["a", "b", "a", "b", "c", "d"]
    (entry,) = om.refused(_model(strings), "TfIdfVectorizer")
    assert "pool_strings" in entry["why"]
    partial = {k: v for k, v in BASE.items() if k != "max_skip_count"}
    (entry,) = om.refused(_model(partial), "TfIdfVectorizer")
    assert "max_skip_count" in entry["why"]


@pytest.mark.gpu
def test_on_cuda_it_runs_staged_and_gives_the_cpu_result():
    """No CUDA kernel: on a CUDA pipeline the stage runs its reference on staged host copies (the load
    report names it) and returns the CPU pipeline's values."""
    config = {
        "inputs": {"x": {"shape": [3, 9], "dtype": "int64"}},
        "pipeline": [
            {
                "name": "tfidf_vectorizer",
                "id": "tfidf",
                "inputs": ["x"],
                "outputs": ["y"],
                "attrs": {**BASE, "mode": "TFIDF", "weights": [0.5, 1.25, 2.0, 0.1]},
            }
        ],
    }
    x = np.random.default_rng(72).integers(3, 8, (3, 9)).astype(np.int64)
    with pl.load(config, device="cpu") as cpu, pl.load(config, device="cuda") as gpu:
        assert gpu.load_report.staged == ["tfidf"]
        want = np.asarray(cpu.run(x=x)["y"])
        got = gpu.run(x=x)["y"].numpy()
    assert want.any()
    np.testing.assert_array_equal(got, want)
