"""Page-cache facts about one file: how much of it is resident, and eviction.

``resident_fraction`` asks the kernel with ``mincore(2)`` over a fresh
read-only mapping of the file (Linux and most Unixes; ``None`` where it cannot
be asked). ``evict`` flushes dirty pages (``fsync``) and then advises
``POSIX_FADV_DONTNEED``, which drops the file's clean, unmapped pages; it needs
no privilege, but pages that some process still maps (or that are dirty on a
filesystem that ignores the advice) stay. Callers verify with
``resident_fraction`` and report whether the eviction took.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from dataclasses import dataclass

_PAGE = mmap.PAGESIZE
_libc = None


def _load_libc():
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c")
        lib = ctypes.CDLL(name, use_errno=True)
        lib.mmap.restype = ctypes.c_void_p
        lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        lib.munmap.restype = ctypes.c_int
        lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.mincore.restype = ctypes.c_int
        lib.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        _libc = lib
    return _libc


def resident_fraction(path: str | os.PathLike) -> float | None:
    """Fraction of the file's pages in the page cache (0..1), or None if unknown."""
    try:
        lib = _load_libc()
    except (OSError, AttributeError):
        return None
    size = os.path.getsize(path)
    if size == 0:
        return 1.0
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = lib.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            return None
        try:
            pages = (size + _PAGE - 1) // _PAGE
            vec = (ctypes.c_ubyte * pages)()
            if lib.mincore(addr, size, vec) != 0:
                return None
            resident = sum(b & 1 for b in bytes(vec))
            return resident / pages
        finally:
            lib.munmap(addr, size)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Eviction:
    requested: bool
    supported: bool
    resident_before: float | None
    resident_after: float | None

    @property
    def evicted(self) -> bool:
        """True when the file is (almost) out of the page cache afterwards."""
        return self.resident_after is not None and self.resident_after <= 0.02

    def as_dict(self) -> dict:
        return {"requested": self.requested, "supported": self.supported, "evicted": self.evicted,
                "resident_before": self.resident_before, "resident_after": self.resident_after,
                "method": "fsync + posix_fadvise(POSIX_FADV_DONTNEED)" if self.requested else None}


def evict(path: str | os.PathLike, requested: bool = True) -> Eviction:
    """Drop ``path`` from the page cache where the OS allows; report what happened."""
    before = resident_fraction(path)
    supported = hasattr(os, "posix_fadvise") and hasattr(os, "POSIX_FADV_DONTNEED")
    if not requested or not supported:
        return Eviction(requested, supported, before, before)
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            os.fsync(fd)
        except OSError:
            pass
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:
            supported = False
    finally:
        os.close(fd)
    return Eviction(requested, supported, before, resident_fraction(path))
