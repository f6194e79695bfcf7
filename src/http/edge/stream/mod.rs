//! [`EdgeStream`]: a client's TCP stream as actix-web reads and writes it, with the request
//! framing followed alongside (`super::framing`), so that what actix-http cannot bound is bounded
//! here:
//! - a request head over `SECKILL_MAX_HEAD_BYTES` or 96 header lines (431; actix-http's own size
//!   limit is a fixed 128 KiB), a head actix-http would refuse (400, with a JSON body where
//!   actix-http's has none), a chunked body (411: every body here is small JSON with a length);
//! - a head or body that does not arrive within `SECKILL_REQUEST_READ_TIMEOUT`, counted from the
//!   connection's start for its first head (408; actix-http times only the first head, with an
//!   empty answer); a connection that sent nothing at all is closed at that deadline without an
//!   answer, as no request was made;
//! - requests pipelined ahead of their answers: actix-http reads and decodes every request a
//!   client sends whether or not it takes the answers, so a read hands it at most
//!   `SECKILL_MAX_PIPELINED_REQUESTS` requests beyond those whose answers it has written and
//!   flushed (the rest waits here, at most one read's bytes, or in the kernel);
//! - answers the client does not take: once a write waits, actix-http's unwritten answers must be
//!   taken within `SECKILL_RESPONSE_WRITE_TIMEOUT`, else the write fails and actix-http drops
//!   the connection (counted as `write_timeout`). A refusal's own answer (below) is held to the
//!   same deadline: its stream fails when it is passed.
//!
//! Each refusal writes its JSON answer, half-closes the socket, lingers, and ends the stream, so
//! actix closes the connection; behind requests whose answers are still owed, it only ends the
//! stream (actix writes them, then closes), as its answer would take the place of theirs. A
//! connection refused at once (over its client's share or the budget) holds a descriptor the
//! budget does not count: it lingers only if fewer than `LINGERING_REFUSALS` do, else it ends as
//! soon as its answer is written.
//!
//! On the fast path (a whole request in one read, its answer written at once) this adds one
//! parse of the head where it lies and a few flags; the timers are armed only when a read waits
//! mid-request (or before the first head) or a write waits.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use self::refusal::Closing;
use super::connections::ConnectionSlot;
use super::framing::{Followed, Framing};
use super::{Edge, LingerPermit, Refusal};

/// A client connection's stream (see the module documentation).
pub struct EdgeStream<S> {
    inner: S,
    edge: Arc<Edge>,
    framing: Framing,
    /// The running request's read deadline, once a read has waited mid-request (or for the
    /// first head).
    deadline: Option<Pin<Box<Sleep>>>,
    armed: bool,
    /// A byte of the first request has arrived.
    begun: bool,
    /// Requests handed to actix whose answers have not been written yet, as flushes count them.
    ahead: u32,
    /// Bytes read past the requests actix may have yet, handed on first by the next reads.
    held: Vec<u8>,
    /// A read waits for answers to be written; the flush that writes them wakes it.
    paused: bool,
    /// Bytes were written since the last flush.
    wrote: bool,
    /// When actix's unwritten answers must have been taken, once a write has waited.
    write_deadline: Option<Pin<Box<Sleep>>>,
    write_armed: bool,
    /// The write deadline passed: every write fails.
    write_timed_out: bool,
    /// The refused request's answer, being written, then its lingering close.
    refusal: Option<(Refusal, Closing)>,
    /// The refusal's answer is written: the stream has ended for actix.
    ended: bool,
    /// A refusal behind owed answers ended the stream without its own: actix's close lingers.
    close_after_owed: Option<Refusal>,
    /// Its place in the budget, none for a connection refused at once.
    slot: Option<ConnectionSlot>,
    /// A connection refused at once, lingering: its place among those that may.
    linger_permit: Option<LingerPermit>,
}

/// The largest buffer of held bytes kept once it is empty (a larger one is given back).
const KEPT_HELD_CAPACITY: usize = 16 * 1024;

/// Arms `sleep` (made on first use) to end `after` from now.
fn arm(sleep: &mut Option<Pin<Box<Sleep>>>, after: Duration) {
    let at = Instant::now() + after;
    match sleep {
        Some(sleep) => sleep.as_mut().reset(at),
        None => *sleep = Some(Box::pin(tokio::time::sleep_until(at))),
    }
}

/// Whether `sleep` has ended (registering `cx` to be woken when it does).
fn expired(sleep: &mut Option<Pin<Box<Sleep>>>, cx: &mut Context<'_>) -> bool {
    sleep.as_mut().is_some_and(|sleep| sleep.as_mut().poll(cx).is_ready())
}

impl<S> EdgeStream<S> {
    pub(super) fn new(inner: S, edge: Arc<Edge>, slot: Option<ConnectionSlot>, refusal: Option<Refusal>) -> Self {
        let mut stream = Self {
            framing: Framing::new(edge.settings.max_head_bytes),
            inner,
            edge,
            deadline: None,
            armed: false,
            begun: false,
            ahead: 0,
            held: Vec::new(),
            paused: false,
            wrote: false,
            write_deadline: None,
            write_armed: false,
            write_timed_out: false,
            refusal: None,
            ended: false,
            close_after_owed: None,
            slot,
            linger_permit: None,
        };
        if let Some(refusal) = refusal {
            stream.refuse(refusal);
        }
        stream
    }

    /// Requests actix may be handed now (at least one: the request under way always goes on).
    fn allowed(&self) -> u32 {
        self.edge.settings.max_pipelined.saturating_sub(self.ahead)
    }

