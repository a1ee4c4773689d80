"""The command line that starts a sandbox child, with or without bubblewrap.

With isolation="bwrap" and a root worker (the normal deployment), the layers are:

1. bubblewrap, run as root *without* a user namespace, unshares the pid, ipc, uts, cgroup
   and network namespaces (always: a job that asks for the network gets an egress proxy's unix
   socket bound in, sandbox/egress.py, never the host's network), and builds a new root from a
   few read-only binds: the interpreter prefix at /opt/python (with its site-packages hidden),
   /usr/lib, /usr/lib64, /usr/bin, a handful of /etc files, the child programs' folder
   (sandbox/child/, at /opt/rft/child), the job's package directories; plus a fresh /proc, a
   minimal /dev and a size-limited private /tmp. Nothing else of the host exists inside: no
   /run, no host /tmp, no sockets, no /etc/shadow.
   The interpreter runs as an empty virtual environment at /opt/rft/python (symlinks and a
   pyvenv.cfg): `python`, `python3` and `sys.executable` are that one interpreter, first on
   PATH, for the child and for every process it starts (`python -m pytest`), none of which
   sees a site-packages; the job's packages reach them through PYTHONPATH.
2. bubblewrap keeps only CAP_SETUID/CAP_SETGID/CAP_SETPCAP for its command, which is
   `setpriv`: it switches to a real unprivileged host uid (one per child, leased from a
   range by sandbox/uids.py, so per-uid limits are never shared), clears the groups, the bounding
   and inheritable capability sets and sets no_new_privs before exec'ing Python.
3. bubblewrap installs a seccomp filter (sandbox/seccomp.py) just before it execs setpriv:
   ptrace, mounts, BPF, keyrings, perf, kernel modules, clock changes, new namespaces and a
   few more calls reward code never needs fail with EPERM, for the whole tree.
4. The child applies hard rlimits (memory, CPU, processes, open files, file size) before
   any user code runs; as an unprivileged uid it cannot raise them again.
5. Where the host offers cgroups, the tree starts inside a cgroup of its own (sandbox/
   cgroups.py) whose memory and pids limits count all its processes together, which
   per-process and per-uid rlimits cannot.

Why not `--unshare-all`: it implies a user namespace, and a root-created user namespace maps
only uid 0, so the code could not drop to an unprivileged uid; mapping 65534 inside while
staying root outside leaked /etc/shadow and ignored RLIMIT_NPROC (docs/measured-facts.md).
A non-root worker uses `--unshare-all --cap-drop ALL` directly: it is unprivileged already.

Secrets never appear on a command line or in bubblewrap's own environment: the child gets
the job's environment in its first frame, over the pipe.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sandbox.cgroups import (
    CgroupHost,
    CgroupLimits,
    CgroupUnavailableError,
    SandboxCgroup,
    cgroup_host_for,
)
from sandbox.seccomp import SeccompUnsupportedError, filter_for_this_machine
from sandbox.settings import SandboxSettings

# The programs that run inside the sandbox and their runtime (sandbox/child/), bound whole; the
# interpreter runs start.py there, which imports the program named after it.
CHILD_FOLDER = Path(__file__).with_name("child")
CHILD_START = CHILD_FOLDER / "start.py"
REWARD_CHILD = "reward_child"
AGENT_CHILD = "agent_child"
INSIDE_PYTHON_PREFIX = "/opt/python"
INSIDE_CHILD_FOLDER = "/opt/rft/child"
INSIDE_PACKAGES = "/opt/rft/packages"
# The sandbox's interpreter, as a virtual environment without packages of its own.
INSIDE_VENV = "/opt/rft/python"
# The egress proxy's socket (allow_network), bound read-only: connect() needs no write access
# to the mount, only to the socket, which belongs to the sandbox's uid.
INSIDE_EGRESS_SOCKET = "/opt/rft/egress.sock"
# What user code calls it by: each is a symlink in the environment's bin, first on PATH.
PYTHON_NAMES = ("python", "python3", f"python{sys.version_info.major}.{sys.version_info.minor}")
SEARCH_PATH = "/usr/local/bin:/usr/bin:/bin"
# Files under /etc that ordinary Python code reads; everything else there stays out.
ETC_FILES = ("ld.so.cache", "localtime", "mime.types")
NETWORK_ETC_FILES = ("resolv.conf", "hosts", "nsswitch.conf", "host.conf", "services", "ssl")
SANDBOX_PASSWD = "root:x:0:0::/:/usr/sbin/nologin\nsandbox:x:{uid}:{uid}::/tmp:/usr/sbin/nologin\n"
SANDBOX_GROUP = "root:x:0:\nsandbox:x:{uid}:\n"


class SandboxUnavailableError(RuntimeError):
    """The requested isolation cannot be set up on this machine."""


@dataclass(frozen=True)
class LaunchPlan:
    argv: list[str]
    env: dict[str, str]  # the environment of the first process (bwrap, or the child itself)
    data_files: dict[str, str]  # inside path -> content, handed to bwrap through pipes
    uses_bwrap: bool
    seccomp_filter: bytes | None = None  # compiled BPF, handed to bwrap through a pipe
    # Where to create the tree's cgroup and its limits; None: rlimits only.
    cgroup: tuple[CgroupHost, CgroupLimits] | None = None


@dataclass(frozen=True)
class IsolationCheck:
    available: bool
    reason: str

    def __bool__(self) -> bool:
        return self.available


def child_limits(settings: SandboxSettings) -> dict[str, int]:
    limits = {
        "memory_bytes": settings.memory_limit_mb * 1024 * 1024,
        "cpu_seconds": settings.cpu_time_limit_s,
        "open_files": settings.max_open_files,
        "file_bytes": settings.tmp_size_mb * 1024 * 1024,
    }
    if settings.isolation == "bwrap":
        # In 'none' mode the child shares the worker's uid, whose threads would count too.
        limits["processes"] = settings.max_processes
    return limits


def plan_launch(
    settings: SandboxSettings,
    program: list[str] | None = None,
    child_program: str = REWARD_CHILD,
    egress_socket: Path | None = None,
) -> LaunchPlan:
    """Build the command that starts the child (or `program`, for probing) under `settings`.

    ``child_program`` is the program the child runs (REWARD_CHILD or AGENT_CHILD), a module of
    sandbox/child/ that start.py imports. ``egress_socket``: the egress proxy's socket, which
    ``settings.allow_network`` needs."""
    cgroup = _plan_cgroup(settings)
    if settings.isolation == "none":
        venv_bin = host_venv(host_python(settings)[1]) / "bin"
        python = str(venv_bin / "python3")
        limits = child_limits(settings) | {
            "python_paths": [str(path) for path in settings.extra_python_paths],
            "parent_pid": os.getpid(),
        }
        start = [python, "-I", "-S", "-B", str(CHILD_START), child_program]
        argv = program or [*start, json.dumps(limits)]
        env = {"PATH": f"{venv_bin}:{SEARCH_PATH}", "LANG": "C.UTF-8", "HOME": "/tmp"}
        return LaunchPlan(argv=argv, env=env, data_files={}, uses_bwrap=False, cgroup=cgroup)
    return _plan_bwrap(settings, program, cgroup, child_program, egress_socket)


def host_python(settings: SandboxSettings) -> tuple[Path, Path]:
    """The installation the sandbox runs (its prefix) and its interpreter binary: the
    worker's own base interpreter, never a virtual environment's (its packages stay out)."""
    prefix = Path(settings.python_prefix or sys.base_prefix).resolve()
    real_python = Path(os.path.realpath(sys.executable))
    if settings.python_prefix is not None or not real_python.is_relative_to(prefix):
        real_python = prefix / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    return prefix, real_python


def pyvenv_cfg(home: str) -> str:
    """An environment that adds no site-packages: only the stdlib and PYTHONPATH (the job's
    packages) are importable, in the child and in every Python process it starts."""
    return f"home = {home}\ninclude-system-site-packages = false\n"


def host_venv(real_python: Path) -> Path:
    """The empty environment around ``real_python`` for isolation='none' (no private /tmp to
    build it in): made once per interpreter and uid under the temporary folder."""
    key = hashlib.sha256(str(real_python).encode()).hexdigest()[:16]
    venv = Path(tempfile.gettempdir()) / f"rft-sandbox-python-{os.geteuid()}-{key}"
    if _is_host_venv(venv, real_python):
        return venv
    staging = Path(tempfile.mkdtemp(prefix=".rft-sandbox-python-"))
    try:
        (staging / "bin").mkdir()
        for name in PYTHON_NAMES:
            (staging / "bin" / name).symlink_to(real_python)
        (staging / "pyvenv.cfg").write_text(pyvenv_cfg(str(real_python.parent)))
        staging.chmod(0o755)
        os.rename(staging, venv)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not _is_host_venv(venv, real_python):  # not a concurrent start that made it first
            raise SandboxUnavailableError(
                f"cannot set up the sandbox's interpreter at {venv}: remove what is there"
            ) from None
    return venv


def _is_host_venv(venv: Path, real_python: Path) -> bool:
    try:
        info = venv.lstat()
        if venv.is_symlink() or info.st_uid != os.geteuid() or info.st_mode & 0o022:
            return False
        links = [os.readlink(venv / "bin" / name) for name in PYTHON_NAMES]
        cfg = (venv / "pyvenv.cfg").read_text()
    except OSError:
        return False
    return links == [str(real_python)] * len(links) and cfg == pyvenv_cfg(str(real_python.parent))


def _plan_cgroup(settings: SandboxSettings) -> tuple[CgroupHost, CgroupLimits] | None:
    try:
        host = cgroup_host_for(settings.cgroups)
    except CgroupUnavailableError as error:
        raise SandboxUnavailableError(
            f"{error}; or set cgroups='auto' (RFT_SANDBOX_CGROUPS=auto) to rely on rlimits"
        ) from None
    if host is None:
        return None
    memory_bytes = settings.memory_limit_mb * 1024 * 1024
    return host, CgroupLimits(memory_bytes=memory_bytes, pids=settings.cgroup_pids_max)


def _plan_bwrap(
    settings: SandboxSettings,
    program: list[str] | None,
    cgroup: tuple[CgroupHost, CgroupLimits] | None,
    child_program: str = REWARD_CHILD,
    egress_socket: Path | None = None,
) -> LaunchPlan:
    if child_program not in (REWARD_CHILD, AGENT_CHILD):
        raise ValueError(f"{child_program!r} is not a child program of {CHILD_FOLDER}")
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailableError(
            "bubblewrap is not installed: install it (Debian/Ubuntu: apt-get install bubblewrap), "
            "or set isolation='none' to run reward code WITHOUT isolation (development only)"
        )
    prefix, real_python = host_python(settings)
    inside_python = f"{INSIDE_PYTHON_PREFIX}/{real_python.relative_to(prefix)}"

    as_root = os.geteuid() == 0
    argv = [bwrap]
    if as_root:
        argv += ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
        argv.append("--unshare-net")
        # setpriv needs these three to drop to the sandbox uid; it then clears every set.
        argv += ["--cap-drop", "ALL"]
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    else:
        argv += ["--unshare-all", "--cap-drop", "ALL"]
    argv += ["--die-with-parent", "--new-session", "--hostname", "sandbox"]

    # Directories bwrap creates are 0700 unless told otherwise, which locks the uid out.
    argv += ["--perms", "0755", "--dir", "/usr", "--perms", "0755", "--dir", "/opt"]
    argv += ["--perms", "0755", "--dir", "/opt/rft", "--perms", "0755", "--dir", "/etc"]
    argv += ["--perms", "0755", "--dir", INSIDE_PACKAGES]
    for directory in ("/usr/lib", "/usr/lib64", "/usr/bin"):
        if os.path.isdir(directory):
            argv += ["--ro-bind", directory, directory]
    for link, target in (("/lib", "usr/lib"), ("/lib64", "usr/lib64"), ("/bin", "usr/bin")):
        argv += ["--symlink", target, link]
    # The system's own Python lives in the /usr directories bound above; any other prefix
    # (/usr/local in the python images, pyenv, a custom build) is bound whole.
    system_python = prefix == Path("/usr")
    if not system_python:
        argv += ["--ro-bind", str(prefix), INSIDE_PYTHON_PREFIX]
        site_packages = next(iter(prefix.glob("lib/python3*/site-packages")), None)
        if site_packages is not None:
            # The worker's own packages (torch, the service) are none of the job's business.
            hidden = f"{INSIDE_PYTHON_PREFIX}/{site_packages.relative_to(prefix)}"
            argv += ["--perms", "0755", "--tmpfs", hidden, "--remount-ro", hidden]
    else:
        inside_python = str(real_python)
    venv_bin = f"{INSIDE_VENV}/bin"
    argv += ["--perms", "0755", "--dir", INSIDE_VENV, "--perms", "0755", "--dir", venv_bin]
    for name in PYTHON_NAMES:
        argv += ["--symlink", inside_python, f"{venv_bin}/{name}"]
    data_files: dict[str, str] = {
        f"{INSIDE_VENV}/pyvenv.cfg": pyvenv_cfg(os.path.dirname(inside_python))
    }
    etc_files = ETC_FILES + (NETWORK_ETC_FILES if settings.allow_network else ())
    for name in etc_files:
        if os.path.exists(f"/etc/{name}"):
            argv += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    argv += ["--ro-bind", str(CHILD_FOLDER), INSIDE_CHILD_FOLDER]
    python_paths = []
    for index, path in enumerate(settings.extra_python_paths):
        if as_root and path.stat().st_mode & 0o005 != 0o005:
            raise SandboxUnavailableError(
                f"extra_python_paths: {path} is not readable by the sandbox's unprivileged uid; "
                "make it world-readable (chmod -R o+rX)"
            )
        inside = f"{INSIDE_PACKAGES}/{index}"
        argv += ["--ro-bind", str(path), inside]
        python_paths.append(inside)
    if settings.allow_network:
        if egress_socket is None:
            raise ValueError("allow_network needs the egress proxy's socket (sandbox/egress.py)")
        argv += ["--ro-bind", str(egress_socket), INSIDE_EGRESS_SOCKET]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    tmp_bytes = settings.tmp_size_mb * 1024 * 1024
    argv += ["--perms", "1777", "--size", str(tmp_bytes), "--tmpfs", "/tmp", "--chdir", "/tmp"]
    argv += ["--clearenv", "--setenv", "PATH", f"{venv_bin}:{SEARCH_PATH}"]
    argv += ["--setenv", "HOME", "/tmp"]
    argv += ["--setenv", "LANG", "C.UTF-8"]
    if not system_python and any(prefix.glob("lib/libpython*")):
        # A shared-library build finds libpython through an absolute RUNPATH under its prefix.
        argv += ["--setenv", "LD_LIBRARY_PATH", f"{INSIDE_PYTHON_PREFIX}/lib"]

    if as_root:
        uid = settings.sandbox_uid
        if uid is None:
            raise ValueError("settings.sandbox_uid is not set: lease one first (sandbox.uids)")
        data_files["/etc/passwd"] = SANDBOX_PASSWD.format(uid=uid)
        data_files["/etc/group"] = SANDBOX_GROUP.format(uid=uid)
        setpriv = shutil.which("setpriv", path="/usr/bin:/bin")
        if setpriv is None:
            raise SandboxUnavailableError(
                "setpriv is missing (Debian: util-linux); it drops the sandbox to an "
                "unprivileged uid when the worker runs as root"
            )
        argv += ["--", setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
        argv += ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
    argv.append("--")
    python = f"{venv_bin}/python3"
    if program is not None:
        argv += [python if part == sys.executable else part for part in program]
    else:
        limits = child_limits(settings) | {"python_paths": python_paths, "own_pid_namespace": True}
        if settings.allow_network:
            limits["egress_socket"] = INSIDE_EGRESS_SOCKET
        inside_start = f"{INSIDE_CHILD_FOLDER}/{CHILD_START.name}"
        argv += [python, "-I", "-S", "-B", inside_start, child_program, json.dumps(limits)]
    try:
        seccomp_filter = filter_for_this_machine()
    except SeccompUnsupportedError as error:
        raise SandboxUnavailableError(str(error)) from None
    return LaunchPlan(
        argv=argv,
        env={"PATH": SEARCH_PATH},
        data_files=data_files,
        uses_bwrap=True,
        seccomp_filter=seccomp_filter,
        cgroup=cgroup,
    )


@dataclass
class SpawnedChild:
    process: subprocess.Popen[bytes]
    # Read end of bwrap's --info-fd: it reports the host pid of the namespace's init there.
    info_fd: int | None
    # The tree's cgroup: remove() it once the process has been waited for.
    cgroup: SandboxCgroup | None = None


def spawn(plan: LaunchPlan, **popen_arguments: object) -> SpawnedChild:
    """Start `plan`: its data files and seccomp filter go to bwrap through pipes it reads at
    setup, and the whole tree starts inside the plan's cgroup."""
    argv = list(plan.argv)
    passed: list[int] = []
    extra: list[str] = []
    info_fd = None
    cgroup = None
    try:
        for inside_path, content in plan.data_files.items():
            passed.append(_pipe_holding(content.encode()))
            extra += ["--perms", "0644", "--ro-bind-data", str(passed[-1]), inside_path]
        if plan.seccomp_filter is not None:
            passed.append(_pipe_holding(plan.seccomp_filter))
            extra += ["--seccomp", str(passed[-1])]
        if plan.uses_bwrap:
            info_fd, info_write_end = os.pipe()
            passed.append(info_write_end)
            extra += ["--info-fd", str(info_write_end)]
        if extra:
            # Before bwrap's end-of-options marker, after the /etc it creates with open
            # permissions.
            end_of_options = argv.index("--")
            argv[end_of_options:end_of_options] = extra
        if plan.cgroup is not None:
            try:
                cgroup = SandboxCgroup.create(*plan.cgroup)
            except OSError as error:
                raise SandboxUnavailableError(
                    f"cannot create the sandbox's cgroup: {error}"
                ) from error
            argv = cgroup.wrap(argv)
        process = subprocess.Popen(  # type: ignore[call-overload]
            argv,
            env=plan.env,
            pass_fds=passed,
            start_new_session=True,
            close_fds=True,
            **popen_arguments,
        )
    except BaseException:
        if info_fd is not None:
            os.close(info_fd)
        if cgroup is not None:
            cgroup.remove()
        raise
    finally:
        for fd in passed:
            os.close(fd)
    return SpawnedChild(process=process, info_fd=info_fd, cgroup=cgroup)


