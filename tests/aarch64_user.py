"""Runs a static aarch64 Linux program on any host, on the Unicorn CPU emulator (PyPI ``unicorn``).

Just enough of Linux for a small, single-threaded test program linked statically against musl
(``python -m ziglang cc -target aarch64-linux-musl -static``): its PT_LOAD segments mapped, a
process stack with argv, envp and the auxiliary vector musl's start-up reads (page size,
program headers, hardware capabilities, random bytes), and the system calls such a program
makes (``brk``/``mmap`` for malloc, ``write``/``writev`` for stdio, ``exit_group``); anything else
answers ``-ENOSYS``.  Nothing of the host is reachable from the program.  Used by
tests/test_neon_kernels.py to execute the NEON kernels where neither an aarch64 machine nor qemu
is at hand (CI)."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import List

PAGE = 4096
_STACK_TOP, _STACK_SIZE = 0x7FFF_0000_0000, 8 << 20
_MMAP_BASE = 0x7000_0000_0000
_ENOSYS, _ENOTTY, _EBADF, _EINVAL = 38, 25, 9, 22
#: AT_HWCAP bits: FP, ASIMD (NEON)
_HWCAP = 0b11


@dataclass
class Run:
    """What the program did: its exit status, its standard output and error, and the numbers of
    the system calls it made that this runner does not provide."""

    status: int
    stdout: str
    stderr: str
    unsupported: List[int] = field(default_factory=list)


def _up(n: int) -> int:
    return (n + PAGE - 1) // PAGE * PAGE


def run(path: str, argv0: str = "program", cpu: str = "A53", timeout_s: float = 300.0) -> Run:
    """Run the static aarch64 ELF program at ``path`` on an emulated Cortex-``cpu`` (A53, A57,
    A72) and return what it did.  Raises ``ValueError`` for a file that is not a static aarch64
    executable, ``RuntimeError`` when the emulation stops on a fault or the program has not
    exited after ``timeout_s`` seconds."""
    from unicorn import UC_ARCH_ARM64, UC_HOOK_INTR, UC_MODE_ARM, Uc, UcError
    from unicorn import arm64_const as a

    image = Path(path).read_bytes()
    if image[:4] != b"\x7fELF" or image[4] != 2 or struct.unpack_from("<H", image, 18)[0] != 183:
        raise ValueError(f"{path}: not a 64-bit aarch64 ELF file")
    e_type, _, _, entry, phoff = struct.unpack_from("<HHIQQ", image, 16)
    phentsize, phnum = struct.unpack_from("<HH", image, 54)
    if e_type != 2:
        raise ValueError(f"{path}: not a static executable (e_type {e_type}, expected 2)")
    uc = Uc(UC_ARCH_ARM64, UC_MODE_ARM)
    uc.ctl_set_cpu_model(getattr(a, f"UC_CPU_ARM64_{cpu.upper()}"))
    brk = phdr_addr = 0
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz, p_memsz, _ = struct.unpack_from("<IIQQQQQQ", image, phoff + i * phentsize)
        if p_type == 6:  # PT_PHDR
            phdr_addr = p_vaddr
        if p_type != 1:  # PT_LOAD
            continue
        start, end = p_vaddr // PAGE * PAGE, _up(p_vaddr + p_memsz)
        for page in range(start, end, PAGE):  # segments may share a page
            try:
                uc.mem_map(page, PAGE)
            except UcError:
                pass
        uc.mem_write(p_vaddr, image[p_offset:p_offset + p_filesz])
        if p_offset == 0:
            phdr_addr = phdr_addr or p_vaddr + phoff
        brk = max(brk, end)
    heap = {"start": brk, "end": brk, "mmap": _MMAP_BASE}
    uc.mem_map(_STACK_TOP - _STACK_SIZE, _STACK_SIZE)

    # the process stack: argc, argv, envp (empty), auxv; then the strings and random bytes
    sp = _STACK_TOP - 256
    name_at, random_at = sp, sp + 128
    uc.mem_write(name_at, argv0.encode()[:120] + b"\0")
    uc.mem_write(random_at, bytes(range(16)))
    auxv = [(6, PAGE), (3, phdr_addr), (4, phentsize), (5, phnum), (9, entry), (16, _HWCAP), (25, random_at),
            (11, 0), (12, 0), (13, 0), (14, 0), (23, 0), (0, 0)]
    words = [1, name_at, 0, 0] + [x for pair in auxv for x in pair]
    sp = (sp - 8 * len(words) - 64) // 16 * 16
    uc.mem_write(sp, struct.pack(f"<{len(words)}Q", *words))
    uc.reg_write(a.UC_ARM64_REG_SP, sp)
    uc.reg_write(a.UC_ARM64_REG_CPACR_EL1, 3 << 20)  # FP and SIMD on at EL0 and EL1

    out = {1: bytearray(), 2: bytearray()}
    result = Run(status=-1, stdout="", stderr="")

    def syscall(uc, intno, _):
        if intno != 2:  # not an SVC: a fault
            uc.emu_stop()
            raise RuntimeError(f"exception {intno} at pc {uc.reg_read(a.UC_ARM64_REG_PC):#x}")
        nr = uc.reg_read(a.UC_ARM64_REG_X8)
        x = [uc.reg_read(getattr(a, f"UC_ARM64_REG_X{i}")) for i in range(6)]
        ret = 0
        if nr in (93, 94):  # exit, exit_group
            result.status = x[0] & 0xFF
            uc.emu_stop()
            return
        if nr == 64:  # write
            ret = _write(out, x[0], bytes(uc.mem_read(x[1], x[2])))
        elif nr == 66:  # writev
            ret = 0
            for i in range(x[2]):
                base, length = struct.unpack("<QQ", uc.mem_read(x[1] + 16 * i, 16))
                n = _write(out, x[0], bytes(uc.mem_read(base, length)))
                if n < 0:
                    ret = n
                    break
                ret += n
        elif nr == 214:  # brk
            want = x[0]
            if want > heap["end"]:
                uc.mem_map(heap["end"], _up(want) - heap["end"])
                heap["end"] = _up(want)
            ret = max(want, heap["start"]) if want else heap["start"]
        elif nr == 222:  # mmap: anonymous memory only (MAP_ANONYMOUS), never at a given address
            if not x[3] & 0x20:
                ret = -_ENOSYS
            else:
                ret, length = heap["mmap"], _up(x[1])
                uc.mem_map(ret, length)
                heap["mmap"] += length + PAGE
        elif nr == 215:  # munmap
            try:
                uc.mem_unmap(x[0], _up(x[1]))
            except UcError:
                ret = -_EINVAL
        elif nr == 29:  # ioctl (isatty)
            ret = -_ENOTTY
        elif nr in (226, 233, 134, 135):  # mprotect, madvise, rt_sigaction, rt_sigprocmask
            ret = 0
        elif nr == 96:  # set_tid_address
            ret = 1
        else:
            result.unsupported.append(nr)
            ret = -_ENOSYS
        uc.reg_write(a.UC_ARM64_REG_X0, ret & 0xFFFFFFFFFFFFFFFF)

    uc.hook_add(UC_HOOK_INTR, syscall)
    try:
        uc.emu_start(entry, 0, timeout=int(timeout_s * 1e6))
    except UcError as e:
        raise RuntimeError(f"{path}: emulation stopped at pc {uc.reg_read(a.UC_ARM64_REG_PC):#x}: {e}") from e
    if result.status < 0:
        raise RuntimeError(f"{path}: still running after {timeout_s:g} s (pc {uc.reg_read(a.UC_ARM64_REG_PC):#x})")
    result.stdout, result.stderr = out[1].decode(errors="replace"), out[2].decode(errors="replace")
    return result


def _write(out, fd: int, data: bytes) -> int:
    if fd not in out:
        return -_EBADF
    out[fd] += data
    return len(data)
