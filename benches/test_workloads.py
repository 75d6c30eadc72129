"""Checks of the bench tooling's machine description."""

from __future__ import annotations

from pathlib import Path

from benches.workloads import idle_line, idle_policy


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


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
