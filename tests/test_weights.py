"""weights/'s readers: the safetensors header (bounded before anything is allocated for it) and a reader's word
table (float16, or int8 rows with their checked float32 scales)."""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from arabert_pipeline.errors import ConfigError
from arabert_pipeline.weights.files import file_digest
from arabert_pipeline.weights.header import MAX_HEADER_BYTES, read_safetensors_header, storage_of
from arabert_pipeline.weights.rows import INT8_ROWS, STORAGE_KEY, quantize_rows
from arabert_pipeline.weights.tables import read_table


def test_the_header_reader_returns_entries_metadata_offset_and_raw_bytes(tmp_path):
    from safetensors.numpy import save_file

    path = tmp_path / "model.safetensors"
    save_file({"a": np.ones((2, 3), dtype=np.float32)}, str(path), metadata={STORAGE_KEY: INT8_ROWS})
    header = read_safetensors_header(path)
    assert set(header.tensors) == {"a"} and header.tensors["a"]["shape"] == [2, 3]
    assert header.metadata[STORAGE_KEY] == INT8_ROWS and storage_of(path) == INT8_ROWS
    size = struct.unpack("<Q", path.read_bytes()[:8])[0]
    assert header.data_start == 8 + size and header.raw == path.read_bytes()[8:8 + size]
    save_file({"a": np.ones(2, dtype=np.float32)}, str(path))
    assert storage_of(path) is None


@pytest.mark.parametrize("size", [MAX_HEADER_BYTES + 1, 2**63, 2**64 - 1])
def test_a_header_length_past_the_cap_is_refused_in_one_line_naming_the_file(tmp_path, size):
    path = tmp_path / "hostile.safetensors"
    path.write_bytes(struct.pack("<Q", size) + b'{"__metadata__": {}}')
    for read in (read_safetensors_header, storage_of):
        with pytest.raises(ConfigError) as caught:
            read(path)
        message = str(caught.value)
        assert str(path) in message and f"{MAX_HEADER_BYTES:,}" in message and "\n" not in message


@pytest.mark.parametrize("content", [b"\x01\x00", struct.pack("<Q", 50) + b"{}", struct.pack("<Q", 2) + b"[]",
                                     struct.pack("<Q", 21) + b'{"__metadata__": [1]}'])
def test_a_file_that_is_no_safetensors_file_is_a_config_error(tmp_path, content):
    path = tmp_path / "model.safetensors"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match="not a readable safetensors file"):
        read_safetensors_header(path)


def _reader(tmp_path, table, scales=None):
    np.save(tmp_path / "vectors.npy", table, allow_pickle=False)
    config = {"dim": table.shape[1]}
    if scales is not None:
        np.save(tmp_path / "vector_scales.npy", scales, allow_pickle=False)
        config["scales_sha256"] = file_digest(tmp_path / "vector_scales.npy")
    return config


def test_read_table_reads_float16_and_int8_rows(tmp_path):
    values = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float16)
    table, scales = read_table(tmp_path, _reader(tmp_path, values), 5)
    assert scales is None and np.array_equal(table, values)
    quantized, row_scales = quantize_rows(values)
    table, scales = read_table(tmp_path, _reader(tmp_path, quantized, row_scales.reshape(-1)), 5)
    assert table.dtype == np.int8 and np.array_equal(scales, row_scales.reshape(-1))


def test_read_table_refuses_missing_other_or_mistyped_scales_and_tables(tmp_path):
    quantized, row_scales = quantize_rows(np.ones((5, 4), dtype=np.float32))
    config = _reader(tmp_path, quantized)
    with pytest.raises(ConfigError, match="vector_scales.npy is missing or not the file"):
        read_table(tmp_path, config, 5)
    config = _reader(tmp_path, quantized, row_scales.reshape(-1))
    np.save(tmp_path / "vector_scales.npy", row_scales.reshape(-1) * 2, allow_pickle=False)
    with pytest.raises(ConfigError, match="vector_scales.npy is missing or not the file"):
        read_table(tmp_path, config, 5)
    config = _reader(tmp_path, quantized, row_scales.reshape(-1).astype(np.float64))
    with pytest.raises(ConfigError, match=r"expected \(5,\) float32, found \(5,\) float64"):
        read_table(tmp_path, config, 5)
    config = _reader(tmp_path, np.ones((5, 4), dtype=np.float32))
    with pytest.raises(ConfigError, match="float16 or int8, found"):
        read_table(tmp_path, config, 5)
    with pytest.raises(ConfigError, match=r"expected \(6, 4\)"):
        read_table(tmp_path, _reader(tmp_path, np.ones((5, 4), dtype=np.float16)), 6)
    (tmp_path / "vectors.npy").write_text(json.dumps([1, 2]))
    with pytest.raises(ConfigError, match="not a numeric .npy array"):
        read_table(tmp_path, config, 5)


