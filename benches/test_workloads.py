"""Checks of the bench tooling's machine description."""

from __future__ import annotations

import os
from pathlib import Path

from benches.workloads import idle_line, idle_policy, storage_info, storage_line


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_older_kernels_name_the_governor_in_a_writable_file(tmp_path: Path) -> None:
    _write(tmp_path, "devices/system/cpu/cpuidle/current_governor", "menu\n")
    assert idle_policy(tmp_path) == {"governor": "menu"}


def test_haltpoll_guest_reports_its_poll_time(tmp_path: Path) -> None:
    _write(tmp_path, "devices/system/cpu/cpuidle/current_governor_ro", "haltpoll\n")
    _write(tmp_path, "module/haltpoll/parameters/guest_halt_poll_ns", "200000\n")
    policy = idle_policy(tmp_path)
    assert policy == {"governor": "haltpoll", "guest_halt_poll_ns": 200000}
    assert idle_line({"idle": policy}) == "; cpuidle haltpoll, guest halt poll 200000 ns"


def test_other_governor_has_no_poll_time(tmp_path: Path) -> None:
    _write(tmp_path, "devices/system/cpu/cpuidle/current_governor_ro", "menu\n")
    policy = idle_policy(tmp_path)
    assert policy == {"governor": "menu"}
    assert idle_line({"idle": policy}) == "; cpuidle menu"


def test_unreadable_or_garbled_files_leave_no_note(tmp_path: Path) -> None:
    _write(tmp_path, "module/haltpoll/parameters/guest_halt_poll_ns", "lots\n")
    assert idle_policy(tmp_path) == {}
    assert idle_line({"idle": {}}) == ""
    assert idle_line({}) == ""


def _fake_device(sys_root: Path, under: Path, *, partition: bool, **queue: str) -> None:
    """A sysfs block device for the file system holding ``under``, as the kernel lays it out."""
    disk = sys_root / "devices/virtual/block/vdx"
    node = disk / "vdx1" if partition else disk
    node.mkdir(parents=True)
    if partition:
        (node / "partition").write_text("1\n")
    (disk / "queue").mkdir()
    for key, value in queue.items():
        (disk / "queue" / key).write_text(value + "\n")
    dev = under.stat().st_dev
    link = sys_root / f"dev/block/{os.major(dev)}:{os.minor(dev)}"
    link.parent.mkdir(parents=True)
    link.symlink_to(node)


def test_storage_names_the_disk_under_a_partition(tmp_path: Path) -> None:
    store_dir = tmp_path / "stores"
    store_dir.mkdir()
    sys_root = tmp_path / "sys"
    _fake_device(sys_root, store_dir, partition=True, write_cache="write back", fua="0")
    mounts = tmp_path / "mounts"
    root = tmp_path.resolve()
    mounts.write_text(
        f"/dev/vdx1 / ext4 rw 0 0\n/dev/vdx1 {root} ext2 rw 0 0\n/dev/vdx1 {root} xfs rw 0 0\n"
        f"tmpfs {root}-other tmpfs rw 0 0\n"
    )
    info = storage_info(store_dir, sys_root, mounts)
    assert info == {"fs": "xfs", "device": "vdx", "write_cache": "write back", "fua": "0"}
    assert (
        storage_line({"storage": info}) == "; stores on vdx (xfs), write cache write back, no FUA"
    )


def test_storage_of_a_whole_disk_with_fua(tmp_path: Path) -> None:
    store_dir = tmp_path / "my stores"
    store_dir.mkdir()
    sys_root = tmp_path / "sys"
    _fake_device(sys_root, store_dir, partition=False, write_cache="write through", fua="1")
    mounts = tmp_path / "mounts"
    escaped = str(store_dir.resolve()).replace(" ", "\\040")
    mounts.write_text(f"/dev/vdx / ext4 rw 0 0\n/dev/vdx {escaped} btrfs rw 0 0\n")
    info = storage_info(store_dir, sys_root, mounts)
    assert info == {"fs": "btrfs", "device": "vdx", "write_cache": "write through", "fua": "1"}
    assert storage_line({"storage": info}) == (
        "; stores on vdx (btrfs), write cache write through, FUA"
    )


def test_storage_without_a_block_device_leaves_no_note(tmp_path: Path) -> None:
    info = storage_info(tmp_path, tmp_path / "empty-sys", tmp_path / "no-mounts")
    assert info == {}
    assert storage_line({"storage": info}) == ""
