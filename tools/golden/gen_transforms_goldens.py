#!/usr/bin/env python3
"""Writes the fixtures and TF goldens of the transforms tests (tests/core/transforms_golden_test.cc).

Run from the repository root with tensorflow-cpu 2.15 and numpy:
    /tmp/tfvenv/bin/python tools/golden/gen_transforms_goldens.py

Writes tests/testdata/transforms/:
  csv/*.csv, il/*.txt, npy/*.npy   hand-made fixtures (npy written by numpy; npy/expected.json
                                    holds numpy's values: TF has no .npy reader, so numpy is
                                    the oracle there, as the file says)
  goldens.json                      {"cases": [{"name", "pipeline", "elements" | "error"}]}
Each case's "pipeline" is a Sluice pipeline expression; "elements" is what TensorFlow yields for
the equivalent tf.data pipeline (built here next to it), as JSON: a tuple element is a list of
its components, a tensor a (nested) list or a scalar, bytes as latin-1 strings, non-finite
floats as the strings "nan", "inf", "-inf". "error" is a substring of TF's error message that
Sluice's message must contain too.
"""
import json
import math
import os

import numpy as np
import tensorflow as tf

ROOT = "tests/testdata/transforms"


def write(path, data, mode="w"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, mode) as f:
        f.write(data)


def to_json(x):
    if isinstance(x, (tuple, list)):
        return [to_json(v) for v in x]
    if isinstance(x, dict):
        return {k: to_json(v) for k, v in sorted(x.items())}
    if hasattr(x, "numpy"):
        x = x.numpy()
    if isinstance(x, np.ndarray):
        return [to_json(v) for v in x] if x.ndim > 0 else to_json(x[()])
    if isinstance(x, bytes):
        return x.decode("latin-1")
    if isinstance(x, (np.floating, float)):
        f = float(x)
        if math.isnan(f):
            return "nan"
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return f
    if isinstance(x, (np.bool_, bool)):
        return bool(x)
    if isinstance(x, (np.integer, int)):
        return int(x)
    raise TypeError(type(x))


cases = []


def case(name, pipeline, make_tf, error=None):
    try:
        ds = make_tf()
        elements = [to_json(e) for e in ds]
        assert error is None, f"{name}: TF did not fail"
        cases.append({"name": name, "pipeline": pipeline, "elements": elements})
    except Exception as e:  # noqa: BLE001
        if error is None:
            raise
        assert error in str(e), f"{name}: {error!r} not in {e}"
        cases.append({"name": name, "pipeline": pipeline, "error": error})


def csv_fixtures():
    d = f"{ROOT}/csv"
    write(f"{d}/basic.csv", 'a,b,c\n1,2.5,x\n3,,"he said ""hi"""\n,4.5,"multi\nline, with comma"\n7,8,last')
    write(f"{d}/crlf.csv", "1,2\r\n3,4\r\n")
    write(f"{d}/cr.csv", "1,2\r3,4\r")
    write(f"{d}/empty.csv", "")
    write(f"{d}/blank_line.csv", "1,2\n\n3,4\n")
    write(f"{d}/extra.csv", "1,2,3\n")
    write(f"{d}/na.csv", "1,NA\n")
    write(f"{d}/inner_quote.csv", '1,a"b\n')
    write(f"{d}/bad_int.csv", "x,2\n")
    write(f"{d}/unterminated.csv", '"unterminated,2\n')
    write(f"{d}/semicolon.csv", "1;2\n")
    write(f"{d}/spaces.csv", " 1 , 2 \n")
    write(f"{d}/trailing_delim.csv", "1,2,\n")
    write(f"{d}/quoted_empty.csv", '"",1\n')
    write(f"{d}/numbers.csv", " 7 ,-nan,1e3,-12\n")


