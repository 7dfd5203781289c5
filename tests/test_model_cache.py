"""The converted-model cache (gramgen.hf.model): one copy per model, keyed by the GGUF file's
content (hashed once per file version), where the environment says, and clearable; and
load_model's argument checks. A small fake GGUF file and a fake conversion: no real one."""

from __future__ import annotations

import os

import pytest

import gramgen
from gramgen.hf import cache_dir, clear_cache, converted_folder
from gramgen.hf import model as hf_model


@pytest.fixture()
def fake(monkeypatch, tmp_path):
    """A fake GGUF file for "smollm2", a cache under tmp_path, and a conversion that
    records its calls and writes a config.json holding the file's content."""
    gguf = tmp_path / "pkg" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF v1 weights")
    monkeypatch.setenv("GRAMGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(hf_model, "_gguf_path", lambda name: gguf)
    conversions, hashes = [], []

    def convert(path, out):
        conversions.append(path)
        (out / "config.json").write_bytes(path.read_bytes())

    real_hash = hf_model._hash_file

    def counting_hash(path):
        hashes.append(path)
        return real_hash(path)

    monkeypatch.setattr(hf_model, "_convert", convert)
    monkeypatch.setattr(hf_model, "_hash_file", counting_hash)
    return gguf, conversions, hashes


def test_a_reinstalled_identical_file_reuses_the_copy(fake):
    gguf, conversions, hashes = fake
    first = converted_folder("smollm2")
    assert first.parent == cache_dir() / "models" and (first / "config.json").is_file()
    assert converted_folder("smollm2") == first
    assert len(conversions) == 1 and len(hashes) == 1   # the hash is remembered
    os.utime(gguf, (1_000_000, 1_000_000))              # a reinstall: same bytes, new mtime
    assert converted_folder("smollm2") == first
    assert len(conversions) == 1 and len(hashes) == 2   # hashed again, not converted again


def test_new_content_replaces_the_old_copy(fake):
    gguf, conversions, _ = fake
    first = converted_folder("smollm2")
    gguf.write_bytes(b"GGUF v2 weights")
    second = converted_folder("smollm2")
    assert second != first and (second / "config.json").read_bytes() == b"GGUF v2 weights"
    assert not first.exists()                            # one copy kept
    assert [p.name for p in (cache_dir() / "models").iterdir()] == [second.name]
    assert len(conversions) == 2


def test_the_key_follows_the_conversion_format(fake, monkeypatch):
    first = converted_folder("smollm2")
    monkeypatch.setattr(hf_model, "CONVERSION_FORMAT", hf_model.CONVERSION_FORMAT + 1)
    assert converted_folder("smollm2") != first and not first.exists()


def test_a_failed_conversion_keeps_the_old_copy_and_no_temporary(fake, monkeypatch):
    gguf, _, _ = fake
    first = converted_folder("smollm2")
    gguf.write_bytes(b"GGUF v2 weights")

    def broken(path, out):
        (out / "partial").write_bytes(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(hf_model, "_convert", broken)
    with pytest.raises(OSError, match="disk full"):
        converted_folder("smollm2")
    assert [p.name for p in (cache_dir() / "models").iterdir()] == [first.name]


def test_copies_from_before_content_keys_are_removed(fake):
    """The mtime-keyed entries earlier versions wrote (one per reinstall) go once a
    conversion succeeds; other models' entries stay."""
    models = cache_dir() / "models"
    for old in ("smollm2-294ee8882049", "smollm2-58776e65217c"):
        (models / old).mkdir(parents=True)
        (models / old / "config.json").write_text("{}")
    (models / "other-0123456789ab").mkdir()
    kept = converted_folder("smollm2")
    assert sorted(p.name for p in models.iterdir()) == sorted([kept.name, "other-0123456789ab"])


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    for variable in ("GRAMGEN_CACHE_DIR", "GRAMGEN_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "gramgen"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "gramgen"
    monkeypatch.setenv("GRAMGEN_CACHE", str(tmp_path / "old-name"))
    assert cache_dir() == tmp_path / "old-name"
    monkeypatch.setenv("GRAMGEN_CACHE_DIR", str(tmp_path / "g"))
    assert cache_dir() == tmp_path / "g"


def test_clear_cache(fake):
    first = converted_folder("smollm2")
    removed = clear_cache("smollm2")
    assert removed == [first] and not first.exists()
    converted_folder("smollm2")
    removed = clear_cache()
    assert not (cache_dir() / "models").exists() or not list((cache_dir() / "models").iterdir())
    assert cache_dir() / hf_model._DIGESTS in removed
    with pytest.raises(gramgen.ConfigurationError, match="known model names are smollm2"):
        clear_cache("gpt5")


@pytest.mark.parametrize("device", ["tpu9", "cuda:99", "meta", 3.5])
def test_load_model_names_the_bad_device(fake, device):
    with pytest.raises(gramgen.ConfigurationError, match=r"device=.*use one of cpu"):
        gramgen.load_model("smollm2", device=device)
    _, conversions, _ = fake
    assert not conversions   # refused before converting anything


@pytest.mark.parametrize("dtype", ["float99", "int8", 5])
def test_load_model_names_the_bad_dtype(fake, dtype):
    with pytest.raises(gramgen.ConfigurationError, match="dtype="):
        gramgen.load_model("smollm2", device="cpu", dtype=dtype)


def test_load_model_rejects_a_non_path(fake):
    with pytest.raises(gramgen.ConfigurationError, match="model name"):
        gramgen.load_model(None)
