//! Store configuration. Field names carry their unit; defaults are RocketMQ's.

use std::net::SocketAddrV4;
use std::path::PathBuf;

use crate::error::{StoreError, StoreResult};

/// When an append counts as durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushDiskType {
    /// A background flusher writes dirty pages back every `flush_interval_commit_log_ms`.
    Async,
    /// An append returns only after its bytes are on disk; concurrent appends share one fsync.
    Sync,
}

impl FlushDiskType {
    pub fn parse(name: &str) -> StoreResult<Self> {
        match name {
            "ASYNC_FLUSH" => Ok(Self::Async),
            "SYNC_FLUSH" => Ok(Self::Sync),
            other => Err(StoreError::Config(format!(
                "flush_disk_type must be ASYNC_FLUSH or SYNC_FLUSH, not {other:?}"
            ))),
        }
    }
}

/// The broker's part in replication (RocketMQ's `brokerRole`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BrokerRole {
    /// A master that answers a send once its own store has it.
    AsyncMaster,
    /// A master that answers a send once a slave has it too; the store is the same.
    SyncMaster,
    /// A copy of a master's CommitLog: only replication writes it, and it delivers no
    /// delayed messages of its own (the master's deliveries reach it as records).
    Slave,
}

impl BrokerRole {
    pub fn parse(name: &str) -> StoreResult<Self> {
        match name {
            "ASYNC_MASTER" => Ok(Self::AsyncMaster),
            "SYNC_MASTER" => Ok(Self::SyncMaster),
            "SLAVE" => Ok(Self::Slave),
            other => Err(StoreError::Config(format!(
                "broker_role must be ASYNC_MASTER, SYNC_MASTER or SLAVE, not {other:?}"
            ))),
        }
    }
}

#[derive(Clone, Debug)]
pub struct StoreConfig {
    pub store_path_root_dir: PathBuf,
    /// Directory of the CommitLog segments, often on a disk of their own (RocketMQ's
    /// `storePathCommitLog`); `None` is `<root>/commitlog`. Disk use is measured there.
    pub store_path_commit_log: Option<PathBuf>,
    /// Size of one CommitLog segment file.
    pub mapped_file_size_commit_log: u64,
    /// Size of one ConsumeQueue file; a multiple of 20 (the unit size).
    pub mapped_file_size_consume_queue: u64,
    pub flush_disk_type: FlushDiskType,
    pub broker_role: BrokerRole,
    pub flush_interval_commit_log_ms: u64,
    /// Period of the ConsumeQueue/index flush, which also advances the checkpoint.
    pub flush_interval_consume_queue_ms: u64,
    /// How long a `SYNC_FLUSH` append waits for its fsync before answering `FLUSH_DISK_TIMEOUT`.
    pub sync_flush_timeout_ms: u64,
    pub file_reserved_time_hours: u64,
    /// Local hours of the day at which expired segments are deleted.
    pub delete_when_hours: Vec<u32>,
    pub clean_resource_interval_ms: u64,
    /// Disk use (percent) above which expired segments are deleted at any hour.
    pub disk_max_used_space_ratio: u32,
    /// Disk use (percent) above which the oldest segments are deleted even if not expired.
    pub disk_space_clean_forcibly_ratio: u32,
    /// Disk use (percent) above which appends are refused.
    pub disk_space_warning_level_ratio: u32,
    /// Largest body a put accepts (RocketMQ 5 checks the body, not the whole record).
    pub max_message_size_bytes: u32,
    pub max_transfer_bytes_on_message_in_memory: u32,
    pub max_transfer_count_on_message_in_memory: u32,
    /// The smaller batch limits of a get whose messages lie further behind the end of the
    /// CommitLog than `access_message_in_memory_max_ratio` percent of the machine's memory:
    /// pages the page cache has likely dropped, which a slow consumer reads from the disk.
    pub max_transfer_bytes_on_message_in_disk: u32,
    pub max_transfer_count_on_message_in_disk: u32,
    pub access_message_in_memory_max_ratio: u32,
    pub message_index_enable: bool,
    pub max_hash_slot_num: u32,
    pub max_index_num: u32,
    /// Delay of each level (1-based in RocketMQ, index 0 here).
    pub message_delay_level_ms: Vec<u64>,
    pub check_crc_on_recover: bool,
    /// Address written as STOREHOST into every record and into offset message ids.
    pub store_host: SocketAddrV4,
    /// Queue ids must lie in `[0, max_queue_nums_per_topic)`.
    pub max_queue_nums_per_topic: u32,
    /// Run the flush, checkpoint and clean threads. Tests that drive time by hand turn this off.
    pub background_services: bool,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            store_path_root_dir: PathBuf::from("store"),
            store_path_commit_log: None,
            mapped_file_size_commit_log: 1024 * 1024 * 1024,
            mapped_file_size_consume_queue: 300_000 * 20,
            flush_disk_type: FlushDiskType::Async,
            broker_role: BrokerRole::AsyncMaster,
            flush_interval_commit_log_ms: 500,
            flush_interval_consume_queue_ms: 1000,
            sync_flush_timeout_ms: 5000,
            file_reserved_time_hours: 72,
            delete_when_hours: vec![4],
            clean_resource_interval_ms: 10_000,
            disk_max_used_space_ratio: 75,
            disk_space_clean_forcibly_ratio: 85,
            disk_space_warning_level_ratio: 90,
            max_message_size_bytes: 4 * 1024 * 1024,
            max_transfer_bytes_on_message_in_memory: 256 * 1024,
            max_transfer_count_on_message_in_memory: 32,
            max_transfer_bytes_on_message_in_disk: 64 * 1024,
            max_transfer_count_on_message_in_disk: 8,
            access_message_in_memory_max_ratio: 40,
            message_index_enable: true,
            max_hash_slot_num: 5_000_000,
            max_index_num: 20_000_000,
            message_delay_level_ms: parse_delay_levels(
                "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
            )
            .expect("the default delay table parses"),
            check_crc_on_recover: true,
            store_host: SocketAddrV4::new([127, 0, 0, 1].into(), 10911),
            max_queue_nums_per_topic: 1024,
            background_services: true,
        }
    }
}

