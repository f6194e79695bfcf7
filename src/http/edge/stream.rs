//! [`EdgeStream`]: a client's TCP stream as actix-web reads it, with the request framing
//! followed alongside, so that what actix-http cannot bound is bounded here: a request head
//! over `SECKILL_MAX_HEAD_BYTES` (431; actix-http's own limit is a fixed 128 KiB), a head or body
//! that does not arrive within `SECKILL_REQUEST_READ_TIMEOUT` (408; actix-http times only the
//! first head), a chunked body (411: every body here is small JSON with a length). Each refusal
//! writes its JSON answer, half-closes the socket and ends the stream, so actix closes the
//! connection. The head is parsed with `httparse`, the parser actix-http itself uses.
//!
//! On the fast path (a whole request in one read) this adds a scan for the end of the head and
//! one parse of it; the deadline's timer is armed only when a read waits mid-request.

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::connections::ConnectionSlot;
use super::{Edge, Refusal};

/// Where the stream is in the request it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// Reading a head (its bytes so far are in `EdgeStream::head`).
    Head,
    /// Reading a body: the bytes still to come.
    Body(u64),
    /// A head `httparse` refused: actix-http answers 400 and closes; nothing more is followed.
    Opaque,
}

/// A client connection's stream (see the module documentation).
pub struct EdgeStream<S> {
    inner: S,
    edge: Arc<Edge>,
    framing: Framing,
    /// The current head's bytes, at most `max_head_bytes + 1`.
    head: Vec<u8>,
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

/// The longest head buffer kept between requests (a larger one is given back).
const KEPT_HEAD_CAPACITY: usize = 2048;
/// At most this many header lines are parsed (actix-http's own maximum).
const MAX_HEADERS: usize = 96;

impl<S> EdgeStream<S> {
    pub(super) fn new(inner: S, edge: Arc<Edge>, slot: Option<ConnectionSlot>, refusal: Option<Refusal>) -> Self {
        let mut stream = Self {
            inner,
            edge,
            framing: Framing::Head,
            head: Vec::new(),
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
        self.framing = Framing::Opaque;
        self.head = Vec::new();
    }

    fn mid_request(&self) -> bool {
        matches!(self.framing, Framing::Body(_)) || (self.framing == Framing::Head && !self.head.is_empty())
    }

    /// Follows `data`, the bytes just read, through heads and bodies.
    fn follow(&mut self, mut data: &[u8]) -> Result<(), Refusal> {
        let max_head = self.edge.settings.max_head_bytes;
        while !data.is_empty() {
            match self.framing {
                Framing::Opaque => return Ok(()),
                Framing::Body(left) => {
                    let taken = left.min(data.len() as u64);
                    data = &data[taken as usize..];
                    self.framing = if taken == left { Framing::Head } else { Framing::Body(left - taken) };
                    if self.framing == Framing::Head {
                        self.armed = false;
                    }
                }
                Framing::Head => {
                    // The usual case: a whole head in what was just read, parsed where it lies.
                    if self.head.is_empty() {
                        match parse(data)? {
                            Parsed::Complete(length, _) if length > max_head => return Err(Refusal::HeadTooLarge),
                            Parsed::Complete(length, next) => {
                                data = &data[length..];
                                self.start(next);
                                continue;
                            }
                            Parsed::Invalid => {
                                self.framing = Framing::Opaque;
                                return Ok(());
                            }
                            Parsed::Partial => {}
                        }
                    }
                    // A head over several reads: kept (up to the limit and one byte), parsed again
                    // only when a line has ended, so a head sent a byte at a time costs a parse a line.
                    let before = self.head.len();
                    let taken = data.len().min(max_head + 1 - before);
                    self.head.extend_from_slice(&data[..taken]);
                    let line_ended = before > 0 && data[..taken].contains(&b'\n');
                    let parsed = if line_ended { parse(&self.head)? } else { Parsed::Partial };
                    match parsed {
                        Parsed::Partial if self.head.len() > max_head => return Err(Refusal::HeadTooLarge),
                        Parsed::Partial => return Ok(()),
                        Parsed::Invalid => {
                            self.framing = Framing::Opaque;
                            return Ok(());
                        }
                        Parsed::Complete(length, _) if length > max_head => return Err(Refusal::HeadTooLarge),
                        Parsed::Complete(length, next) => {
                            data = &data[length - before..];
                            self.head.clear();
                            if self.head.capacity() > KEPT_HEAD_CAPACITY {
                                self.head = Vec::new();
                            }
                            self.start(next);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// A head has ended: its body, if any, comes next.
    fn start(&mut self, next: Framing) {
        self.framing = next;
        if next == Framing::Head {
            self.armed = false;
        }
    }
}

/// What the bytes of a head so far say.
enum Parsed {
    /// The head is not complete yet (or is only empty lines so far).
    Partial,
    /// A head `httparse` refuses: actix-http answers it and closes.
    Invalid,
    /// The head is this long, and what follows it.
    Complete(usize, Framing),
}

/// Parses the head at the start of `bytes`.
fn parse(bytes: &[u8]) -> Result<Parsed, Refusal> {
    let mut headers = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut []);
    let length = match request.parse_with_uninit_headers(bytes, &mut headers) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Ok(Parsed::Partial),
        Err(_) => return Ok(Parsed::Invalid),
    };
    let mut body = 0;
    for header in request.headers.iter() {
        if header.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(Refusal::LengthRequired);
        }
        if header.name.eq_ignore_ascii_case("content-length") {
            match std::str::from_utf8(header.value).ok().and_then(|v| v.trim().parse::<u64>().ok()) {
                Some(n) => body = n,
                None => return Ok(Parsed::Invalid),
            }
        }
    }
    Ok(Parsed::Complete(length, if body == 0 { Framing::Head } else { Framing::Body(body) }))
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
                let Err(refusal) = this.follow(&buf.filled()[before..]) else {
                    return Poll::Ready(Ok(()));
                };
                // actix never sees the refused bytes; it sees the end of the stream.
                buf.set_filled(before);
                this.refuse(refusal);
                this.poll_refuse(cx)
            }
            Poll::Ready(Err(err)) => Poll::Ready(Err(err)),
            Poll::Pending => {
                if !this.mid_request() {
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

    fn stream(max_head_bytes: usize) -> EdgeStream<()> {
        EdgeStream::new((), edge(max_head_bytes), None, None)
    }

    #[test]
    fn heads_and_bodies_are_followed_across_reads_and_pipelined_requests() {
        let mut s = stream(1024);
        let post = b"POST /buy HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
        let get = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
        let both = [&post[..], &get[..], &post[..]].concat();
        // Byte by byte, then all at once: the same framing.
        for chunk in both.chunks(1) {
            s.follow(chunk).unwrap();
        }
        assert_eq!((s.framing, s.head.len()), (Framing::Head, 0));
        s.follow(&both).unwrap();
        assert_eq!((s.framing, s.head.len()), (Framing::Head, 0));
        s.follow(&post[..post.len() - 2]).unwrap();
        assert_eq!(s.framing, Framing::Body(2), "two body bytes still to come");
        assert!(s.mid_request());
        s.follow(b"lo\r\n").unwrap();
        assert!(s.mid_request(), "a blank line after a body is only the start of a head");
        s.follow(get).unwrap();
        assert!(!s.mid_request());
    }

    #[test]
    fn a_head_over_the_limit_is_refused_whatever_its_reads() {
        let mut big = b"GET / HTTP/1.1\r\nHost: x\r\nCookie: ".to_vec();
        big.extend(std::iter::repeat_n(b'a', 2000));
        let mut whole = stream(1024);
        assert_eq!(whole.follow(&big), Err(Refusal::HeadTooLarge));
        let mut pieces = stream(1024);
        let refused = big.chunks(100).map(|chunk| pieces.follow(chunk)).find(Result::is_err);
        assert_eq!(refused, Some(Err(Refusal::HeadTooLarge)));
        assert!(pieces.head.len() <= 1025, "the buffer never holds more than the limit and one byte");
        let mut exact = stream(1024);
        let mut fits = b"GET / HTTP/1.1\r\nX: ".to_vec();
        fits.extend(std::iter::repeat_n(b'a', 1024 - fits.len() - 4));
        fits.extend(b"\r\n\r\n");
        assert_eq!(fits.len(), 1024);
        assert_eq!(exact.follow(&fits), Ok(()), "a head of exactly the limit passes");
    }

    #[test]
    fn chunked_bodies_are_refused_and_unparsable_heads_are_left_to_actix() {
        let chunked = b"POST /buy HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(stream(1024).follow(chunked), Err(Refusal::LengthRequired));
        let mut garbage = stream(1024);
        garbage.follow(b"\x01\x02 nonsense\r\n\r\nGET / HTTP/1.1\r\n").unwrap();
        assert_eq!(garbage.framing, Framing::Opaque);
        let mut bad_length = stream(1024);
        bad_length.follow(b"POST / HTTP/1.1\r\nContent-Length: ten\r\n\r\n").unwrap();
        assert_eq!(bad_length.framing, Framing::Opaque);
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
