//! How a refused request ends its connection: the refusal's JSON answer written (held to the
//! write deadline as any answer is), our side shut, then a lingering close.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{EdgeStream, arm, expired};
use crate::http::edge::Refusal;

/// How a refused connection closes: its answer written, then what the client still sends read
/// and dropped for a moment, so the close is not a reset that could destroy the answer before
/// the client reads it (a "lingering close", as nginx and Apache do).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Closing {
    /// This many bytes of the answer are written.
    Writing(usize),
    /// The answer is written and our side shut; this many bytes of input were dropped since.
    Lingering(usize),
}

/// The longest a refused connection lingers before it is closed. A connection over its
/// client's cap is answered at once and lingers only briefly: it must not hold its descriptor.
fn linger(refusal: Refusal) -> Duration {
    match refusal {
        Refusal::TooManyConnections => Duration::from_millis(100),
        _ => Duration::from_secs(1),
    }
}

/// The most input a lingering connection drops before it is closed anyway.
const LINGER_BYTES: usize = 256 * 1024;

impl<S> EdgeStream<S> {
    /// From now on the stream writes `refusal`'s answer and ends; counted once, here. With answers
    /// to earlier requests still owed, it ends without one: HTTP/1.1 matches answers to requests
    /// by their order, so the refusal would reach the client as the first owed request's answer
    /// (a 431 for a purchase that bought), and that answer would be lost. actix then writes what it
    /// owes and closes, lingering as a refusal does ([`Self::poll_close_after_owed`]); the refused
    /// request, never processed, goes unanswered.
    pub(super) fn refuse(&mut self, refusal: Refusal) {
        self.edge.count(refusal);
        self.framing.stop();
        self.held = Vec::new();
        if self.ahead > 0 {
            self.ended = true;
            self.close_after_owed = Some(refusal);
            return;
        }
        self.refusal = Some((refusal, Closing::Writing(0)));
    }

    /// Whether the connection lingers after its refusal's answer: always when it holds a place
    /// in the budget, else if it gets one of the places to linger.
    fn may_linger(&mut self) -> bool {
        if self.slot.is_some() {
            return true;
        }
        self.linger_permit = self.edge.linger();
        self.linger_permit.is_some()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> EdgeStream<S> {
    /// actix's close of a stream that ended behind owed answers, once it has written them: our
    /// side shut, then a lingering close, so the refused request's unread rest does not turn the
    /// close into a reset that could destroy those answers before the client reads them.
    pub(super) fn poll_close_after_owed(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(refusal) = self.close_after_owed {
            if Pin::new(&mut self.inner).poll_shutdown(cx).is_pending() {
                return self.poll_write_deadline(cx).map_ok(drop);
            }
            self.close_after_owed = None;
            if self.may_linger() {
                arm(&mut self.deadline, linger(refusal));
                self.refusal = Some((refusal, Closing::Lingering(0)));
            }
        }
        self.poll_refuse(cx)
    }

    /// Writes the refusal's answer, half-closes, lingers, then reports the end of the stream.
    pub(super) fn poll_refuse(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((refusal, closing)) = self.refusal {
            match closing {
                Closing::Writing(written) => {
                    // A refusal's answer the client does not take fails at the write deadline
                    // as any answer does: a client that stops reading cannot pin the connection.
                    let answer = self.edge.answer(refusal);
                    if written < answer.len() {
                        let n = match Pin::new(&mut self.inner).poll_write(cx, &answer[written..]) {
                            Poll::Pending => return self.poll_write_deadline(cx).map_ok(drop),
                            Poll::Ready(n) => n?,
                        };
                        if n == 0 {
                            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                        }
                        self.refusal = Some((refusal, Closing::Writing(written + n)));
                        continue;
                    }
                    if Pin::new(&mut self.inner).poll_flush(cx)?.is_pending() {
                        return self.poll_write_deadline(cx).map_ok(drop);
                    }
                    // An error here means the client is gone already: the stream ends either way.
                    if Pin::new(&mut self.inner).poll_shutdown(cx).is_pending() {
                        return self.poll_write_deadline(cx).map_ok(drop);
                    }
                    if self.may_linger() {
                        arm(&mut self.deadline, linger(refusal));
                        self.refusal = Some((refusal, Closing::Lingering(0)));
                    } else {
                        self.refusal = None;
                        self.ended = true;
                    }
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
                        Poll::Pending if !expired(&mut self.deadline, cx) => return Poll::Pending,
                        Poll::Pending => true,
                    };
                    if done {
                        self.refusal = None;
                        self.ended = true;
                        self.linger_permit = None;
                    }
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}
