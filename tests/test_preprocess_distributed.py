"""Preprocessing on Hugging Face datasets and Ray Data gives the local engine's lines and bytes."""
from __future__ import annotations

import hashlib
import json
import os
import pickle

import pytest

from arabert_pipeline.cli import main
from arabert_pipeline.errors import ConfigError, InputError
from arabert_pipeline.preprocess.corpus import preprocess_corpus
from arabert_pipeline.preprocess.distributed import PreprocessBatch, preprocess_shards, shard_name
from test_preprocess_corpus import make_lines, read_text, write_text


def local_lines(tmp_path, lines, name):
    source, out = tmp_path / f"local-{name}.txt", tmp_path / f"local-{name}.out.txt"
    write_text(source, lines)
    preprocess_corpus([source], out, preprocessing=name, progress=False)
    return read_text(out).split("\n")[:-1]


def test_batch_function_pickles_without_its_preprocessor():
    fn = PreprocessBatch("arabertv2")
    fn({"text": ["وسيكتبونها بالقلم"]})
    assert fn._worker is not None
    clone = pickle.loads(pickle.dumps(fn))
    assert clone._worker is None and clone.preprocessing == "arabertv2"
    assert len(pickle.dumps(fn)) < 500


def test_preprocessor_built_once_per_process(monkeypatch):
    from arabert_pipeline.preprocess import corpus

    built = []
    original = corpus._Worker.__init__

    def counting(self, *args):
        built.append(args)
        original(self, *args)

    monkeypatch.setattr(corpus._Worker, "__init__", counting)
    fn = PreprocessBatch("arabertv02")
    for _ in range(3):
        fn({"text": ["وَقَالَ الوزيرُ"]})
    assert len(built) == 1


@pytest.mark.parametrize("name", ["arabertv02", pytest.param("arabertv2", marks=pytest.mark.slow)])
def test_datasets_map_gives_the_local_engines_lines(tmp_path, name):
    datasets = pytest.importorskip("datasets")
    lines = make_lines(120, seed=3)
    dataset = datasets.Dataset.from_dict({"text": lines, "id": list(range(len(lines)))})
    mapped = dataset.map(PreprocessBatch(name), batched=True, batch_size=17, num_proc=2, load_from_cache_file=False)
    assert mapped["text"] == local_lines(tmp_path, lines, name)
    assert mapped["id"] == list(range(len(lines)))  # other columns and the order are kept


def test_shard_names():
    from pathlib import Path

    assert shard_name(Path("x/a.txt.xz")) == "a.txt"
    assert shard_name(Path("a.txt.gz"), "gz") == "a.txt.gz"
    assert shard_name(Path("wiki_00"), "xz") == "wiki_00.txt.xz"


def test_local_engine_shards_and_option_errors(tmp_path):
    sources = []
    for index in range(2):
        sources.append(tmp_path / f"in{index}.txt.gz")
        write_text(sources[-1], make_lines(40, seed=index))
    report = preprocess_shards(sources, tmp_path / "out", engine="local", preprocessing="arabertv02", progress=False)
    assert len(report.shards) == 2
    for index, source in enumerate(sources):
        alone = tmp_path / f"alone{index}.txt"
        preprocess_corpus([source], alone, preprocessing="arabertv02", progress=False)
        assert (tmp_path / "out" / f"in{index}.txt").read_bytes() == alone.read_bytes()
    with pytest.raises(ConfigError, match="both be written"):
        preprocess_shards([sources[0], sources[0]], tmp_path / "out2", engine="local", progress=False)
    with pytest.raises(ConfigError, match="engine"):
        preprocess_shards(sources, tmp_path / "out3", engine="spark")


# ---------------------------------------------------------------------------------------------------------------
# Stale shards: decided before any shard is written, the same way for both engines, so the local engine (no Ray
# needed) tests the decision and a Ray test below the redo.


def shards(sources, out, **options):
    return preprocess_shards(sources, out, **{"engine": "local", "preprocessing": "arabertv02", "progress": False,
                                              **options})