/// The longest `fileReservedTime` whose milliseconds an `i64` holds.
const MAX_RESERVED_HOURS: u64 = i64::MAX as u64 / 3_600_000;

/// The settings that decide what the store keeps, which may change while it is open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retention {
    pub file_reserved_time_hours: u64,
    pub delete_when_hours: Vec<u32>,
    pub disk_max_used_space_ratio: u32,
    pub disk_space_clean_forcibly_ratio: u32,
    pub disk_space_warning_level_ratio: u32,
}

impl Retention {
    pub fn validate(&self) -> StoreResult<()> {
        let ratios = [
            ("disk_max_used_space_ratio", self.disk_max_used_space_ratio),
            (
                "disk_space_clean_forcibly_ratio",
                self.disk_space_clean_forcibly_ratio,
            ),
            (
                "disk_space_warning_level_ratio",
                self.disk_space_warning_level_ratio,
            ),
        ];
        let mut problems: Vec<String> = ratios
            .iter()
            .filter(|(_, r)| !(1..=100).contains(r))
            .map(|(name, r)| format!("{name} {r} is not in [1, 100]"))
            .collect();
        if let Some(h) = self.delete_when_hours.iter().find(|h| **h > 23) {
            problems.push(format!("delete_when hour {h} is not in 0..23"));
        }
        if self.delete_when_hours.is_empty() {
            problems.push("delete_when needs one or more hours".to_owned());
        }
        if self.file_reserved_time_hours > MAX_RESERVED_HOURS {
            problems.push(format!(
                "file_reserved_time_hours {} is not in [0, {MAX_RESERVED_HOURS}]",
                self.file_reserved_time_hours
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(StoreError::Config(problems.join("; ")))
        }
    }
}

/// Parses RocketMQ's `deleteWhen` ("04" or "01;04;23"): local hours of the day.
pub fn parse_delete_when(text: &str) -> StoreResult<Vec<u32>> {
    text.split(';')
        .map(|h| {
            h.trim()
                .parse::<u32>()
                .ok()
                .filter(|h| *h < 24)
                .ok_or_else(|| StoreError::Config(format!("bad delete_when {text:?}")))
        })
        .collect()
}

impl StoreConfig {
    /// Takes `r` as its retention settings.
    pub fn set_retention(&mut self, r: Retention) {
        self.file_reserved_time_hours = r.file_reserved_time_hours;
        self.delete_when_hours = r.delete_when_hours;
        self.disk_max_used_space_ratio = r.disk_max_used_space_ratio;
        self.disk_space_clean_forcibly_ratio = r.disk_space_clean_forcibly_ratio;
        self.disk_space_warning_level_ratio = r.disk_space_warning_level_ratio;
    }

    pub fn retention(&self) -> Retention {
        Retention {
            file_reserved_time_hours: self.file_reserved_time_hours,
            delete_when_hours: self.delete_when_hours.clone(),
            disk_max_used_space_ratio: self.disk_max_used_space_ratio,
            disk_space_clean_forcibly_ratio: self.disk_space_clean_forcibly_ratio,
            disk_space_warning_level_ratio: self.disk_space_warning_level_ratio,
        }
    }

    /// Checks every setting, RocketMQ's bounds among them (sizes and counts are Java ints);
    /// the error lists each problem found.
    pub fn validate(&self) -> StoreResult<()> {
        const INT_MAX: u64 = i32::MAX as u64;
        let mut problems = Vec::new();
        let sizes = [
            (
                "mapped_file_size_commit_log",
                self.mapped_file_size_commit_log,
                4096,
            ),
            (
                "mapped_file_size_consume_queue",
                self.mapped_file_size_consume_queue,
                20,
            ),
            (
                "max_message_size",
                u64::from(self.max_message_size_bytes),
                1,
            ),
            (
                "max_transfer_bytes_on_message_in_memory",
                u64::from(self.max_transfer_bytes_on_message_in_memory),
                1,
            ),
            (
                "max_transfer_count_on_message_in_memory",
                u64::from(self.max_transfer_count_on_message_in_memory),
                1,
            ),
            (
                "max_transfer_bytes_on_message_in_disk",
                u64::from(self.max_transfer_bytes_on_message_in_disk),
                1,
            ),
            (
                "max_transfer_count_on_message_in_disk",
                u64::from(self.max_transfer_count_on_message_in_disk),
                1,
            ),
            ("max_hash_slot_num", u64::from(self.max_hash_slot_num), 1),
            ("max_index_num", u64::from(self.max_index_num), 2),
            (
                "max_queue_nums_per_topic",
                u64::from(self.max_queue_nums_per_topic),
                1,
            ),
        ];
        for (name, value, min) in sizes {
            // A queue id below the limit must fit an i32, so the limit may be one above.
            let max = if name == "max_queue_nums_per_topic" {
                INT_MAX + 1
            } else {
                INT_MAX
            };
            if !(min..=max).contains(&value) {
                problems.push(format!("{name} {value} is not in [{min}, {max}]"));
            }
        }
        if !self.mapped_file_size_consume_queue.is_multiple_of(20) {
            problems.push(format!(
                "mapped_file_size_consume_queue {} is not a multiple of 20 (the unit size)",
                self.mapped_file_size_consume_queue
            ));
        }
        // A period of zero would spin a service thread.
        let periods = [
            (
                "flush_interval_commit_log_ms",
                self.flush_interval_commit_log_ms,
            ),
            (
                "flush_interval_consume_queue_ms",
                self.flush_interval_consume_queue_ms,
            ),
            ("sync_flush_timeout_ms", self.sync_flush_timeout_ms),
            (
                "clean_resource_interval_ms",
                self.clean_resource_interval_ms,
            ),
        ];
        for (name, value) in periods {
            if !(1..=i64::MAX as u64).contains(&value) {
                problems.push(format!("{name} {value} is not in [1, {}]", i64::MAX));
            }
        }
        if self.access_message_in_memory_max_ratio > 100 {
            problems.push(format!(
                "access_message_in_memory_max_ratio {} is not in [0, 100]",
                self.access_message_in_memory_max_ratio
            ));
        }
        if self.message_delay_level_ms.is_empty() || self.message_delay_level_ms.contains(&0) {
            problems.push("message_delay_level needs one or more levels above zero".to_owned());
        }
        if let Err(StoreError::Config(retention)) = self.retention().validate() {
            problems.push(retention);
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(StoreError::Config(problems.join("; ")))
        }
    }

    pub fn commit_log_dir(&self) -> PathBuf {
        self.store_path_commit_log
            .clone()
            .unwrap_or_else(|| self.store_path_root_dir.join("commitlog"))
    }

    pub fn consume_queue_dir(&self) -> PathBuf {
        self.store_path_root_dir.join("consumequeue")
    }

    pub fn index_dir(&self) -> PathBuf {
        self.store_path_root_dir.join("index")
    }
}

/// Parses RocketMQ's `messageDelayLevel` ("1s 5s 10m 2h 1d") into milliseconds.
pub fn parse_delay_levels(text: &str) -> StoreResult<Vec<u64>> {
    let bad = |level: &str| StoreError::Config(format!("bad delay level {level:?}"));
    text.split_ascii_whitespace()
        .map(|level| {
            let factor: u64 = match level.as_bytes().last() {
                Some(b's') => 1000,
                Some(b'm') => 60_000,
                Some(b'h') => 3_600_000,
                Some(b'd') => 86_400_000,
                _ => return Err(bad(level)),
            };
            // The unit is one ASCII byte, so the number is the rest.
            let num = &level[..level.len() - 1];
            if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad(level));
            }
            num.parse::<u64>()
                .ok()
                .and_then(|n| n.checked_mul(factor))
                .filter(|ms| (1..=i64::MAX as u64).contains(ms))
                .ok_or_else(|| bad(level))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(c: &StoreConfig) -> String {
        match c.validate() {
            Err(StoreError::Config(p)) => p,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn the_defaults_are_valid() {
        StoreConfig::default().validate().unwrap();
    }

    #[test]
    fn every_bad_setting_is_named() {
        let c = StoreConfig {
            mapped_file_size_commit_log: 1 << 31,
            mapped_file_size_consume_queue: 30,
            flush_interval_commit_log_ms: 0,
            clean_resource_interval_ms: 0,
            max_message_size_bytes: 0,
            max_transfer_bytes_on_message_in_memory: u32::MAX,
            access_message_in_memory_max_ratio: 101,
            message_delay_level_ms: vec![],
            file_reserved_time_hours: u64::MAX,
            delete_when_hours: vec![],
            disk_space_warning_level_ratio: 0,
            ..StoreConfig::default()
        };
        let p = problems(&c);
        for name in [
            "mapped_file_size_commit_log",
            "mapped_file_size_consume_queue 30 is not a multiple of 20",
            "flush_interval_commit_log_ms",
            "clean_resource_interval_ms",
            "max_message_size",
            "max_transfer_bytes_on_message_in_memory",
            "access_message_in_memory_max_ratio",
            "message_delay_level",
            "file_reserved_time_hours",
            "delete_when needs",
            "disk_space_warning_level_ratio",
        ] {
            assert!(p.contains(name), "{name} missing from {p}");
        }
    }

    #[test]
    fn delay_levels_parse_only_numbers_with_a_unit() {
        assert_eq!(
            parse_delay_levels("1s 2m\t1h\n1d").unwrap(),
            [1000, 120_000, 3_600_000, 86_400_000]
        );
        for bad in [
            "1é",
            "é",
            "+5s",
            "s",
            "0s",
            "5x",
            "1s\u{1f}2s",
            "9999999999999999999d",
        ] {
            assert!(parse_delay_levels(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn delete_hours_refuse_empty_and_out_of_range_tokens() {
        assert_eq!(parse_delete_when("04").unwrap(), [4]);
        assert_eq!(parse_delete_when(" 01; 23 ").unwrap(), [1, 23]);
        for bad in ["", "4;;5", "04;", "24", "x"] {
            assert!(parse_delete_when(bad).is_err(), "{bad:?} parsed");
        }
    }
}
