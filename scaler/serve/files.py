"""Files under ``--state-dir``, opened through a directory descriptor and never through a link (issue 40, item 12).

``StateDir`` opens its directory once (``O_DIRECTORY``) and every file in it relative to that descriptor with
``O_NOFOLLOW``: a symlink planted in place of a document or its ``.tmp`` (the attack: forescale's next write went
to a file outside the state dir) is never followed. An atomic write removes whatever sits at ``<name>.tmp`` (a link
is removed, not its target), creates it with ``O_EXCL`` (mode 0600) and renames it over the name (a rename replaces
a link, never writes through it). Reads take regular files only, opened non-blocking (a FIFO does not block), checked
with ``fstat`` before any byte, up to a size cap. ``sign``/``verify``: an HMAC-SHA256 of a document's bytes with the
scaler's state key (``load_key``: a file, e.g. a mounted Secret; generated in the state dir when absent).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
KEY_BYTES = 32
KEY_FILE = ".state-key"  # the generated key's name under --state-dir (when --state-key-file is not given)


class StateDir:
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def write_atomic(self, name: str, data: bytes) -> None:
        tmp = name + ".tmp"
        self.unlink(tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600, dir_fd=self.fd)
        try:
            with os.fdopen(fd, "wb", closefd=True) as f:
                fd = -1
                f.write(data)
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except OSError:
            if fd >= 0:
                os.close(fd)
            self.unlink(tmp)
            raise

    def append(self, name: str, data: bytes) -> int:
        """Append ``data`` to a regular file (created 0600); returns the file's size before."""
        fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW | os.O_NONBLOCK, 0o600, dir_fd=self.fd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(f"{name}: not a regular file")
            os.write(fd, data)
            return st.st_size
        finally:
            os.close(fd)

    def read(self, name: str, max_bytes: int) -> bytes:
        """A regular file's bytes (FileNotFoundError, OSError; ValueError: not regular, or over ``max_bytes``)."""
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW, dir_fd=self.fd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ValueError("not a regular file")
            if st.st_size > max_bytes:
                raise ValueError(f"{st.st_size} bytes, over the {max_bytes} it may hold")
            chunks, left = [], max_bytes + 1
            while left > 0:
                b = os.read(fd, min(left, 1 << 16))
                if not b:
                    break
                chunks.append(b)
                left -= len(b)
            data = b"".join(chunks)
            if len(data) > max_bytes:
                raise ValueError(f"over the {max_bytes} bytes it may hold")
            return data
        finally:
            os.close(fd)

    def size(self, name: str) -> int:
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_size
        except FileNotFoundError:
            return 0

    def mtime(self, name: str) -> float:
        """When the file was last written (OSError: gone)."""
        return os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_mtime

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def unlink(self, name: str) -> None:
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass

    def names(self) -> list[str]:
        return os.listdir(self.fd)


def load_key(path: str | os.PathLike | None, state_dir: str | os.PathLike) -> bytes:
    """The state key: the file at ``path`` (its bytes, at least 16), else ``<state_dir>/.state-key`` (made with
    32 random bytes, mode 0600, when absent). OSError/ValueError name the file and what is accepted."""
    if path is not None:
        try:
            key = Path(path).read_bytes().strip()
        except OSError as e:
            raise OSError(f"--state-key-file: cannot read {path}: {e.strerror}") from None
        if len(key) < 16:
            raise ValueError(f"--state-key-file {path}: {len(key)} bytes; accepted at least 16 (e.g. 32 random bytes)")
        return key
    d = StateDir(state_dir)
    try:
        try:
            return d.read(KEY_FILE, 4096)
        except FileNotFoundError:
            key = secrets.token_bytes(KEY_BYTES)
            fd = os.open(KEY_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600, dir_fd=d.fd)
            with os.fdopen(fd, "wb") as f:
                f.write(key)
            return key
    finally:
        d.close()


def sign(key: bytes, data: bytes) -> str:
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def verify(key: bytes, data: bytes, mac: object) -> bool:
    return isinstance(mac, str) and hmac.compare_digest(sign(key, data), mac)