def test_exact_rows_round_trip_and_a_damaged_row_index_is_refused_by_name(tmp_path):
    """A table keeping some rows as stored: those come back bit for bit, the others as their int8 rows; an index that
    does not place every row once (a damaged file) is a one-line ConfigError, not a silently scrambled table."""
    from safetensors.numpy import load_file, save_file

    from arabert_pipeline.weights.loading import dequantized_arrays
    from arabert_pipeline.weights.rows import INDEX_SUFFIX, INT8_ROWS_EXACT, compact, dequantize_rows

    rng = np.random.default_rng(0)
    table = rng.normal(size=(300, 256)).astype(np.float16)
    source, target = tmp_path / "fp16.safetensors", tmp_path / "int8.safetensors"
    save_file({"emb.weight": table, "bias": np.ones(4, np.float32)}, str(source))
    kept = [299, 7, 0, 7]
    compact(source, target, exact_rows={"emb": kept})
    assert storage_of(target) == INT8_ROWS_EXACT
    widened = dequantized_arrays(target)["emb.weight"]
    others = np.setdiff1d(np.arange(300), kept)
    assert np.array_equal(widened[[0, 7, 299]], table[[0, 7, 299]].astype(np.float32))
    assert np.array_equal(widened[others], dequantize_rows(*quantize_rows(table[others])))
    with pytest.raises(ConfigError, match="exact rows must lie"):
        compact(source, tmp_path / "bad.safetensors", exact_rows={"emb": [300]})
    stored = load_file(str(target))
    stored["emb.weight" + INDEX_SUFFIX][5] = stored["emb.weight" + INDEX_SUFFIX][6]  # one int8 row placed twice
    save_file(stored, str(target), metadata={STORAGE_KEY: INT8_ROWS_EXACT})
    with pytest.raises(ConfigError, match="not a whole int8 table") as caught:
        dequantized_arrays(target)
    assert str(target) in str(caught.value)
    with pytest.raises(ConfigError, match="row numbers"):  # a boolean mask would keep rows 0 and 1, not 0 and 2
        compact(source, tmp_path / "mask.safetensors", exact_rows={"emb": np.arange(300) % 2 == 0})
    # nothing kept: plain int8 rows; everything kept: the table as stored
    compact(source, tmp_path / "none.safetensors", exact_rows={"emb": []})
    assert storage_of(tmp_path / "none.safetensors") == INT8_ROWS
    compact(source, tmp_path / "all.safetensors", exact_rows={"emb": range(300)})
    assert load_file(str(tmp_path / "all.safetensors"))["emb.weight"].dtype == np.float16
    stored = load_file(str(tmp_path / "none.safetensors"))
    del stored["emb.weight.int8_scale"]  # int8 rows without their scales would load as raw int8 values
    save_file(stored, str(tmp_path / "none.safetensors"), metadata={STORAGE_KEY: INT8_ROWS})
    with pytest.raises(ConfigError, match="not a whole int8 table"):
        dequantized_arrays(tmp_path / "none.safetensors")


@pytest.mark.parametrize("block", [None, 16])
def test_a_table_with_exact_rows_widens_whole_in_the_graph_to_the_loaders_values(tmp_path, block):
    """A table read other than by Gather (a tied output layer) is widened whole in the graph: with exact rows, every row
    looked up through the index. ONNX Runtime gives the values the torch loader gives."""
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper
    from safetensors.numpy import save_file

    from arabert_pipeline.finetuning.export import WEIGHTS_FILE, _external, _stored_tensors, _widen_int8
    from arabert_pipeline.weights.loading import dequantized_arrays
    from arabert_pipeline.weights.rows import compact

    table = np.random.default_rng(1).normal(size=(40, 32)).astype(np.float16)
    source, weights = tmp_path / "fp16.safetensors", tmp_path / WEIGHTS_FILE
    save_file({"emb": table}, str(source))
    compact(source, weights, min_elements=1, blocks={"emb": block}, exact_rows={"emb": [0, 5, 39]})
    values, _, offset, length, parts = _stored_tensors(weights)["emb"]
    linked = [_external("t", TensorProto.INT8, parts.shape, offset, length),
              _external("t/scale", TensorProto.FLOAT, *parts.scale),
              _external("t/exact", TensorProto.FLOAT16, *parts.exact[1:]),
              _external("t/index", TensorProto.INT32, *parts.row_index)]
    nodes, constants = _widen_int8("t", parts, len(values), "out")
    graph = helper.make_graph(nodes, "widen", [], [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                              initializer=[*linked, *constants])
    path = tmp_path / "widen.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    widened = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(["out"], {})[0]
    expected = dequantized_arrays(weights)["emb"]
    assert np.array_equal(widened, expected) and np.array_equal(values, expected)
    assert np.array_equal(expected[[0, 5, 39]], table[[0, 5, 39]].astype(np.float32))


def test_int4_values_are_packed_low_nibble_first():
    """ONNX's INT4 layout (and vectors_int4.npy's): the first value of a pair in the low nibble, two's complement."""
    import numpy as np

    from arabert_pipeline.weights.rows import pack_int4, unpack_int4

    assert pack_int4([[1, -2, 7, -8]]).tolist() == [[0xE1, 0x87]]
    values = np.arange(-8, 8, dtype=np.int8).reshape(2, 8)
    assert np.array_equal(unpack_int4(pack_int4(values), 8), values)


def test_an_int4_tail_table_is_indexed_as_one_table_of_all_its_rows():
    """Int4TailTable: ids past the int8 rows read the 4-bit ones, negative ids count from the end of the whole
    table, an empty id list gives no rows, and an id out of range is an IndexError naming the bounds."""
    import numpy as np

    from arabert_pipeline.weights.rows import pack_int4
    from arabert_pipeline.weights.tables import Int4TailTable

    head = np.arange(12, dtype=np.int8).reshape(3, 4)
    tail = np.array([[1, -2, 3, -4], [7, -8, 0, 5]], dtype=np.int8)
    table = Int4TailTable(head, pack_int4(tail), 4)
    whole = np.concatenate([head, tail])
    assert len(table) == 5 and np.array_equal(table[np.arange(5)], whole)
    assert np.array_equal(table[[-1, 0, 3]], whole[[-1, 0, 3]]) and np.array_equal(table[4], whole[4])
    assert np.array_equal(table[[[1, 4], [3, 2]]], whole[[[1, 4], [3, 2]]])
    assert table[[]].shape == (0, 4)
    with pytest.raises(IndexError, match="within ±5"):
        table[[5]]