def snapshot(out):
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()}


def alone(tmp_path, source, **options):
    """The bytes `preprocess SOURCE -o SHARD` writes."""
    target = tmp_path / "alone" / f"{len(list(tmp_path.glob('alone/*')))}.txt"
    preprocess_corpus([source], target, progress=False, **{"preprocessing": "arabertv02", **options})
    return target.read_bytes()


def test_a_shard_of_an_input_changed_since_is_refused_and_overwrite_redoes_only_it(tmp_path):
    sources = [tmp_path / "a.txt.xz", tmp_path / "b.txt"]
    for index, source in enumerate(sources):
        write_text(source, make_lines(60, seed=index))
    out = tmp_path / "out"
    shards(sources, out)
    before = snapshot(out)
    # An edit that keeps the size: only the content tells the shard is stale.
    lines = make_lines(60, seed=0)
    write_text(sources[0], lines[30:] + lines[:30])
    with pytest.raises(ConfigError, match=r"out/a\.txt is stale: written from .*a\.txt\.xz as it was then .*"
                                          r"--overwrite") as error:
        shards(sources, out)
    assert "\n" not in str(error.value)
    assert snapshot(out) == before  # refused before any work: nothing written, nothing removed

    report = shards(sources, out, overwrite=True)
    assert report.replaced == [str(out / "a.txt")] and report.skipped == [str(out / "b.txt")]
    assert "1 of them replacing stale shards" in report.summary()
    assert (out / "a.txt").read_bytes() == alone(tmp_path, sources[0])
    assert snapshot(out)["b.txt"] == before["b.txt"]
    assert len(shards(sources, out).skipped) == 2


def test_a_shard_of_another_preprocessing_is_refused(tmp_path):
    source = tmp_path / "a.txt"
    write_text(source, make_lines(40))
    out = tmp_path / "out"
    shards([source], out)
    before = snapshot(out)
    with pytest.raises(ConfigError, match="written with --preprocessing arabertv02, not none"):
        shards([source], out, preprocessing="none")
    assert snapshot(out) == before
    # A model name of the same preprocessing is the same preprocessing.
    assert shards([source], out, preprocessing="aubmindlab/bert-base-arabertv02").skipped == [str(out / "a.txt")]
    with pytest.raises(ConfigError, match="unknown preprocessing"):  # this run's mistake, not a stale shard
        shards([source], out, preprocessing="arabertv3")
    shards([source], out, preprocessing="none", overwrite=True)
    assert (out / "a.txt").read_bytes() == alone(tmp_path, source, preprocessing="none")


def test_a_shard_of_another_input_of_the_same_name_is_refused_a_copy_of_its_own_is_not(tmp_path, monkeypatch):
    from arabert_pipeline.preprocess import distributed
    from arabert_pipeline.weights.files import file_digest

    first, second = tmp_path / "one" / "wiki.txt", tmp_path / "two" / "wiki.txt"
    first.parent.mkdir()
    second.parent.mkdir()
    write_text(first, make_lines(40, seed=1))
    write_text(second, make_lines(40, seed=2))
    out = tmp_path / "out"
    shards([first], out)
    before = snapshot(out)
    for other in (second, tmp_path / "wiki.txt.gz"):  # wiki.txt.gz is also written to out/wiki.txt
        write_text(other, make_lines(40, seed=2))
        with pytest.raises(ConfigError, match=r"stale: written from .*one/wiki\.txt as it was then"):
            shards([other], out)
    assert snapshot(out) == before

    hashed = []
    monkeypatch.setattr(distributed, "file_digest", lambda path: hashed.append(path) or file_digest(path))
    assert shards([first], out).skipped and hashed == []  # unchanged: name, size and mtime, nothing read
    second.write_bytes(first.read_bytes())  # the same text elsewhere, with a new mtime: recognised by its digest
    assert shards([second], out).skipped and hashed == [second]
    os.utime(first, ns=(0, 0))
    assert shards([first], out).skipped and hashed == [second, first]
    assert snapshot(out) == before


