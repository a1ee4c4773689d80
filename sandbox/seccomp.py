"""The seccomp filter bubblewrap installs before it starts reward code (`bwrap --seccomp FD`).

What it refuses: system calls reward code never needs and that widen the kernel surface an
attacker can reach from inside the sandbox (see DENIED_SYSCALLS): tracing other processes and
reading their memory, every way to mount or change the root, BPF, the kernel keyring,
perf_event_open, loading kernel modules and kexec, setting or tuning the clocks, swap,
reboot, the kernel log, process accounting, userfaultfd, file handles (the "shocker"
container escape), io_uring, and new namespaces: clone and unshare with any CLONE_NEW* flag
(a nested user namespace hands the code every capability over fresh, reachable kernel code)
and setns. clone3 gets ENOSYS, because its flags sit in memory a filter cannot read; glibc
then falls back to clone, whose flags the filter can check, so threads, fork, subprocess and
asyncio work as before. personality() may only query or set the harmless personas Docker
allows (not, for instance, ADDR_NO_RANDOMIZE, which would turn address randomisation off).
Everything else is allowed: this is a deny list on top of the namespaces, the unprivileged
uid and the rlimits, not an allow list of what Python may do (which breaks with every new
library and glibc release).

Refused calls fail with EPERM (what an unprivileged process gets for most of them anyway), so
code that probes for a feature sees "not permitted" and takes its fallback path, instead of
being killed. Calls from another ABI (i386 via int 0x80 on x86_64, AArch32 on arm64) kill
the process: a deny list keyed on 64-bit numbers would not match them. x32 calls on x86_64
share the x86_64 audit arch but carry bit 30 in the number, so they get ENOSYS.

Why a generator written here rather than libseccomp: the classic BPF program is ~100
instructions of one shape (load, compare, return), simple to produce and to test from Python.
libseccomp would mean libseccomp.so.2 on every worker host plus a Python binding outside the
venv's reach (Debian's python3-seccomp is for the system interpreter; pyseccomp loads the
.so through ctypes and fails where it is missing); compiling C at run time is worse. The
numbers below come from the kernel's uapi headers (x86_64: asm/unistd_64.h; aarch64, like
every newer architecture: asm-generic/unistd.h); a test compares them with the headers where
those are installed.
"""

from __future__ import annotations

import errno
import functools
import platform
import struct
from collections.abc import Mapping
from dataclasses import dataclass

# struct sock_filter { __u16 code; __u8 jt; __u8 jf; __u32 k; }, in the kernel's byte order.
SOCK_FILTER = struct.Struct("=HBBI")
BPF_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS: A = 32-bit word of seccomp_data at k
BPF_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
BPF_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
BPF_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
BPF_RET_K = 0x06  # BPF_RET | BPF_K
MAX_JUMP = 255  # jt and jf are 8-bit forward offsets

# struct seccomp_data { int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]; }
OFFSET_NR = 0
OFFSET_ARCH = 4
OFFSET_ARG0_LOW = 16  # the low 32 bits of args[0] on a little-endian machine

SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000

CLONE_NEWTIME = 0x00000080  # unshare only: in clone's flags this bit is part of the exit signal
CLONE_NAMESPACES = (
    0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
)
# personality() values Docker's default profile allows: PER_LINUX, PER_LINUX32, UNAME26 with
# either, and 0xffffffff, which only queries.
ALLOWED_PERSONAS = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)
X32_SYSCALL_BIT = 0x40000000

# Refused with EPERM wherever the architecture has them (the x86-only ones are old or
# I/O-port calls that have no place on arm64).
DENIED_SYSCALLS = (
    # other processes' memory and execution
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "process_madvise",
    "kcmp",
    # mounts and the root directory, old and new mount API
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    # namespaces (clone, clone3 and unshare are handled by their flags, below)
    "setns",
    # BPF, keys, performance counters
    "bpf",
    "keyctl",
    "add_key",
    "request_key",
    "perf_event_open",
    # kernel modules and kexec
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "create_module",
    "get_kernel_syms",
    "query_module",
    # clocks
    "clock_settime",
    "clock_adjtime",
    "settimeofday",
    "adjtimex",
    # the machine
    "swapon",
    "swapoff",
    "reboot",
    "syslog",
    "acct",
    "quotactl",
    "quotactl_fd",
    "sethostname",
    "setdomainname",
    "vhangup",
    "iopl",
    "ioperm",
    "lookup_dcookie",
    "nfsservctl",
    "uselib",
    "ustat",
    "sysfs",
    "_sysctl",
    "fanotify_init",
    # kernel surfaces with a history of exploits
    "userfaultfd",
    "open_by_handle_at",
    "name_to_handle_at",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
)
FILTERED_SYSCALLS = ("clone", "unshare", "clone3", "personality")

