"""The seccomp program itself: its syscall numbers and every decision it makes.

The kernel runs it in the attack tests (test_sandbox_kernel_attacks.py); here a small classic
BPF interpreter walks it for inputs the kernel tests cannot produce from Python, such as an
i386 call on x86_64 or an x32 number, and for aarch64, which this machine is not.
"""

from __future__ import annotations

import errno
import re
import struct
from pathlib import Path

import pytest

from sandbox.seccomp import (
    AARCH64,
    ALLOWED_PERSONAS,
    CLONE_NAMESPACES,
    CLONE_NEWTIME,
    DENIED_SYSCALLS,
    SECCOMP_RET_ALLOW,
    SECCOMP_RET_ERRNO,
    SECCOMP_RET_KILL_PROCESS,
    SOCK_FILTER,
    X86_64,
    Architecture,
    build_filter,
    filter_for_this_machine,
)
from tests.layers import skip_missing_layer

EPERM = SECCOMP_RET_ERRNO | errno.EPERM
ENOSYS = SECCOMP_RET_ERRNO | errno.ENOSYS
AUDIT_ARCH_I386 = 0x40000003
AUDIT_ARCH_ARM = 0x40000028
CLONE_NEWUSER = 0x10000000
# What glibc passes to clone for a thread and for fork.
THREAD_FLAGS = 0x3D0F00  # CLONE_VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|SETTLS|PARENT/CHILD_*TID
FORK_FLAGS = 0x01200011  # CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD
HEADERS = {
    "x86_64": (Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"), r"__NR_(\w+)"),
    "aarch64": (Path("/usr/include/asm-generic/unistd.h"), r"__NR(?:3264)?_(\w+)"),
}


def run_filter(program: bytes, arch: int, nr: int, *args: int) -> int:
    """Evaluate a classic BPF seccomp program the way the kernel does, for one call."""
    padded = [*args, 0, 0, 0, 0, 0, 0][:6]
    data = struct.pack("<IIQ6Q", nr & 0xFFFFFFFF, arch, 0, *padded)
    instructions = [SOCK_FILTER.unpack_from(program, at) for at in range(0, len(program), 8)]
    accumulator = 0
    pc = 0
    while True:
        code, jt, jf, k = instructions[pc]
        pc += 1
        if code == 0x20:  # ld [k]
            (accumulator,) = struct.unpack_from("<I", data, k)
        elif code == 0x06:  # ret k
            return int(k)
        elif code in (0x15, 0x35, 0x45):
            taken = {
                0x15: accumulator == k,
                0x35: accumulator >= k,
                0x45: accumulator & k != 0,
            }[code]
            pc += jt if taken else jf
        else:
            raise AssertionError(f"unexpected instruction {code:#x}")


@pytest.mark.parametrize("architecture", [X86_64, AARCH64], ids=lambda a: a.name)
def test_every_denied_call_gets_eperm_and_the_rest_is_allowed(architecture: Architecture) -> None:
    program = build_filter(architecture)
    arch = architecture.audit_arch
    denied = {
        architecture.syscalls[name] for name in DENIED_SYSCALLS if name in architecture.syscalls
    }
    assert len(denied) >= 50
    for name in DENIED_SYSCALLS:
        if name in architecture.syscalls:
            assert run_filter(program, arch, architecture.syscalls[name]) == EPERM, name
    filtered = {architecture.syscalls[name] for name in ("clone", "unshare", "clone3")}
    for nr in range(0, 460):
        if nr not in denied | filtered | {architecture.syscalls["personality"]}:
            assert run_filter(program, arch, nr, 0x12345678) == SECCOMP_RET_ALLOW, nr


@pytest.mark.parametrize("architecture", [X86_64, AARCH64], ids=lambda a: a.name)
def test_new_namespaces_are_refused_threads_and_fork_are_not(architecture: Architecture) -> None:
    program = build_filter(architecture)
    arch, numbers = architecture.audit_arch, architecture.syscalls
    clone, unshare = numbers["clone"], numbers["unshare"]
    assert run_filter(program, arch, clone, THREAD_FLAGS) == SECCOMP_RET_ALLOW
    assert run_filter(program, arch, clone, FORK_FLAGS) == SECCOMP_RET_ALLOW
    # The exit signal lives in clone's low byte; SIGCHLD | 0x80 is no CLONE_NEWTIME there.
    assert run_filter(program, arch, clone, 0x80 | 17) == SECCOMP_RET_ALLOW
    for bit in range(32):
        flag = 1 << bit
        if flag & CLONE_NAMESPACES:
            assert run_filter(program, arch, clone, FORK_FLAGS | flag) == EPERM, hex(flag)
            assert run_filter(program, arch, unshare, flag) == EPERM, hex(flag)
    assert run_filter(program, arch, clone, CLONE_NEWUSER | (1 << 40)) == EPERM
    assert run_filter(program, arch, unshare, CLONE_NEWTIME) == EPERM
    assert run_filter(program, arch, unshare, 0x400) == SECCOMP_RET_ALLOW  # CLONE_FILES
    assert run_filter(program, arch, numbers["clone3"], 0) == ENOSYS


@pytest.mark.parametrize("architecture", [X86_64, AARCH64], ids=lambda a: a.name)
def test_personality_only_for_harmless_personas(architecture: Architecture) -> None:
    program = build_filter(architecture)
    personality = architecture.syscalls["personality"]
    for persona in ALLOWED_PERSONAS:
        assert run_filter(program, architecture.audit_arch, personality, persona) == (
            SECCOMP_RET_ALLOW
        )
    add_no_randomize = 0x0040000
    assert run_filter(program, architecture.audit_arch, personality, add_no_randomize) == EPERM


def test_other_abis_are_killed_and_x32_numbers_refused() -> None:
    x86 = build_filter(X86_64)
    # int 0x80 from a 64-bit process: i386 numbering, where 26 is ptrace.
    assert run_filter(x86, AUDIT_ARCH_I386, 26) == SECCOMP_RET_KILL_PROCESS
    assert run_filter(x86, AUDIT_ARCH_I386, 0) == SECCOMP_RET_KILL_PROCESS
    x32_ptrace = 0x40000000 | 521
    assert run_filter(x86, X86_64.audit_arch, x32_ptrace) == ENOSYS
    assert run_filter(x86, X86_64.audit_arch, 0x40000000) == ENOSYS
    arm = build_filter(AARCH64)
    assert run_filter(arm, AUDIT_ARCH_ARM, 26) == SECCOMP_RET_KILL_PROCESS
    assert run_filter(arm, X86_64.audit_arch, 0) == SECCOMP_RET_KILL_PROCESS


@pytest.mark.parametrize("architecture", [X86_64, AARCH64], ids=lambda a: a.name)
def test_syscall_numbers_match_the_kernel_headers(architecture: Architecture) -> None:
    header, pattern = HEADERS[architecture.name]
    if not header.exists():
        skip_missing_layer(f"{header} is not installed (Debian: linux-libc-dev)")
    defined = {
        match.group(1): int(match.group(2))
        for match in re.finditer(rf"#define {pattern}\s+(\d+)", header.read_text())
    }
    for name, number in architecture.syscalls.items():
        assert defined.get(name) == number, name


def test_this_machine_has_a_filter() -> None:
    program = filter_for_this_machine()
    assert len(program) % SOCK_FILTER.size == 0 and len(program) // SOCK_FILTER.size < 4096