def csv_cases():
    d = f"{ROOT}/csv"
    C = tf.data.experimental.CsvDataset
    case("csv_basic", f"csv_dataset('{d}/basic.csv', record_defaults=[0, 0.0, 'dflt'], header=True)",
         lambda: C([f"{d}/basic.csv"], [0, 0.0, "dflt"], header=True))
    case("csv_required_missing",
         f"csv_dataset('{d}/basic.csv', record_defaults=[tf.int32, tf.float32, tf.string], header=True)",
         lambda: C([f"{d}/basic.csv"], [tf.int32, tf.float32, tf.string], header=True),
         error="Field 1 is required but missing in record!")
    case("csv_select_cols",
         f"csv_dataset('{d}/basic.csv', record_defaults=[0.0, 'd'], header=True, select_cols=[1, 2])",
         lambda: C([f"{d}/basic.csv"], [0.0, "d"], header=True, select_cols=[1, 2]))
    case("csv_crlf", f"csv_dataset('{d}/crlf.csv', record_defaults=[0, 0])",
         lambda: C([f"{d}/crlf.csv"], [0, 0]))
    case("csv_cr", f"csv_dataset('{d}/cr.csv', record_defaults=[0, 0])",
         lambda: C([f"{d}/cr.csv"], [0, 0]))
    case("csv_empty", f"csv_dataset('{d}/empty.csv', record_defaults=[0, 0])",
         lambda: C([f"{d}/empty.csv"], [0, 0]))
    case("csv_empty_header", f"csv_dataset('{d}/empty.csv', record_defaults=[0, 0], header=True)",
         lambda: C([f"{d}/empty.csv"], [0, 0], header=True), error="Can't read header of file")
    case("csv_blank_line", f"csv_dataset('{d}/blank_line.csv', record_defaults=[0, 0])",
         lambda: C([f"{d}/blank_line.csv"], [0, 0]), error="Expect 2 fields but have 1 in record")
    case("csv_extra_field", f"csv_dataset('{d}/extra.csv', record_defaults=[0, 0])",
         lambda: C([f"{d}/extra.csv"], [0, 0]), error="Expect 2 fields but have more in record")
    case("csv_na_value", f"csv_dataset('{d}/na.csv', record_defaults=[0, -1], na_value='NA')",
         lambda: C([f"{d}/na.csv"], [0, -1], na_value="NA"))
    case("csv_inner_quote", f"csv_dataset('{d}/inner_quote.csv', record_defaults=[0, ''])",
         lambda: C([f"{d}/inner_quote.csv"], [0, ""]), error="Unquoted fields cannot have quotes inside")
    case("csv_no_quote_delim",
         f"csv_dataset('{d}/inner_quote.csv', record_defaults=[0, ''], use_quote_delim=False)",
         lambda: C([f"{d}/inner_quote.csv"], [0, ""], use_quote_delim=False))
    case("csv_bad_int", f"csv_dataset('{d}/bad_int.csv', record_defaults=[0, 0])",
         lambda: C([f"{d}/bad_int.csv"], [0, 0]), error="Field 0 in record is not a valid int32: x")
    case("csv_unterminated", f"csv_dataset('{d}/unterminated.csv', record_defaults=['', 0])",
         lambda: C([f"{d}/unterminated.csv"], ["", 0]),
         error="Reached end of file without closing quoted field in record")
    case("csv_semicolon", f"csv_dataset('{d}/semicolon.csv', record_defaults=[0, 0], field_delim=';')",
         lambda: C([f"{d}/semicolon.csv"], [0, 0], field_delim=";"))
    case("csv_spaces_numbers", f"csv_dataset('{d}/spaces.csv', record_defaults=[0, 0])",
         lambda: C([f"{d}/spaces.csv"], [0, 0]))
    case("csv_spaces_strings", f"csv_dataset('{d}/spaces.csv', record_defaults=['', ''])",
         lambda: C([f"{d}/spaces.csv"], ["", ""]))
    case("csv_trailing_delim", f"csv_dataset('{d}/trailing_delim.csv', record_defaults=[0, 0, 0])",
         lambda: C([f"{d}/trailing_delim.csv"], [0, 0, 0]))
    case("csv_quoted_empty_is_missing", f"csv_dataset('{d}/quoted_empty.csv', record_defaults=['x', -1])",
         lambda: C([f"{d}/quoted_empty.csv"], ["x", -1]))
    case("csv_numbers",
         f"csv_dataset('{d}/numbers.csv', record_defaults=[tf.constant(0, dtype=tf.int64), 0.0, "
         f"tf.constant(0.0, dtype=tf.float64), 0])",
         lambda: C([f"{d}/numbers.csv"], [tf.constant(0, tf.int64), 0.0, tf.constant(0.0, tf.float64), 0]))
    case("csv_two_files", f"csv_dataset(['{d}/crlf.csv', '{d}/cr.csv'], record_defaults=[0, 0]).batch(3)",
         lambda: C([f"{d}/crlf.csv", f"{d}/cr.csv"], [0, 0]).batch(3))


