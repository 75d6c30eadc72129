"""Checks of the bench tooling's description of the machine and of its disk."""

from __future__ import annotations

import os
from pathlib import Path

from benches.report import ceiling_note, markdown
from benches.workloads import (
    DiskCeiling,
    durable_write_latencies,
    idle_line,
    idle_policy,
    storage_info,
    storage_line,
)

SPACE = "\\040"  # a space in a mount point, as /proc/self/mounts writes it


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


def _disk(tmp_path: Path, store_name: str, *, partition: bool, **queue: str) -> tuple[Path, Path]:
    """A store directory, and a sysfs root whose block device for that directory's file system
    is laid out as the kernel does it (a partition links below its disk)."""
    store_dir = tmp_path / store_name
    store_dir.mkdir()
    sys_root = tmp_path / "sys"
    disk = sys_root / "devices/virtual/block/vdx"
    node = disk / "vdx1" if partition else disk
    node.mkdir(parents=True)
    if partition:
        (node / "partition").write_text("1\n")
    (disk / "queue").mkdir()
    for key, value in queue.items():
        (disk / "queue" / key).write_text(value + "\n")
    dev = store_dir.stat().st_dev
    link = sys_root / f"dev/block/{os.major(dev)}:{os.minor(dev)}"
    link.parent.mkdir(parents=True)
    link.symlink_to(node)
    return store_dir, sys_root


def _mounts(tmp_path: Path, *entries: tuple[str, str]) -> Path:
    """A mounts table of (mount point, file system) in order, escaped as the kernel escapes it."""
    mounts = tmp_path / "mounts"
    lines = [f"/dev/vdx {point.replace(' ', SPACE)} {fs} rw 0 0" for point, fs in entries]
    mounts.write_text("\n".join(lines) + "\n")
    return mounts


def test_storage_names_the_disk_under_a_partition(tmp_path: Path) -> None:
    store_dir, sys_root = _disk(
        tmp_path, "stores", partition=True, write_cache="write back", fua="0"
    )
    root = str(tmp_path.resolve())
    # The last of two mounts on one point hides the first; a sibling prefix is not a parent.
    mounts = _mounts(tmp_path, ("/", "ext4"), (root, "ext2"), (root, "xfs"), (root + "-b", "nfs"))
    info = storage_info(store_dir, sys_root, mounts)
    assert info == {"fs": "xfs", "device": "vdx", "write_cache": "write back", "fua": "0"}
    line = storage_line({"storage": info})
    assert line == "; stores on vdx (xfs), write cache write back, no FUA"


def test_storage_of_a_whole_disk_with_fua_under_a_spaced_mount(tmp_path: Path) -> None:
    store_dir, sys_root = _disk(
        tmp_path, "my stores", partition=False, write_cache="write through", fua="1"
    )
    mounts = _mounts(tmp_path, ("/", "ext4"), (str(store_dir.resolve()), "btrfs"))
    info = storage_info(store_dir, sys_root, mounts)
    assert info == {"fs": "btrfs", "device": "vdx", "write_cache": "write through", "fua": "1"}
    line = storage_line({"storage": info})
    assert line == "; stores on vdx (btrfs), write cache write through, FUA"


def test_storage_without_a_block_device_leaves_no_note(tmp_path: Path) -> None:
    info = storage_info(tmp_path, tmp_path / "empty-sys", tmp_path / "no-mounts")
    assert info == {}
    assert storage_line({"storage": info}) == ""


def test_durable_writes_are_timed_each_way_and_leave_no_file(tmp_path: Path) -> None:
    latencies, writes = durable_write_latencies(tmp_path, 300, max_writes=5, max_seconds=10.0)
    assert writes == 5
    assert "buffered" in latencies
    assert set(latencies) <= {"buffered", "direct"}
    # A durable write reaches the device: far above a page-cache copy, far below a second.
    assert all(1e-6 < s < 1.0 for s in latencies.values()), latencies
    assert list(tmp_path.iterdir()) == []


def test_durable_writes_stop_at_the_time_limit(tmp_path: Path) -> None:
    # The file is filled before the clock starts: a modest cap keeps that short.
    _, writes = durable_write_latencies(tmp_path, 300, max_writes=200, max_seconds=0.0)
    assert writes == 1


def test_the_ceiling_takes_the_fastest_way_and_credits_every_appender() -> None:
    c = DiskCeiling(8, 32, 7616, {"buffered": 200e-6, "direct": 160e-6}, 40)
    assert c.durable_write_s == 160e-6
    assert c.msgs_per_s == 8 * 32 / 160e-6
    note = ceiling_note(c.as_dict(), {"msgs_per_s": c.msgs_per_s / 4})
    assert "7,616 B durable in 200 µs with pwrite + fdatasync, 160 µs with one O_DIRECT" in note
    assert "at most 256 messages per 160 µs: 1,600,000 msgs/s" in note
    assert note.endswith("pyrmq reached 25% of that")
    assert "pyrmq" not in ceiling_note(c.as_dict(), None)


def test_markdown_table_gives_both_implementations_rates() -> None:
    row = {
        "benchmark": "append 4 KiB",
        "target": ">= 1,000 MB/s",
        "target_unit": "MB/s",
        "target_met": True,
        "ratio": 4.5,
        "pyrmq": {"msgs_per_s": 1_000_000.0, "mb_per_s": 4096.0, "extra": {}},
        "baseline": {"msgs_per_s": 222_222.0, "mb_per_s": 910.2, "extra": {}},
    }
    machine = {"cpu": "x", "cores": 2, "python": "3", "build_profile": "release", "mode": "quick"}
    header, _, line = markdown([row], machine).splitlines()[2:5]
    cells = [c.strip() for c in line.strip("|").split("|")]
    names = [c.strip() for c in header.strip("|").split("|")]
    assert dict(zip(names, cells, strict=True)) == {
        "benchmark": "append 4 KiB",
        "pyrmq msgs/s": "1,000,000",
        "pyrmq MB/s": "4,096",
        "baseline msgs/s": "222,222",
        "baseline MB/s": "910",
        "ratio": "4.50x",
        "target": ">= 1,000 MB/s",
        "met?": "met",
    }
