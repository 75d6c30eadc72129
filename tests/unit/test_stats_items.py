"""The broker's traffic counters: windows that slide as snapshots are taken."""

from pyrmq.broker.services.stats_items import (
    GROUP_GET_NUMS,
    TOPIC_PUT_NUMS,
    Period,
    StatsItems,
    Window,
)


def test_the_minute_window_covers_the_last_six_samples() -> None:
    items = StatsItems()
    for i in range(10):  # 10 messages in each 10 s
        items.add(TOPIC_PUT_NUMS, "T", 10)
        items.sample(Period.SECONDS, now_ms=(i + 1) * 10_000)
    windows = items.windows(TOPIC_PUT_NUMS, "T")
    assert windows is not None
    # 7 snapshots kept: 60 s between the first and the last.
    assert windows["statsMinute"] == Window(60, 1.0, 10.0)
    # Never sampled for the hour or the day.
    assert windows["statsHour"] == windows["statsDay"] == Window(0, 0.0, 0.0)


def test_each_period_is_sampled_on_its_own_and_the_day_keeps_25() -> None:
    items = StatsItems()
    for hour in range(30):
        items.add(GROUP_GET_NUMS, "T@G", 2, times=2)
        items.sample(Period.HOURS, now_ms=(hour + 1) * 3_600_000)
    windows = items.windows(GROUP_GET_NUMS, "T@G")
    assert windows is not None
    assert windows["statsDay"].sum == 48
    assert windows["statsDay"].avgpt == 1.0
    assert windows["statsMinute"].sum == 0


def test_a_deleted_topics_items_are_forgotten() -> None:
    items = StatsItems()
    items.stored("T", 3, 300, "C")
    items.delivered("T", "G", 3, 300, "C")
    items.stored("U", 1, 100, "C")
    items.forget(lambda _, key: key == "T" or key.startswith("T@"))
    assert items.windows(TOPIC_PUT_NUMS, "T") is None
    assert items.windows(GROUP_GET_NUMS, "T@G") is None
    assert items.windows(TOPIC_PUT_NUMS, "U") is not None
    assert len(items) == 4  # U's put count and size, and the cluster's put and get counts