def interleave_cases():
    d = f"{ROOT}/il"
    sizes = [3, 1, 4, 0, 2, 5]
    for i, n in enumerate(sizes):
        write(f"{d}/f{i}.txt", "".join(f"f{i}-{j}\n" for j in range(n)))
    files = [f"{d}/f{i}.txt" for i in range(len(sizes))]
    flist = "[" + ", ".join(f"'{f}'" for f in files) + "]"
    for cl in (1, 2, 3, 4):
        for bl in (1, 2, 3):
            case(f"interleave_c{cl}_b{bl}",
                 f"from_tensor_slices({flist}).interleave(text_line_dataset, cycle_length={cl}, block_length={bl})",
                 lambda cl=cl, bl=bl: tf.data.Dataset.from_tensor_slices(files).interleave(
                     tf.data.TextLineDataset, cycle_length=cl, block_length=bl))
    case("interleave_list_files",
         f"list_files('{d}/f*.txt').interleave(lambda f: text_line_dataset(f), cycle_length=2, block_length=1)",
         lambda: tf.data.Dataset.list_files(f"{d}/f*.txt", shuffle=False).interleave(
             tf.data.TextLineDataset, cycle_length=2, block_length=1))
    case("interleave_csv",
         f"list_files('{ROOT}/csv/c*.csv').interleave(lambda f: csv_dataset(f, record_defaults=[0, 0]), cycle_length=2)",
         lambda: tf.data.Dataset.list_files(f"{ROOT}/csv/c*.csv", shuffle=False).interleave(
             lambda f: tf.data.experimental.CsvDataset(f, [0, 0]), cycle_length=2))