# From 424 on, Linux gives a new syscall the same number on every architecture.
UNIFIED_SYSCALLS: Mapping[str, int] = {
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "clone3": 435,
    "pidfd_getfd": 438,
    "process_madvise": 440,
    "mount_setattr": 442,
    "quotactl_fd": 443,
}

X86_64_SYSCALLS: Mapping[str, int] = {
    "clone": 56,
    "ptrace": 101,
    "syslog": 103,
    "uselib": 134,
    "personality": 135,
    "ustat": 136,
    "sysfs": 139,
    "vhangup": 153,
    "pivot_root": 155,
    "_sysctl": 156,
    "adjtimex": 159,
    "chroot": 161,
    "acct": 163,
    "settimeofday": 164,
    "mount": 165,
    "umount2": 166,
    "swapon": 167,
    "swapoff": 168,
    "reboot": 169,
    "sethostname": 170,
    "setdomainname": 171,
    "iopl": 172,
    "ioperm": 173,
    "create_module": 174,
    "init_module": 175,
    "delete_module": 176,
    "get_kernel_syms": 177,
    "query_module": 178,
    "quotactl": 179,
    "nfsservctl": 180,
    "lookup_dcookie": 212,
    "clock_settime": 227,
    "kexec_load": 246,
    "add_key": 248,
    "request_key": 249,
    "keyctl": 250,
    "unshare": 272,
    "perf_event_open": 298,
    "fanotify_init": 300,
    "name_to_handle_at": 303,
    "open_by_handle_at": 304,
    "clock_adjtime": 305,
    "setns": 308,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "kcmp": 312,
    "finit_module": 313,
    "kexec_file_load": 320,
    "bpf": 321,
    "userfaultfd": 323,
    **UNIFIED_SYSCALLS,
}

# asm-generic numbering, shared by aarch64 and the other newer architectures.
GENERIC_SYSCALLS: Mapping[str, int] = {
    "lookup_dcookie": 18,
    "umount2": 39,
    "mount": 40,
    "pivot_root": 41,
    "nfsservctl": 42,
    "chroot": 51,
    "vhangup": 58,
    "quotactl": 60,
    "acct": 89,
    "personality": 92,
    "unshare": 97,
    "kexec_load": 104,
    "init_module": 105,
    "delete_module": 106,
    "clock_settime": 112,
    "syslog": 116,
    "ptrace": 117,
    "reboot": 142,
    "sethostname": 161,
    "setdomainname": 162,
    "settimeofday": 170,
    "adjtimex": 171,
    "add_key": 217,
    "request_key": 218,
    "keyctl": 219,
    "clone": 220,
    "swapon": 224,
    "swapoff": 225,
    "perf_event_open": 241,
    "fanotify_init": 262,
    "name_to_handle_at": 264,
    "open_by_handle_at": 265,
    "clock_adjtime": 266,
    "setns": 268,
    "process_vm_readv": 270,
    "process_vm_writev": 271,
    "kcmp": 272,
    "finit_module": 273,
    "bpf": 280,
    "userfaultfd": 282,
    "kexec_file_load": 294,
    **UNIFIED_SYSCALLS,
}


@dataclass(frozen=True)
class Architecture:
    name: str
    audit_arch: int  # AUDIT_ARCH_*: what seccomp_data.arch holds for this ABI
    syscalls: Mapping[str, int]
    has_x32: bool = False


X86_64 = Architecture("x86_64", 0xC000003E, X86_64_SYSCALLS, has_x32=True)
AARCH64 = Architecture("aarch64", 0xC00000B7, GENERIC_SYSCALLS)
ARCHITECTURES = {"x86_64": X86_64, "amd64": X86_64, "aarch64": AARCH64, "arm64": AARCH64}