    /// Counts what a read hands on: its requests are ahead of their answers, and a request
    /// that has fully arrived no longer runs against its read deadline.
    fn handed_on(&mut self, followed: Followed) {
        self.ahead += followed.ended;
        self.armed &= followed.ended == 0;
    }

    /// Hands on what is held from an earlier read, as far as actix may have it.
    fn hand_on_held(&mut self, buf: &mut ReadBuf<'_>) -> Result<(), Refusal> {
        let n = self.held.len().min(buf.remaining());
        let followed = self.framing.follow(&self.held[..n], self.allowed())?;
        buf.put_slice(&self.held[..followed.taken]);
        self.held.drain(..followed.taken);
        if self.held.is_empty() && self.held.capacity() > KEPT_HELD_CAPACITY {
            self.held = Vec::new();
        }
        self.handed_on(followed);
        Ok(())
    }

    /// Notes what a write did: bytes went out, or it waits against the write deadline.
    fn after_write(&mut self, cx: &mut Context<'_>, written: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        match written {
            Poll::Ready(Ok(n)) => {
                self.wrote |= n > 0;
                Poll::Ready(Ok(n))
            }
            Poll::Pending => self.poll_write_deadline(cx),
            Poll::Ready(Err(err)) => Poll::Ready(Err(err)),
        }
    }

    /// The write deadline, for a write that waits: armed by the first wait after a flush,
    /// failing every write once passed.
    fn poll_write_deadline(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if !self.write_armed {
            arm(&mut self.write_deadline, self.edge.settings.write_timeout);
            self.write_armed = true;
        }
        if !expired(&mut self.write_deadline, cx) {
            return Poll::Pending;
        }
        if !self.write_timed_out {
            self.write_timed_out = true;
            self.edge.write_timeouts.inc();
        }
        Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "the client did not take its answers in time")))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> EdgeStream<S> {
    /// Reads from the socket into `buf`, handing actix only what it may have yet (the rest is
    /// held), or the refusal the bytes earn.
    fn poll_read_socket(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<Option<Refusal>>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        let read = &buf.filled()[before..];
        self.begun |= !read.is_empty();
        let followed = match self.framing.follow(read, self.allowed()) {
            Ok(followed) => followed,
            Err(refusal) => {
                // actix never sees the refused bytes; it sees the end of the stream.
                buf.set_filled(before);
                return Poll::Ready(Ok(Some(refusal)));
            }
        };
        if followed.taken < read.len() {
            self.held.extend_from_slice(&read[followed.taken..]);
            buf.set_filled(before + followed.taken);
        }
        self.handed_on(followed);
        Poll::Ready(Ok(None))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for EdgeStream<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(Ok(()));
        }
        if this.refusal.is_some() {
            return this.poll_refuse(cx);
        }
        // Between requests, a client that has as many requests ahead as it may waits for their
        // answers to be written.
        if this.allowed() == 0 && !this.framing.mid_request() {
            this.paused = true;
            return Poll::Pending;
        }
        let refused = if this.held.is_empty() {
            match this.poll_read_socket(cx, buf) {
                Poll::Ready(Ok(refused)) => refused,
                Poll::Ready(Err(err)) => return Poll::Ready(Err(err)),
                Poll::Pending => return this.poll_read_deadline(cx),
            }
        } else {
            this.hand_on_held(buf).err()
        };
        match refused {
            None => Poll::Ready(Ok(())),
            Some(refusal) => {
                this.refuse(refusal);
                this.poll_refuse(cx)
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> EdgeStream<S> {
    /// A read that waits: mid-request or before the first head, against the read deadline.
    fn poll_read_deadline(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.begun && !self.framing.mid_request() {
            self.armed = false;
            return Poll::Pending;
        }
        if !self.armed {
            arm(&mut self.deadline, self.edge.settings.read_timeout);
            self.armed = true;
        }
        if !expired(&mut self.deadline, cx) {
            return Poll::Pending;
        }
        if !self.begun {
            // Nothing arrived, so there is no request to answer: the stream ends without one. An
            // HTTP client may hold such a connection idle in its pool, where an answer it did not
            // ask for is an error (hyper's `UnexpectedMessage`) and an end is not.
            self.edge.count(Refusal::ReadTimeout);
            self.ended = true;
            return Poll::Ready(Ok(()));
        }
        self.refuse(Refusal::ReadTimeout);
        self.poll_refuse(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for EdgeStream<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.write_timed_out {
            return this.poll_write_deadline(cx);
        }
        let written = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.after_write(cx, written)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.write_timed_out {
            return this.poll_write_deadline(cx);
        }
        let written = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.after_write(cx, written)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    /// actix-http flushes once its buffer of answers is all written (after each answer while the
    /// next request's handler runs): the write deadline stops, and if bytes went out, one request
    /// ahead counts as answered and a paused read goes on. One, not all: a flush after the first
    /// of several answers must not let `SECKILL_MAX_PIPELINED_REQUESTS` more requests in while
    /// the others still wait in actix (which would hold up to its own 16 decoded requests). A
    /// flush of several answers at once counts one, so a read goes on with fewer than it may.
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(Pin::new(&mut this.inner).poll_flush(cx))?;
        this.write_armed = false;
        if std::mem::take(&mut this.wrote) {
            this.ahead = this.ahead.saturating_sub(1);
            if std::mem::take(&mut this.paused) {
                cx.waker().wake_by_ref();
            }
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.close_after_owed.is_some() || matches!(this.refusal, Some((_, Closing::Lingering(_)))) {
            return this.poll_close_after_owed(cx);
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

mod refusal;
#[cfg(test)]
mod tests;
