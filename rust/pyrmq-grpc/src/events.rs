//! What the transport tells its caller: calls that start, their messages, their ends. Queued,
//! with an eventfd that becomes readable when the queue stops being empty, so that an event
//! loop watching it is woken once for any number of events.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;

/// One thing that happened to a call.
#[derive(Debug)]
pub enum Event {
    /// A call arrived. `request` is its one message, for a method whose client sends one;
    /// for a client-streaming method its messages follow as [`Event::Message`].
    Start {
        call: u64,
        method: String,
        metadata: Vec<(String, String)>,
        peer: String,
        timeout: Option<Duration>,
        request: Option<Bytes>,
    },
    /// A message of a client-streaming call.
    Message { call: u64, message: Bytes },
    /// The client of a client-streaming call sends no more.
    HalfClose { call: u64 },
    /// The client went away, reset the call or let its deadline pass before the call's
    /// status was written: nothing more can be sent to it.
    Cancel { call: u64 },
    /// The status of a call whose caller asked to be told was written.
    Done { call: u64 },
}

/// Events one [`Events::take`] hands over at most, so that a flood of them is taken in turns
/// with the caller's other work.
pub const TAKE_AT_MOST: usize = 4096;

pub struct Events {
    queue: Mutex<Vec<Event>>,
    fd: OwnedFd,
}

impl Events {
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd takes no pointers; a negative return is an error.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Events {
            queue: Mutex::new(Vec::new()),
            // SAFETY: `fd` was just created and is owned by nothing else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    pub fn push(&self, event: Event) {
        let first = {
            let mut queue = self.queue.lock();
            queue.push(event);
            queue.len() == 1
        };
        if first {
            self.signal();
        }
    }

    /// The events queued so far, oldest first, up to [`TAKE_AT_MOST`]; the fd stays readable
    /// while more wait. The eventfd is reset before the queue is taken, so an event pushed in
    /// between signals again rather than being left unseen.
    pub fn take(&self) -> Vec<Event> {
        let mut counter = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a buffer of 8. EAGAIN (nothing signalled) is fine.
        unsafe { libc::read(self.fd.as_raw_fd(), counter.as_mut_ptr().cast(), 8) };
        let mut queue = self.queue.lock();
        if queue.len() <= TAKE_AT_MOST {
            return std::mem::take(&mut *queue);
        }
        let rest = queue.split_off(TAKE_AT_MOST);
        let taken = std::mem::replace(&mut *queue, rest);
        drop(queue);
        self.signal();
        taken
    }

    fn signal(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a buffer of 8. It can only fail once the counter nears
        // u64::MAX, when the fd is readable anyway.
        unsafe { libc::write(self.fd.as_raw_fd(), one.as_ptr().cast(), 8) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(fd: RawFd) -> bool {
        let mut poll = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        unsafe { libc::poll(&raw mut poll, 1, 0) == 1 }
    }

    #[test]
    fn the_fd_is_readable_exactly_while_events_wait() {
        let events = Events::new().unwrap();
        assert!(!readable(events.fd()));
        events.push(Event::HalfClose { call: 1 });
        events.push(Event::Cancel { call: 2 });
        assert!(readable(events.fd()));
        let taken = events.take();
        assert_eq!(taken.len(), 2);
        assert!(matches!(taken[0], Event::HalfClose { call: 1 }));
        assert!(!readable(events.fd()));
        assert!(events.take().is_empty());
        events.push(Event::Cancel { call: 3 });
        assert!(readable(events.fd()));
        events.take();
        for call in 0..(TAKE_AT_MOST as u64 + 5) {
            events.push(Event::Done { call });
        }
        assert_eq!(events.take().len(), TAKE_AT_MOST);
        assert!(readable(events.fd()), "more wait");
        assert_eq!(events.take().len(), 5);
        assert!(!readable(events.fd()));
    }
}
