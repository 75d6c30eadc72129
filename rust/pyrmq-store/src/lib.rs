//! pyrmq's storage engine: RocketMQ's CommitLog + ConsumeQueue design in plain Rust.
//!
//! One append-only [`commit_log`] holds every message in RocketMQ's stored-message layout
//! ([`message`]); a [`consume_queue`] per (topic, queue id) indexes it in 20-byte units; a key
//! [`index`] finds messages by key. [`store::MessageStore`] ties them together with recovery
//! ([`checkpoint`]), retention, delayed-message delivery ([`schedule`]), background flushing
//! ([`services`]) and arrival events ([`wakeup`]) for long polling.

pub mod checkpoint;
pub mod clock;
pub mod commit_log;
pub mod config;
pub mod consume_queue;
mod deleted_topics;
mod epoch;
pub mod error;
mod fork;
pub mod hold;
pub mod index;
pub mod mapped_file;
pub mod mapped_file_queue;
pub mod message;
pub mod populate;
pub mod queue_map;
pub mod recall;
pub mod schedule;
mod services;
mod state_file;
pub mod store;
pub mod wakeup;

pub use config::{BrokerRole, FlushDiskType, StoreConfig};
pub use error::{StoreError, StoreResult};
pub use message::MessageInput;
pub use store::{
    GetMessageStatus, GetOutcome, GetRequest, MessageStore, PutOutcome, PutStatus, TimeBoundary,
};
