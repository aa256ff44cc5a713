"""Where a running process has a few exported functions, from /proc/PID/maps and the mapped files' ELF .dynsym.

gdb can look the three functions up itself (``sharedlibrary libpython``), but only after it has attached, and a
traced process stays stopped while gdb reads symbols: over a second per rank on a loaded box, during which every
collective peer of that rank waits.  Reading the exported symbol tables here, before gdb attaches, leaves gdb
only the call itself to do while the rank is stopped.

Only ``.dynsym`` (what the dynamic linker uses) is read: it is present in stripped binaries, and CPython exports
``Py_AddPendingCall`` and ``PyRun_SimpleString`` from its executable or libpython so that extension modules link,
as glibc exports ``mmap``.  ELF64 little-endian only (x86-64, aarch64); anything else -> None, and the caller
falls back to gdb's own lookup.
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Iterable
from pathlib import Path

PT_LOAD = 1
SHT_DYNSYM = 11
PAGE_MASK = ~0xFFF


def _mappings(pid: int) -> dict[str, int]:
    """path -> start address of its mapping at file offset 0 (the load base), for every mapped file."""
    bases: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        start = int(parts[0].split("-")[0], 16)
        offset = int(parts[2], 16)
        path = parts[5].removesuffix(" (deleted)")
        if offset == 0 and path not in bases:
            bases[path] = start
    return bases


def _dynsym(data: bytes, wanted: set[str]) -> tuple[dict[str, int], int] | None:
    """(symbol -> st_value, lowest PT_LOAD vaddr) of ``wanted`` in an ELF64 LE file, or None."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 0x36)
    loads = []
    for i in range(phnum):
        p_type, _flags, p_offset, p_vaddr = struct.unpack_from("<IIQQ", data, phoff + i * phentsize)
        if p_type == PT_LOAD:
            loads.append((p_offset, p_vaddr))
    if not loads:
        return None
    first_vaddr = min(vaddr - offset for offset, vaddr in loads) & PAGE_MASK
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    found: dict[str, int] = {}
    for _name, sh_type, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if sh_type != SHT_DYNSYM or not entsize:
            continue
        strtab_offset = sections[link][4]
        for at in range(offset, offset + size, entsize):
            st_name, _st_info, _other, shndx, value, _size = struct.unpack_from("<IBBHQQ", data, at)
            if not shndx or not value:
                continue  # undefined here (imported from another object)
            end = data.index(b"\0", strtab_offset + st_name)
            name = data[strtab_offset + st_name : end].decode(errors="replace")
            if name in wanted:
                found[name] = value
    return found, first_vaddr


MAX_OBJECT_BYTES = 512 * 1024 * 1024  # libpython and libc are some MB; torch's libraries are never read


def _read(path: str) -> bytes:
    """A mapped object's bytes: a regular file only, opened without blocking (a FIFO put where a deleted file
    was would otherwise hang the adopter for good), at most :data:`MAX_OBJECT_BYTES`."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read(MAX_OBJECT_BYTES)
    finally:
        os.close(fd)


def resolve(pid: int, names: Iterable[str], *, libc_only: Iterable[str] = ()) -> dict[str, int] | None:
    """name -> absolute address in ``pid`` of each of ``names``; None when any cannot be found.  ``libc_only``:
    names taken from glibc only (an allocator or a torch library may export a wrapper of the same name)."""
    from_libc = set(libc_only)
    wanted = set(names) | from_libc
    addresses: dict[str, int] = {}
    try:
        bases = _mappings(pid)
    except OSError:
        return None
    try:
        exe = os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)")
    except OSError:
        exe = ""
    for path, base in bases.items():
        if not wanted - set(addresses):
            break
        name = os.path.basename(path)
        is_libc = name.startswith(("libc.so", "libc-"))
        # only where the functions live: the interpreter or libpython, and glibc (a torch rank maps gigabytes
        # of other libraries, and reading those took seconds per rank)
        if not (is_libc or path == exe or name.startswith("libpython")):
            continue
        looking = wanted - set(addresses)
        if not is_libc:
            looking -= from_libc
        if not looking:
            continue
        try:
            # the executable: the file the process runs (its path may hold something else by now, see _read);
            # a library through the process's own root: the path in its maps is the path in its mount namespace
            data = _read(f"/proc/{pid}/exe" if path == exe else f"/proc/{pid}/root{path}")
            parsed = _dynsym(data, looking)
        except (OSError, struct.error, ValueError, IndexError):
            continue
        if parsed is None:
            continue
        symbols, first_vaddr = parsed
        for name, value in symbols.items():
            addresses[name] = base - first_vaddr + value
    return addresses if set(addresses) == wanted else None