def _pipe_holding(content: bytes) -> int:
    """The read end of a pipe that holds `content` and is closed for writing."""
    read_end, write_end = os.pipe()
    try:
        # Small contents fit the pipe buffer, so writing before the spawn cannot block.
        os.write(write_end, content)
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    return read_end


@functools.cache
def detect_isolation() -> IsolationCheck:
    """Whether bubblewrap isolation works on this machine (tried once per process)."""
    try:
        # As root, the probe drops to the first uid sandboxes lease: that uid must be usable.
        defaults = SandboxSettings(isolation="bwrap")
        plan = plan_launch(
            SandboxSettings(isolation="bwrap", sandbox_uid=defaults.uid_range_first),
            program=[sys.executable, "-I", "-S", "-c", "import os; print(os.getuid())"],
        )
    except SandboxUnavailableError as error:
        return IsolationCheck(False, str(error))
    try:
        spawned = spawn(plan, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        finished = spawned.process
        try:
            out, err = finished.communicate(timeout=20)
        finally:
            if spawned.info_fd is not None:
                os.close(spawned.info_fd)
            if finished.poll() is None:
                finished.kill()
                finished.wait()
            if spawned.cgroup is not None:
                spawned.cgroup.remove()
    except SandboxUnavailableError as error:
        return IsolationCheck(False, str(error))
    except (OSError, subprocess.TimeoutExpired) as error:
        return IsolationCheck(False, f"bubblewrap could not start: {error}")
    if finished.returncode != 0:
        return IsolationCheck(
            False,
            f"bubblewrap failed ({err.decode(errors='replace').strip()}): make sure user "
            "namespaces are enabled (sysctl kernel.unprivileged_userns_clone=1, "
            "user.max_user_namespaces > 0) or run the worker as root; in a container, allow "
            "the unshare/mount syscalls (e.g. a seccomp profile that permits them)",
        )
    if os.geteuid() == 0 and out.strip() == b"0":
        return IsolationCheck(False, "the sandboxed code still ran as root")
    return IsolationCheck(
        True, f"bubblewrap works; sandboxed code runs as uid {out.decode().strip()}"
    )