def map_cases():
    case("cast_float_to_ints",
         "from_tensor_slices([float('nan'), 1e10, -1e10, 300.7, -1.5, 2.5]).batch(6)"
         ".map(cast(tf.int8)).map(cast(tf.int32))",
         lambda: tf.data.Dataset.from_tensor_slices([float("nan"), 1e10, -1e10, 300.7, -1.5, 2.5]).batch(6)
         .map(lambda x: tf.cast(tf.cast(x, tf.int8), tf.int32)))
    for dt in ("int32", "int64", "uint8", "uint32", "bool", "float16"):
        case(f"cast_float_to_{dt}",
             f"from_tensors([float('nan'), 1e10, -1e10, 300.7, -1.5, 2.5]).map(cast(tf.{dt}))"
             + (".map(cast(tf.float32))" if dt == "float16" else ""),
             lambda dt=dt: tf.data.Dataset.from_tensors([float("nan"), 1e10, -1e10, 300.7, -1.5, 2.5])
             .map(lambda x: tf.cast(x, dt) if dt != "float16" else tf.cast(tf.cast(x, dt), tf.float32)))
    case("cast_int_wrap", "from_tensors([-1, 256, 70000]).map(cast(tf.uint8))",
         lambda: tf.data.Dataset.from_tensors([-1, 256, 70000]).map(lambda x: tf.cast(x, tf.uint8)))
    case("one_hot", "from_tensors([0, 3, -1, 5]).map(one_hot(4))",
         lambda: tf.data.Dataset.from_tensors([0, 3, -1, 5]).map(lambda x: tf.one_hot(x, 4)))
    case("one_hot_values", "from_tensor_slices([1, 2]).map(one_hot(3, on_value=5.0, off_value=-1.0, dtype=tf.int32))",
         lambda: tf.data.Dataset.from_tensor_slices([1, 2]).map(
             lambda x: tf.one_hot(x, 3, on_value=5, off_value=-1, dtype=tf.int32)))
    case("decode_raw_int16", "from_tensor_slices(['abcd', 'efgh']).map(decode_raw(tf.int16))",
         lambda: tf.data.Dataset.from_tensor_slices(["abcd", "efgh"]).map(lambda x: tf.io.decode_raw(x, tf.int16)))
    case("decode_raw_big_endian", "from_tensors(['abcd']).map(decode_raw(tf.int16, little_endian=False))",
         lambda: tf.data.Dataset.from_tensors(["abcd"]).map(
             lambda x: tf.io.decode_raw(x, tf.int16, little_endian=False)))
    case("decode_raw_uint8_reshape", "from_tensors('\\x01\\x02\\x03\\x04\\x05\\x06').map(decode_raw(tf.uint8)).map(reshape([2, -1]))",
         lambda: tf.data.Dataset.from_tensors(b"\x01\x02\x03\x04\x05\x06").map(
             lambda x: tf.reshape(tf.io.decode_raw(x, tf.uint8), [2, -1])))
    case("decode_raw_bad_length", "from_tensors('abc').map(decode_raw(tf.int16))",
         lambda: tf.data.Dataset.from_tensors("abc").map(lambda x: tf.io.decode_raw(x, tf.int16)),
         error="Input to DecodeRaw has length 3 that is not a multiple of 2, the size of int16")
    case("normalize_per_channel",
         "from_tensors([[0, 128, 255], [10, 20, 30]]).map(cast(tf.uint8)).map(normalize(mean=[0.5, 100.0, 127.5], std=[2.0, 0.5, 127.5]))",
         lambda: tf.data.Dataset.from_tensors([[0, 128, 255], [10, 20, 30]]).map(
             lambda x: (tf.cast(tf.cast(x, tf.uint8), tf.float32) - [0.5, 100.0, 127.5]) / [2.0, 0.5, 127.5]))
    case("normalize_scalar", "from_tensors([1.0, 2.0, 4.0]).map(normalize(mean=1.0, std=3.0))",
         lambda: tf.data.Dataset.from_tensors([1.0, 2.0, 4.0]).map(lambda x: (x - 1.0) / 3.0))
    case("map_key", "from_tensor_slices({'image': [[1, 2], [3, 4]], 'label': [0, 1]}).map(cast(tf.float32), key='image').map(one_hot(2), key='label')",
         lambda: tf.data.Dataset.from_tensor_slices({"image": [[1, 2], [3, 4]], "label": [0, 1]}).map(
             lambda d: {"image": tf.cast(d["image"], tf.float32), "label": tf.one_hot(d["label"], 2)}))
    case("map_index_parallel", "from_tensor_slices(([1, 2, 3, 4, 5], [5, 6, 7, 8, 9])).map(cast(tf.float64), key=1, num_parallel_calls=3)",
         lambda: tf.data.Dataset.from_tensor_slices(([1, 2, 3, 4, 5], [5, 6, 7, 8, 9])).map(
             lambda a, b: (a, tf.cast(b, tf.float64)), num_parallel_calls=3))


