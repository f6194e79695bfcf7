//! [`EdgeStream`]: a client's TCP stream as actix-web reads it, with the request framing
//! followed alongside (`super::framing`), so that what actix-http cannot bound is bounded here:
//! a request head over `SECKILL_MAX_HEAD_BYTES` (431; actix-http's own limit is a fixed 128 KiB),
//! a head or body that does not arrive within `SECKILL_REQUEST_READ_TIMEOUT` (408; actix-http
//! times only the first head), a chunked body (411: every body here is small JSON with a length).
//! Each refusal writes its JSON answer, half-closes the socket, lingers, and ends the stream, so
//! actix closes the connection.
//!
//! On the fast path (a whole request in one read) this adds one parse of the head where it lies;
//! the deadline's timer is armed only when a read waits mid-request.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::connections::ConnectionSlot;
use super::framing::Framing;
use super::{Edge, Refusal};

/// A client connection's stream (see the module documentation).
pub struct EdgeStream<S> {
    inner: S,
    edge: Arc<Edge>,
    framing: Framing,
    /// The running request's deadline, once a read has waited mid-request.
    deadline: Option<Pin<Box<Sleep>>>,
    armed: bool,
    /// The refused request's answer, being written, then its lingering close.
    refusal: Option<(Refusal, Closing)>,
    /// The refusal's answer is written: the stream has ended for actix.
    ended: bool,
    _slot: Option<ConnectionSlot>,
}

/// How a refused connection closes: its answer written, then what the client still sends read
/// and dropped for a moment, so the close is not a reset that could destroy the answer before
/// the client reads it (a "lingering close", as nginx and Apache do).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closing {
    /// Waiting for the client's first bytes (a connection refused at accept), so the answer
    /// follows its request rather than surprising a client that has not sent it yet.
    Awaiting,
    /// This many bytes of the answer are written.
    Writing(usize),
    /// The answer is written and our side shut; this many bytes of input were dropped since.
    Lingering(usize),
}

/// The longest a refused connection lingers before it is closed. A connection over its
/// client's cap only drops what has already arrived: it must not hold its file for longer.
fn linger(refusal: Refusal) -> Duration {
    match refusal {
        Refusal::TooManyConnections => Duration::ZERO,
        _ => Duration::from_secs(1),
    }
}

/// How long a connection refused at accept waits for its request before it is answered anyway.
const AWAIT_REQUEST: Duration = Duration::from_secs(1);
/// The most input a lingering connection drops before it is closed anyway.
const LINGER_BYTES: usize = 256 * 1024;

impl<S> EdgeStream<S> {
    pub(super) fn new(inner: S, edge: Arc<Edge>, slot: Option<ConnectionSlot>, refusal: Option<Refusal>) -> Self {
        let mut stream = Self {
            framing: Framing::new(edge.settings.max_head_bytes),
            inner,
            edge,
            deadline: None,
            armed: false,
            refusal: None,
            ended: false,
            _slot: slot,
        };
        if let Some(refusal) = refusal {
            stream.refuse(refusal);
        }
        stream
    }

