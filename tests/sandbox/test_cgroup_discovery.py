"""Finding our own cgroups from /proc/self/mountinfo and /proc/self/cgroup, for the layouts
hosts have: cgroup v1 (this machine), v2, hybrid, and containers that mount a subtree."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.cgroups import CgroupUnavailableError, find_own_cgroups


def mount(number: int, root: str, mount_point: Path | str, fstype: str, options: str) -> str:
    escaped = str(mount_point).replace(" ", "\\040")
    return f"{number} 23 0:{number} {root} {escaped} rw,relatime - {fstype} {fstype} {options}\n"


def test_cgroup_v1_with_separate_hierarchies(tmp_path: Path) -> None:
    mountinfo = (
        mount(31, "/", "/sys/fs/cgroup", "tmpfs", "rw,mode=755")
        + mount(32, "/", tmp_path / "cpu", "cgroup", "rw,cpu")
        + mount(35, "/", tmp_path / "memory", "cgroup", "rw,memory")
        + mount(39, "/", tmp_path / "pids", "cgroup", "rw,pids")
        + mount(41, "/", tmp_path / "unified", "cgroup2", "rw")
    )
    proc_cgroup = "8:pids:/\n4:memory:/process_api/a742\n1:cpu:/\n0::/\n"
    version, directories = find_own_cgroups(mountinfo, proc_cgroup)
    assert version == 1
    assert directories == {
        "memory": tmp_path / "memory" / "process_api" / "a742",
        "pids": tmp_path / "pids",
    }


def test_cgroup_v1_comounted_controllers(tmp_path: Path) -> None:
    mountinfo = mount(40, "/", tmp_path / "mem pids", "cgroup", "rw,memory,pids")
    version, directories = find_own_cgroups(mountinfo, "3:memory,pids:/jobs\n")
    assert version == 1
    assert directories == {"memory": tmp_path / "mem pids/jobs", "pids": tmp_path / "mem pids/jobs"}


def test_a_container_sees_its_subtree_mounted_as_root(tmp_path: Path) -> None:
    mountinfo = mount(35, "/docker/abc", tmp_path / "memory", "cgroup", "rw,memory") + mount(
        39, "/docker/abc", tmp_path / "pids", "cgroup", "rw,pids"
    )
    proc_cgroup = "8:pids:/docker/abc\n4:memory:/docker/abc/worker\n"
    _, directories = find_own_cgroups(mountinfo, proc_cgroup)
    assert directories == {"memory": tmp_path / "memory/worker", "pids": tmp_path / "pids"}
    with pytest.raises(CgroupUnavailableError, match="memory"):
        find_own_cgroups(mountinfo, "8:pids:/docker/abc\n4:memory:/elsewhere\n")


def test_cgroup_v2_that_offers_memory_and_pids(tmp_path: Path) -> None:
    own = tmp_path / "unified" / "system.slice" / "rft-worker.service"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    mountinfo = mount(28, "/", tmp_path / "unified", "cgroup2", "rw,nsdelegate")
    version, directories = find_own_cgroups(mountinfo, "0::/system.slice/rft-worker.service\n")
    assert version == 2
    assert directories == {"memory": own, "pids": own}


def test_cgroup_v2_without_pids_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    mountinfo = mount(28, "/", tmp_path, "cgroup2", "rw")
    with pytest.raises(CgroupUnavailableError, match="does not offer pids"):
        find_own_cgroups(mountinfo, "0::/\n")


def test_no_cgroup_mounted_at_all() -> None:
    mountinfo = mount(22, "/", "/proc", "proc", "rw")
    with pytest.raises(CgroupUnavailableError, match="no mounted cgroup hierarchy"):
        find_own_cgroups(mountinfo, "0::/\n")