def test_replaced_utf8_and_other_versions_and_damaged_sidecars(tmp_path):
    source = tmp_path / "bad.txt"
    source.write_bytes(("\n".join(make_lines(20)) + "\n").encode("utf-8") + b"bad \xff byte\n")
    out = tmp_path / "out"
    shards([source], out, errors="replace")
    with pytest.raises(ConfigError, match="1 invalid UTF-8 sequences were replaced"):
        shards([source], out)  # --errors strict would have stopped at that line
    clean = tmp_path / "clean.txt"
    write_text(clean, make_lines(20))
    shards([clean], out)
    assert shards([clean], out, errors="replace").skipped  # strict read no invalid UTF-8: replace writes the same

    sidecar = out / "clean.txt.arabert_pipeline.json"
    fields = json.loads(sidecar.read_text())
    sidecar.write_text(json.dumps({**fields, "arabert_pipeline_version": "0.0.1"}))
    with pytest.raises(ConfigError, match=r"written by arabert-pipeline 0\.0\.1, not by this one"):
        shards([clean], out)
    sidecar.write_text(json.dumps({**fields, "inputs": [{"path": str(clean), "lines": 20}]}))
    with pytest.raises(ConfigError, match="does not record the digest of one input"):
        shards([clean], out)
    sidecar.write_text("{not json")
    with pytest.raises(ConfigError, match="sidecar cannot be read"):
        shards([clean], out)
    assert shards([clean], out, overwrite=True).replaced == [str(out / "clean.txt")]
    assert json.loads(sidecar.read_text())["inputs"][0]["sha256"] == fields["inputs"][0]["sha256"]


def test_ray_engine_refuses_stale_shards_before_starting_ray(tmp_path, capsys):
    source = tmp_path / "a.txt"
    write_text(source, make_lines(30))
    out = tmp_path / "out"
    shards([source], out)  # the local engine writes the shards --engine ray would (checked below with Ray)
    write_text(source, make_lines(31))
    assert main_ray([str(source), "-o", str(out), "--preprocessing", "arabertv02"]) == 2
    err = capsys.readouterr().err
    assert "a.txt is stale" in err and "--overwrite" in err and len(err.strip().splitlines()) == 1


# ---------------------------------------------------------------------------------------------------------------
# Ray: one small local instance for the module