def other_cases():
    case("padded_batch_default", "range(1, 5).map(reshape([1])).padded_batch(3)",
         lambda: tf.data.Dataset.range(1, 5).map(lambda x: tf.reshape(x, [1])).padded_batch(3))
    # Ragged rows via text lines and decode_raw: lengths 1..4.
    write(f"{ROOT}/ragged.txt", "a\nbb\nccc\ndddd\n")
    case("padded_batch_ragged", f"text_line_dataset('{ROOT}/ragged.txt').map(decode_raw(tf.uint8)).padded_batch(3)",
         lambda: tf.data.TextLineDataset(f"{ROOT}/ragged.txt").map(lambda x: tf.io.decode_raw(x, tf.uint8)).padded_batch(3))
    case("padded_batch_shapes_values",
         f"text_line_dataset('{ROOT}/ragged.txt').map(decode_raw(tf.uint8)).padded_batch(2, padded_shapes=[5], padding_values=tf.constant(7, dtype=tf.uint8), drop_remainder=True)",
         lambda: tf.data.TextLineDataset(f"{ROOT}/ragged.txt").map(lambda x: tf.io.decode_raw(x, tf.uint8)).padded_batch(
             2, padded_shapes=[5], padding_values=tf.constant(7, tf.uint8), drop_remainder=True))
    case("padded_batch_too_small",
         f"text_line_dataset('{ROOT}/ragged.txt').map(decode_raw(tf.uint8)).padded_batch(4, padded_shapes=[2])",
         lambda: tf.data.TextLineDataset(f"{ROOT}/ragged.txt").map(lambda x: tf.io.decode_raw(x, tf.uint8)).padded_batch(
             4, padded_shapes=[2]), error="Attempted to pad to a smaller size than the input element.")
    case("padded_batch_tuple",
         f"text_line_dataset('{ROOT}/ragged.txt').map(decode_raw(tf.uint8)).map(cast(tf.int32)).padded_batch(2, padded_shapes=[None], padding_values=-1)",
         lambda: tf.data.TextLineDataset(f"{ROOT}/ragged.txt").map(lambda x: tf.cast(tf.io.decode_raw(x, tf.uint8), tf.int32)).padded_batch(
             2, padded_shapes=[None], padding_values=-1))
    case("padded_batch_strings", "from_tensor_slices([['a'], ['b']]).padded_batch(2, padded_shapes=[3])",
         lambda: tf.data.Dataset.from_tensor_slices([["a"], ["b"]]).padded_batch(2, padded_shapes=[3]))
    case("filter_less", "range(10).filter(less(5))",
         lambda: tf.data.Dataset.range(10).filter(lambda x: x < 5))
    case("filter_value_in", "from_tensor_slices(([10, 11, 12, 13], [0, 2, 1, 0])).filter(value_in([0, 1]), key=1)",
         lambda: tf.data.Dataset.from_tensor_slices(([10, 11, 12, 13], [0, 2, 1, 0])).filter(
             lambda x, y: tf.reduce_any(tf.equal(y, [0, 1]))))
    case("filter_not_empty", f"text_line_dataset('{ROOT}/with_blank.txt').filter(not_empty())",
         lambda: (write(f"{ROOT}/with_blank.txt", "a\n\nb\n\n"),
                  tf.data.TextLineDataset(f"{ROOT}/with_blank.txt").filter(lambda x: tf.strings.length(x) > 0))[1])
    case("cache_repeat", "range(3).cache().repeat(2)", lambda: tf.data.Dataset.range(3).cache().repeat(2))


def npy_fixtures():
    d = f"{ROOT}/npy"
    os.makedirs(d, exist_ok=True)
    np.save(f"{d}/f32.npy", np.arange(12, dtype="<f4").reshape(3, 2, 2) / 4)
    np.save(f"{d}/i32_be.npy", np.array([[1, -2], [300000, 4]], dtype=">i4"))
    np.save(f"{d}/u8.npy", np.arange(12, dtype=np.uint8).reshape(4, 3))
    np.save(f"{d}/bool.npy", np.array([True, False, True]))
    np.save(f"{d}/empty_i64.npy", np.zeros((0, 3), dtype=np.int64))
    np.save(f"{d}/fortran.npy", np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)))
    np.save(f"{d}/scalar.npy", np.float32(1.5))
    np.save(f"{d}/strings.npy", np.array(["a", "b"]))
    np.save(f"{d}/f16.npy", np.array([0.5, -2.0, 65504.0], dtype=np.float16))
    arr = np.arange(4, dtype=np.float64).reshape(2, 2)
    with open(f"{d}/v2.npy", "wb") as f:
        np.lib.format.write_array(f, arr, version=(2, 0))
    with open(f"{d}/f32.npy", "rb") as f:
        whole = f.read()
    write(f"{d}/truncated.npy", whole[:-5], mode="wb")
    # TF has no .npy reader: these values come from numpy (np.load's oracle), not from TF.
    expected = {
        "_oracle": "numpy (np.save / np.load): TensorFlow has no .npy dataset to compare with",
        "f32": (np.arange(12, dtype="<f4").reshape(3, 2, 2) / 4).tolist(),
        "i32_be": [[1, -2], [300000, 4]],
        "u8": np.arange(12).reshape(4, 3).tolist(),
        "bool": [True, False, True],
        "f16": [0.5, -2.0, 65504.0],
        "v2": arr.tolist(),
    }
    write(f"{d}/expected.json", json.dumps(expected, indent=1) + "\n")


def main():
    csv_fixtures()
    csv_cases()
    interleave_cases()
    map_cases()
    other_cases()
    npy_fixtures()
    write(f"{ROOT}/goldens.json", json.dumps({"cases": cases}, indent=1) + "\n")
    print(f"wrote {len(cases)} cases")


if __name__ == "__main__":
    main()
