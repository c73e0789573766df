//! A file writer on a thread of its own, fed through a bounded queue: what the `--trace` timeline
//! and the `--record` file share, so no file I/O happens under the engine's or the backend's
//! locks. Each user decides what a full queue means (drop and count, or wait for room).

use std::io;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Mutex;
use std::thread::JoinHandle;

use crate::support::sync::lock;

/// The queue and the thread that drains it.
pub struct WriterThread<M> {
    queue: Mutex<Option<SyncSender<M>>>,
    writer: Mutex<Option<JoinHandle<io::Result<()>>>>,
    /// For the error when the thread panicked.
    name: &'static str,
}

impl<M: Send + 'static> WriterThread<M> {
    /// Starts thread `name`, which runs `write` over the messages (at most `capacity` waiting)
    /// until the queue closes.
    pub fn start(
        name: &'static str,
        capacity: usize,
        write: impl FnOnce(Receiver<M>) -> io::Result<()> + Send + 'static,
    ) -> io::Result<Self> {
        let (queue, messages) = sync_channel(capacity);
        let writer = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || write(messages))?;
        Ok(Self {
            queue: Mutex::new(Some(queue)),
            writer: Mutex::new(Some(writer)),
            name,
        })
    }

    /// Queues `message`, waiting for room; false once the writer has ended (or was finished).
    pub fn send(&self, message: M) -> bool {
        lock(&self.queue)
            .as_ref()
            .is_some_and(|queue| queue.send(message).is_ok())
    }

    /// Queues `message` without waiting; true when the queue was full and it was dropped.
    pub fn send_or_drop(&self, message: M) -> bool {
        lock(&self.queue)
            .as_ref()
            .is_some_and(|queue| matches!(queue.try_send(message), Err(TrySendError::Full(_))))
    }

    /// Closes the queue, lets the writer write what it holds and waits for it; later messages
    /// are dropped. Its result, once (later calls return `Ok`).
    pub fn finish(&self) -> io::Result<()> {
        drop(lock(&self.queue).take());
        match lock(&self.writer).take() {
            Some(thread) => thread
                .join()
                .unwrap_or_else(|_| Err(io::Error::other(format!("{} panicked", self.name)))),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::sync_channel;

    use super::*;

    #[test]
    fn messages_reach_the_writer_in_order_and_none_after_finish() {
        let (seen, got) = sync_channel(8);
        let writer = WriterThread::start("test-writer", 4, move |messages| {
            for message in messages {
                let _ = seen.send(message);
            }
            Ok(())
        })
        .unwrap();
        assert!(writer.send(1u32));
        assert!(!writer.send_or_drop(2), "room was left: nothing dropped");
        writer.finish().unwrap();
        assert!(!writer.send(3), "sent after finish");
        assert_eq!(got.try_iter().collect::<Vec<_>>(), [1, 2]);
        assert!(writer.finish().is_ok(), "a second finish");
    }

    #[test]
    fn a_full_queue_drops_with_send_or_drop_and_a_panicking_writer_is_an_error() {
        let (release, wait) = sync_channel::<()>(0);
        let writer = WriterThread::start("test-writer", 1, move |messages| {
            let _ = wait.recv();
            for _ in messages {}
            panic!("the writer fails");
        })
        .unwrap();
        assert!(!writer.send_or_drop(1u32));
        assert!(writer.send_or_drop(2), "a full queue drops");
        release.send(()).unwrap();
        let error = writer.finish().unwrap_err();
        assert!(
            error.to_string().contains("test-writer panicked"),
            "{error}"
        );
    }
}
