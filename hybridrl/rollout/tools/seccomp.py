"""A seccomp filter for the sandbox's child (tools/sandbox.py): the system calls that start processes, reach the
network or reach past the sandbox's namespaces fail with EPERM, whatever Python-level route the code takes
(os.fork, ctypes, a C extension). Built as classic BPF by hand (linux/filter.h, linux/seccomp.h: struct
sock_filter {u16 code; u8 jt; u8 jf; u32 k}, the filter reads struct seccomp_data {int nr; u32 arch; u64 ip;
u64 args[6]}), because no seccomp library is a dependency; x86-64 only (another architecture gets no filter and
is said to, see `available`). Installing it needs no privilege: PR_SET_NO_NEW_PRIVS first, then
PR_SET_SECCOMP (prctl(2), seccomp(2)).

Threads stay possible (clone with CLONE_THREAD: Python and some libraries start them); clone3, whose flags a
BPF filter cannot read, answers ENOSYS, which makes glibc fall back to clone."""

from __future__ import annotations

import platform
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
CLONE_THREAD = 0x00010000
EPERM, ENOSYS = 1, 38
RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000

# x86-64 numbers (arch/x86/entry/syscalls/syscall_64.tbl)
BLOCKED = {
    "fork": 57, "vfork": 58, "execveat": 322, "socket": 41, "socketpair": 53, "ptrace": 101,
    "process_vm_readv": 310, "process_vm_writev": 311, "mount": 165, "umount2": 166, "pivot_root": 155,
    "chroot": 161, "unshare": 272, "setns": 308, "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321,
    "perf_event_open": 298, "userfaultfd": 323, "kexec_load": 246, "init_module": 175, "finit_module": 313,
    "delete_module": 176, "open_by_handle_at": 304, "personality": 135,
}
CLONE, CLONE3 = 56, 435

# classic BPF opcodes
LD_W_ABS, JEQ_K, JGE_K, AND_K, RET_K = 0x20, 0x15, 0x35, 0x54, 0x06
NR, ARCH, ARG0 = 0, 4, 16  # offsets in struct seccomp_data (args[0]'s low 32 bits on little-endian)


def available() -> bool:
    return platform.system() == "Linux" and platform.machine() in ("x86_64", "AMD64")


def program() -> bytes:
    """The filter, as the bytes of its struct sock_filter array."""
    # (code, jump-if-true label, jump-if-false label, k); labels resolve to relative offsets below
    ops: list[tuple] = [
        (LD_W_ABS, None, None, ARCH),
        (JEQ_K, None, "allow", AUDIT_ARCH_X86_64),  # another ABI's numbers would mean other calls: let it be
        (LD_W_ABS, None, None, NR),
        (JGE_K, "deny", None, X32_SYSCALL_BIT),  # the x32 ABI's aliases of the same calls
    ]
    for nr in sorted(BLOCKED.values()):
        ops.append((JEQ_K, "deny", None, nr))
    ops += [
        (JEQ_K, "enosys", None, CLONE3),
        (JEQ_K, None, "allow", CLONE),
        (LD_W_ABS, None, None, ARG0),  # clone's flags
        (AND_K, None, None, CLONE_THREAD),
        (JEQ_K, "allow", "deny", CLONE_THREAD),  # a thread, not a process
        ("allow", RET_K, RET_ALLOW),
        ("deny", RET_K, RET_ERRNO | EPERM),
        ("enosys", RET_K, RET_ERRNO | ENOSYS),
    ]
    labels = {op[0]: i for i, op in enumerate(ops) if isinstance(op[0], str)}
    out = bytearray()
    for i, op in enumerate(ops):
        if isinstance(op[0], str):
            code, jt, jf, k = op[1], 0, 0, op[2]
        else:
            code, jt, jf, k = op[0], _offset(labels, op[1], i), _offset(labels, op[2], i), op[3]
        out += struct.pack("=HBBI", code, jt, jf, k)
    return bytes(out)


def _offset(labels: dict[str, int], label, i: int) -> int:
    """Instructions to skip from instruction i to `label` (None: the next instruction)."""
    return 0 if label is None else labels[label] - i - 1


# Runs in the child before the user's code (tools/sandbox.py's bootstrap): the filter's bytes come in as hex.
INSTALL = r"""
def _install_seccomp(hexed):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
    code = bytes.fromhex(hexed)
    prog = Prog(len(code) // 8, code)
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:  # NO_NEW_PRIVS, SECCOMP
        raise OSError(ctypes.get_errno(), "sandbox: seccomp could not be installed")
"""