    /// From now on the stream writes `refusal`'s answer and ends; counted once, here.
    fn refuse(&mut self, refusal: Refusal) {
        self.edge.count(refusal);
        let closing = if refusal == Refusal::TooManyConnections { Closing::Awaiting } else { Closing::Writing(0) };
        self.refusal = Some((refusal, closing));
        self.framing.stop();
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> EdgeStream<S> {
    /// Writes the refusal's answer, half-closes, lingers, then reports the end of the stream.
    fn poll_refuse(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((refusal, closing)) = self.refusal {
            match closing {
                Closing::Awaiting => {
                    if !self.armed {
                        self.arm(AWAIT_REQUEST);
                    }
                    let mut scratch = [0; 4096];
                    let mut input = ReadBuf::new(&mut scratch);
                    match Pin::new(&mut self.inner).poll_read(cx, &mut input) {
                        Poll::Ready(Ok(())) if input.filled().is_empty() => {
                            self.refusal = None;
                            self.ended = true;
                        }
                        Poll::Ready(Ok(())) => self.refusal = Some((refusal, Closing::Writing(0))),
                        Poll::Ready(Err(err)) => return Poll::Ready(Err(err)),
                        Poll::Pending => {
                            if !self.deadline.as_mut().is_some_and(|sleep| sleep.as_mut().poll(cx).is_ready()) {
                                return Poll::Pending;
                            }
                            self.refusal = Some((refusal, Closing::Writing(0)));
                        }
                    }
                }
                Closing::Writing(written) => {
                    let answer = self.edge.answer(refusal);
                    if written < answer.len() {
                        let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &answer[written..]))?;
                        if n == 0 {
                            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                        }
                        self.refusal = Some((refusal, Closing::Writing(written + n)));
                        continue;
                    }
                    ready!(Pin::new(&mut self.inner).poll_flush(cx))?;
                    // An error here means the client is gone already: the stream ends either way.
                    let _ = ready!(Pin::new(&mut self.inner).poll_shutdown(cx));
                    self.arm(linger(refusal));
                    self.refusal = Some((refusal, Closing::Lingering(0)));
                }
                Closing::Lingering(dropped) => {
                    let mut scratch = [0; 4096];
                    let mut input = ReadBuf::new(&mut scratch);
                    let read = Pin::new(&mut self.inner).poll_read(cx, &mut input);
                    let done = match read {
                        Poll::Ready(Ok(())) if !input.filled().is_empty() => {
                            let dropped = dropped + input.filled().len();
                            self.refusal = Some((refusal, Closing::Lingering(dropped)));
                            dropped > LINGER_BYTES
                        }
                        // The client closed its side, or is gone.
                        Poll::Ready(_) => true,
                        Poll::Pending => {
                            let waits = !linger(refusal).is_zero();
                            if waits && !self.deadline.as_mut().is_some_and(|sleep| sleep.as_mut().poll(cx).is_ready())
                            {
                                return Poll::Pending;
                            }
                            true
                        }
                    };
                    if done {
                        self.refusal = None;
                        self.ended = true;
                    }
                }
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Sets the deadline `after` from now.
    fn arm(&mut self, after: Duration) {
        let at = Instant::now() + after;
        match &mut self.deadline {
            Some(sleep) => sleep.as_mut().reset(at),
            None => self.deadline = Some(Box::pin(tokio::time::sleep_until(at))),
        }
        self.armed = true;
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
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let refusal = match this.framing.follow(&buf.filled()[before..]) {
                    Ok(request_ended) => {
                        // A request that has fully arrived no longer runs against its deadline.
                        this.armed &= !request_ended;
                        return Poll::Ready(Ok(()));
                    }
                    Err(refusal) => refusal,
                };
                // actix never sees the refused bytes; it sees the end of the stream.
                buf.set_filled(before);
                this.refuse(refusal);
                this.poll_refuse(cx)
            }
            Poll::Ready(Err(err)) => Poll::Ready(Err(err)),
            Poll::Pending => {
                if !this.framing.mid_request() {
                    this.armed = false;
                    return Poll::Pending;
                }
                if !this.armed {
                    this.arm(this.edge.settings.read_timeout);
                }
                let expired = this.deadline.as_mut().is_some_and(|sleep| sleep.as_mut().poll(cx).is_ready());
                if !expired {
                    return Poll::Pending;
                }
                this.refuse(Refusal::ReadTimeout);
                this.poll_refuse(cx)
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for EdgeStream<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::http::edge::EdgeSettings;
    use crate::metrics::Metrics;

    fn edge(max_head_bytes: usize) -> Arc<Edge> {
        let settings =
            EdgeSettings { read_timeout: Duration::from_millis(200), max_head_bytes, max_connections_per_client: 0 };
        Edge::new(settings, 64, Default::default(), &Metrics::new())
    }

    #[tokio::test]
    async fn a_body_that_stops_arriving_gets_408_and_the_end_of_the_stream() {
        let (client, server) = tokio::io::duplex(4096);
        let mut edge_side = EdgeStream::new(server, edge(1024), None, None);
        let (mut client_read, mut client_write) = tokio::io::split(client);
        client_write.write_all(b"POST /buy HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\n\r\n{\"sale").await.unwrap();
        let mut seen = vec![0; 4096];
        let n = edge_side.read(&mut seen).await.unwrap();
        assert!(n > 0, "the head and the start of the body reach actix");
        let started = Instant::now();
        let end = edge_side.read(&mut seen).await.unwrap();
        assert_eq!(end, 0, "then the stream ends");
        assert!(started.elapsed() >= Duration::from_millis(200), "no sooner than the deadline");
        let mut answer = String::new();
        client_read.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
        assert!(answer.contains(r#""error":"request_timeout""#), "{answer}");
    }
}