class SeccompUnsupportedError(RuntimeError):
    """No filter is defined for this machine's architecture."""


@dataclass(frozen=True)
class _Jump:
    code: int
    k: int
    if_true: str | None  # a label, or None for the next instruction
    if_false: str | None


@dataclass(frozen=True)
class _Label:
    name: str


_Op = tuple[int, int] | _Jump | _Label  # (code, k) for a load or a return


def _load(offset: int) -> tuple[int, int]:
    return (BPF_LD_W_ABS, offset)


def _ret(action: int) -> tuple[int, int]:
    return (BPF_RET_K, action)


def _assemble(ops: list[_Op]) -> bytes:
    """Resolve labels to the forward offsets classic BPF jumps use; pack the program."""
    positions: dict[str, int] = {}
    index = 0
    for op in ops:
        if isinstance(op, _Label):
            positions[op.name] = index
        else:
            index += 1
    program = bytearray()
    index = 0
    for op in ops:
        if isinstance(op, _Label):
            continue
        if isinstance(op, _Jump):
            offsets = []
            for target in (op.if_true, op.if_false):
                offset = 0 if target is None else positions[target] - index - 1
                if not 0 <= offset <= MAX_JUMP:
                    raise ValueError(f"jump to {target} out of reach ({offset})")
                offsets.append(offset)
            program += SOCK_FILTER.pack(op.code, offsets[0], offsets[1], op.k)
        else:
            code, k = op
            program += SOCK_FILTER.pack(code, 0, 0, k)
        index += 1
    return bytes(program)


def build_filter(architecture: Architecture) -> bytes:
    """The sandbox's filter for `architecture`, as the sock_filter array bwrap reads."""
    numbers = architecture.syscalls
    ops: list[_Op] = [
        _load(OFFSET_ARCH),
        _Jump(BPF_JEQ_K, architecture.audit_arch, None, "kill"),
        _load(OFFSET_NR),
    ]
    if architecture.has_x32:
        ops.append(_Jump(BPF_JGE_K, X32_SYSCALL_BIT, "enosys", None))
    for name in DENIED_SYSCALLS:
        if name in numbers:
            ops.append(_Jump(BPF_JEQ_K, numbers[name], "eperm", None))
    ops += [
        _Jump(BPF_JEQ_K, numbers["clone"], "clone", None),
        _Jump(BPF_JEQ_K, numbers["unshare"], "unshare", None),
        _Jump(BPF_JEQ_K, numbers["clone3"], "enosys", None),
        _Jump(BPF_JEQ_K, numbers["personality"], "personality", None),
        _ret(SECCOMP_RET_ALLOW),
        _Label("clone"),
        _load(OFFSET_ARG0_LOW),  # clone uses only the low 32 bits of its flags
        _Jump(BPF_JSET_K, CLONE_NAMESPACES, "eperm", "allow"),
        _Label("unshare"),
        _load(OFFSET_ARG0_LOW),  # unshare refuses flags in the high bits (EINVAL)
        _Jump(BPF_JSET_K, CLONE_NAMESPACES | CLONE_NEWTIME, "eperm", "allow"),
        _Label("personality"),
        _load(OFFSET_ARG0_LOW),  # personality takes an unsigned int
    ]
    ops += [_Jump(BPF_JEQ_K, persona, "allow", None) for persona in ALLOWED_PERSONAS]
    ops += [
        _Label("eperm"),
        _ret(SECCOMP_RET_ERRNO | errno.EPERM),
        _Label("allow"),
        _ret(SECCOMP_RET_ALLOW),
        _Label("enosys"),
        _ret(SECCOMP_RET_ERRNO | errno.ENOSYS),
        _Label("kill"),
        _ret(SECCOMP_RET_KILL_PROCESS),
    ]
    return _assemble(ops)


@functools.cache
def filter_for_this_machine() -> bytes:
    """The filter for the architecture Python runs on; SeccompUnsupportedError if unknown."""
    machine = platform.machine().lower()
    architecture = ARCHITECTURES.get(machine)
    if architecture is None:
        raise SeccompUnsupportedError(
            f"no seccomp filter is defined for the {machine!r} architecture (only x86_64 and "
            "aarch64); add its syscall numbers to sandbox/seccomp.py"
        )
    return build_filter(architecture)
