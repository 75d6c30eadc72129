"""BrokerStats: rates over RocketMQ's 10/60/600 s windows and the midnight totals."""

import datetime

from pyrmq.broker.services.stats import BrokerStats


def test_rates_use_only_the_samples_within_each_window() -> None:
    stats = BrokerStats(now_s=0.0)
    # 100 puts a second for 60 s, then 10 a second for 30 s.
    for second in range(1, 91):
        stats.stored(100 if second <= 60 else 10, 1_000)
        stats.pulled(found=5 if second % 2 else 0)
        stats.sample(now_s=float(second))
    assert stats.put_tps(10) == 10.0
    assert stats.put_tps(60) == (30 * 100 + 30 * 10) / 60
    assert stats.put_tps(600) == (60 * 100 + 30 * 10) / 90
    assert stats.transferred_tps(10) == 2.5
    assert stats.found_tps(10) == stats.miss_tps(10) == 0.5
    assert stats.put_bytes_total == 90_000


def test_samples_older_than_the_longest_window_are_dropped() -> None:
    stats = BrokerStats(now_s=0.0)
    stats.stored(6_000, 0)
    for second in range(1, 1_200):
        stats.sample(now_s=float(second))
    # The burst in the first second has left every window.
    assert stats.put_tps(600) == 0.0


def test_no_rate_before_a_second_sample() -> None:
    stats = BrokerStats(now_s=5.0)
    stats.stored(10, 100)
    assert stats.put_tps(10) == 0.0


def test_midnight_moves_today_to_yesterday() -> None:
    day = datetime.date(2026, 11, 26)
    stats = BrokerStats(now_s=0.0)
    stats.sample(now_s=1.0, today=day)
    stats.stored(7, 0)
    stats.pulled(found=3)
    stats.sample(now_s=2.0, today=day + datetime.timedelta(days=1))
    assert (stats.put_yesterday_morning, stats.put_today_morning, stats.put_total) == (0, 7, 7)
    assert (stats.get_yesterday_morning, stats.get_today_morning) == (0, 3)
    stats.stored(5, 0)
    stats.sample(now_s=3.0, today=day + datetime.timedelta(days=2))
    assert (stats.put_yesterday_morning, stats.put_today_morning, stats.put_total) == (7, 12, 12)


def test_delayed_deliveries_count_as_stored_once() -> None:
    stats = BrokerStats(now_s=0.0)
    stats.stored(1, 200)  # a delayed send, parked in the schedule topic
    stats.delivered(0, 0)
    stats.delivered(1, 210)  # the store's running totals: the delivery
    stats.delivered(1, 210)  # read again, unchanged: nothing new
    stats.sample(now_s=1.0)
    assert (stats.put_total, stats.put_bytes_total) == (2, 410)
    assert stats.put_tps(10) == 2.0


def test_a_groups_consume_rate_covers_its_last_minute_and_then_is_forgotten() -> None:
    stats = BrokerStats(now_s=0.0)
    stats.pulled(found=0, topic="T", group="G")  # a miss counts for nothing
    for second in range(1, 31):
        stats.pulled(found=4, topic="T", group="G")
        stats.pulled(found=1, topic="T", group="Other")
        stats.sample(now_s=float(second))
    assert stats.consume_tps("T", "G") == 4.0
    assert stats.consume_tps("T", "Other") == 1.0
    assert stats.consume_tps("U", "G") == stats.consume_tps("T", "Nobody") == 0.0
    # Idle from second 31: the minute-long window lets the burst go, then the group is gone.
    for second in range(31, 100):
        stats.sample(now_s=float(second))
        if second == 60:
            assert stats.consume_tps("T", "G") == 4 * 30 / 60
    assert stats.consume_tps("T", "G") == 0.0
    assert not stats._group_samples
    stats.pulled(found=6, topic="T", group="G")
    stats.sample(now_s=100.0)
    assert stats.consume_tps("T", "G") == 6.0
