"""State files are signed and written without following links (issue 40, item 12): a forged document is not
adopted, a symlink planted at ``<name>.tmp`` or at the document itself never makes forescale write outside the
state dir."""

from __future__ import annotations

import json
import os

import pytest

from scaler.serve.files import KEY_FILE, StateDir, load_key
from scaler.serve.state import JsonStore, file_name

DOC = {"fitted_at": 1.0, "model": "naive"}


def test_a_forged_document_is_refused_and_a_signed_one_read(tmp_path):
    store = JsonStore(tmp_path)
    store.save("ns", "so", "m", DOC, version=1, key="k")
    assert store.load("ns", "so", "m", version=1, key="k")["model"] == "naive"
    path = tmp_path / file_name("ns", "so", "m")
    forged = json.loads(path.read_text())
    forged["model"] = "forged"  # the attacker's edit: the key is a digest anyone can compute, the HMAC is not
    path.write_text(json.dumps(forged))
    assert store.load("ns", "so", "m", version=1, key="k") is None
    del forged["hmac"]
    path.write_text(json.dumps(forged))
    assert store.load("ns", "so", "m", version=1, key="k") is None
    other = JsonStore(tmp_path / "other", key=b"another scaler's key, 16+ bytes")  # another key: refused too
    other.dir.write_atomic(file_name("ns", "so", "m"), path.read_bytes())
    assert other.load("ns", "so", "m", version=1, key="k") is None


def test_a_symlinked_tmp_or_document_never_writes_outside(tmp_path):
    state, outside = tmp_path / "state", tmp_path / "victim.txt"
    outside.write_text("precious")
    store = JsonStore(state)
    name = file_name("ns", "so", "m")
    (state / (name + ".tmp")).symlink_to(outside)  # the attack: the next write's temporary file is a link
    store.save("ns", "so", "m", DOC, version=1, key="k")
    assert outside.read_text() == "precious"
    assert not (state / name).is_symlink() and json.loads((state / name).read_text())["model"] == "naive"
    (state / name).unlink()
    (state / name).symlink_to(outside)  # the document itself a link: not read, and replaced (not written through)
    assert store.load("ns", "so", "m", version=1, key="k") is None
    store.save("ns", "so", "m", DOC, version=1, key="k")
    assert outside.read_text() == "precious" and not (state / name).is_symlink()


def test_the_key_comes_from_a_file_or_is_generated_once(tmp_path):
    generated = load_key(None, tmp_path)
    assert len(generated) == 32 and load_key(None, tmp_path) == generated
    assert oct(os.stat(tmp_path / KEY_FILE).st_mode & 0o777) == "0o600"
    secret = tmp_path / "secret"
    secret.write_bytes(b"0123456789abcdef0123\n")
    assert load_key(secret, tmp_path) == b"0123456789abcdef0123"
    secret.write_bytes(b"short")
    with pytest.raises(ValueError, match="accepted at least 16"):
        load_key(secret, tmp_path)


def test_reads_take_regular_files_only(tmp_path):
    d = StateDir(tmp_path)
    os.mkfifo(tmp_path / "fifo.json")
    with pytest.raises(ValueError, match="not a regular file"):
        d.read("fifo.json", 1024)  # at once: a FIFO opened non-blocking
    (tmp_path / "big.json").write_bytes(b"x" * 2048)
    with pytest.raises(ValueError, match="over the 1024"):
        d.read("big.json", 1024)