@pytest.fixture(scope="module")
def ray_instance():
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'arabert-pipeline[ray]')")
    pytest.importorskip("ray.data", reason="Ray Data is not installed (pip install 'ray[data]')")
    ray.init(num_cpus=2, object_store_memory=200 * 2**20, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def corpus_slice(tmp_path_factory):
    """Three small files, compressed or not, of different lengths (not multiples of the chunk size)."""
    root = tmp_path_factory.mktemp("slice")
    files = []
    for index, (name, count) in enumerate([("news_a.txt.xz", 230), ("news_b.txt", 97), ("wiki_c.txt.gz", 161)]):
        files.append(root / name)
        write_text(files[-1], make_lines(count, seed=10 + index))
    return files


def local_shard(source, shard, **options):
    preprocess_corpus([source], shard, progress=False, **options)
    return shard.read_bytes()


@pytest.mark.slow
@pytest.mark.parametrize("name,compression", [("arabertv02", "none"), ("arabertv02", "xz"), ("arabertv2", "gz")])
def test_ray_shards_are_byte_identical(ray_instance, corpus_slice, tmp_path, name, compression):
    options = dict(preprocessing=name, chunk_lines=25, checkpoint_chunks=2)
    out = tmp_path / "shards"
    report = preprocess_shards(corpus_slice, out, engine="ray", compression=compression, window_lines=60,
                               progress=False, **options)
    assert len(report.shards) == 3 and not report.skipped
    for source in corpus_slice:
        shard = out / shard_name(source, compression)
        assert shard.read_bytes() == local_shard(source, tmp_path / shard.name, **options)
        sidecar = json.loads(shard.with_name(shard.name + ".arabert_pipeline.json").read_text())
        expected = json.loads((tmp_path / (shard.name + ".arabert_pipeline.json")).read_text())
        for field in ("preprocessing", "lines", "words", "input_bytes", "inputs", "emptied_lines", "segmenter"):
            assert sidecar[field] == expected[field], field
    assert sorted(p.name for p in out.iterdir() if p.name.endswith(".part")) == []


@pytest.mark.slow
def test_ray_rerun_skips_finished_shards_and_ignores_half_written_ones(ray_instance, corpus_slice, tmp_path):
    out = tmp_path / "shards"
    out.mkdir()
    finished = out / "news_a.txt"
    local_shard(corpus_slice[0], finished, preprocessing="arabertv02")
    finished_bytes, finished_mtime = finished.read_bytes(), finished.stat().st_mtime_ns
    (out / "news_b.txt.part").write_bytes(b"half a line from a killed run\n\xff")
    report = main_ray([*map(str, corpus_slice), "-o", str(out), "--preprocessing", "arabertv02", "--workers", "2"])
    assert report == 0
    assert finished.stat().st_mtime_ns == finished_mtime and finished.read_bytes() == finished_bytes
    for source in corpus_slice[1:]:
        shard = out / shard_name(source)
        assert shard.read_bytes() == local_shard(source, tmp_path / shard.name, preprocessing="arabertv02")
    assert not (out / "news_b.txt.part").exists()
    again = preprocess_shards(corpus_slice, out, engine="ray", preprocessing="arabertv02", progress=False)
    assert len(again.skipped) == 3 and not again.shards


@pytest.mark.slow
def test_ray_overwrite_redoes_a_stale_shard_and_keeps_a_finished_one(ray_instance, corpus_slice, tmp_path):
    sources = [tmp_path / source.name for source in corpus_slice[:2]]
    for source, original in zip(sources, corpus_slice[:2], strict=True):
        source.write_bytes(original.read_bytes())
    out = tmp_path / "shards"
    args = [*map(str, sources), "-o", str(out), "--preprocessing", "arabertv02"]
    assert main_ray(args) == 0
    kept = snapshot(out)["news_b.txt"]
    write_text(sources[0], make_lines(50, seed=99))
    assert main_ray(args) == 2
    assert main_ray([*args, "--overwrite"]) == 0
    assert (out / "news_a.txt").read_bytes() == local_shard(sources[0], tmp_path / "news_a.txt",
                                                            preprocessing="arabertv02")
    assert snapshot(out)["news_b.txt"] == kept
    sidecar = json.loads((out / "news_a.txt.arabert_pipeline.json").read_text())
    assert sidecar["inputs"][0]["sha256"] == hashlib.sha256(sources[0].read_bytes()).hexdigest()


def main_ray(args):
    return main(["preprocess", "--engine", "ray", "--no-progress", *args])


@pytest.mark.slow
def test_ray_invalid_utf8_names_the_file_and_line_as_the_local_engine(ray_instance, tmp_path):
    source = tmp_path / "bad.txt"
    source.write_bytes(("\n".join(make_lines(30)) + "\n").encode("utf-8") + b"ok\nbad \xff byte\n")
    with pytest.raises(InputError) as local:
        preprocess_corpus([source], tmp_path / "local.txt", preprocessing="arabertv02", progress=False)
    with pytest.raises(InputError) as distributed:
        preprocess_shards([source], tmp_path / "out", engine="ray", preprocessing="arabertv02", progress=False,
                          window_lines=7)
    assert str(distributed.value) == str(local.value)
    assert "bad.txt" in str(local.value) and "32" in str(local.value)
    assert not (tmp_path / "out" / "bad.txt").exists() and not (tmp_path / "out" / "bad.txt.part").exists()


def test_ray_missing_is_a_config_error(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    source = tmp_path / "a.txt"
    write_text(source, make_lines(10))
    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(ConfigError, match=r"arabert-pipeline\[ray\]"):
        preprocess_shards([source], tmp_path / "out", engine="ray", preprocessing="arabertv02", progress=False)
