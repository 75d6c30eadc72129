//! gRPC over HTTP/2 for pyrmq's broker: the listener, the connections, the framing and the
//! statuses, on a thread of their own. What a call means is left to whoever takes the events:
//! the broker's event loop, through the Python binding.

mod events;
pub mod frame;
mod server;
mod tls;

pub use events::Event;
pub use server::{Config, Transport};
pub use tls::{self_signed, ClientAuth, Tls, TlsError};
