//! The one place the store reads the wall clock; everything else takes `now_ms` as an argument.

use std::time::{SystemTime, UNIX_EPOCH};

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Hour of the day (0-23) in local time for `ms` since the epoch.
pub fn local_hour(ms: i64) -> Option<u32> {
    let secs: libc::time_t = (ms / 1000) as libc::time_t;
    // SAFETY: localtime_r writes only into the zeroed struct we pass and reads `secs`.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&raw const secs, &raw mut tm).is_null() };
    ok.then_some(tm.tm_hour as u32)
}
