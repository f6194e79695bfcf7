//! [`Framing`]: where a connection's bytes are in the requests they carry (a head, a body of a
//! known length), followed alongside actix-http so the edge can bound what it cannot: a head over
//! the limit (431), a chunked body (411), and whether a read waits mid-request (the deadline).
//! The head is parsed with `httparse`, the parser actix-http itself uses, where it lies in the
//! bytes just read when it arrived whole (the usual case), else from a buffer of at most the
//! limit and one byte, parsed again only when a line has ended.

use std::mem::MaybeUninit;

use super::Refusal;

/// Where the bytes are in a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a head (its bytes so far are in `Framing::head`).
    Head,
    /// Reading a body: the bytes still to come.
    Body(u64),
    /// A head `httparse` refused (actix-http answers 400 and closes), or the connection was
    /// refused: nothing more is followed.
    Opaque,
}

/// One connection's request framing.
pub(super) struct Framing {
    state: State,
    /// The current head's bytes when it spans reads, at most `max_head + 1`.
    head: Vec<u8>,
    max_head: usize,
}

/// The longest head buffer kept between requests (a larger one is given back).
const KEPT_HEAD_CAPACITY: usize = 2048;
/// At most this many header lines are parsed (actix-http's own maximum).
const MAX_HEADERS: usize = 96;

impl Framing {
    /// Framing of heads up to `max_head` bytes.
    pub(super) fn new(max_head: usize) -> Self {
        Self { state: State::Head, head: Vec::new(), max_head }
    }

    /// Nothing more is followed (the connection is being refused); the buffer is given back.
    pub(super) fn stop(&mut self) {
        self.state = State::Opaque;
        self.head = Vec::new();
    }

    /// A request has begun and not yet fully arrived.
    pub(super) fn mid_request(&self) -> bool {
        matches!(self.state, State::Body(_)) || (self.state == State::Head && !self.head.is_empty())
    }

    /// Follows `data`, the bytes just read, through heads and bodies: `Ok(true)` when a request
    /// ended in them (its deadline no longer runs), or the refusal a head earns.
    pub(super) fn follow(&mut self, mut data: &[u8]) -> Result<bool, Refusal> {
        let mut ended = false;
        while !data.is_empty() {
            match self.state {
                State::Opaque => break,
                State::Body(left) => {
                    let taken = left.min(data.len() as u64);
                    data = &data[taken as usize..];
                    self.state = if taken == left { State::Head } else { State::Body(left - taken) };
                    ended |= self.state == State::Head;
                }
                State::Head => {
                    // The usual case: a whole head in what was just read, parsed where it lies.
                    if self.head.is_empty() {
                        match parse(data)? {
                            Parsed::Complete(length, _) if length > self.max_head => return Err(Refusal::HeadTooLarge),
                            Parsed::Complete(length, next) => {
                                data = &data[length..];
                                self.state = next;
                                ended |= next == State::Head;
                                continue;
                            }
                            Parsed::Invalid => {
                                self.state = State::Opaque;
                                break;
                            }
                            Parsed::Partial => {}
                        }
                    }
                    // A head over several reads: kept (up to the limit and one byte), parsed again
                    // only when a line has ended, so a head sent a byte at a time costs a parse a line.
                    let before = self.head.len();
                    let taken = data.len().min(self.max_head + 1 - before);
                    self.head.extend_from_slice(&data[..taken]);
                    let line_ended = before > 0 && data[..taken].contains(&b'\n');
                    let parsed = if line_ended { parse(&self.head)? } else { Parsed::Partial };
                    match parsed {
                        Parsed::Partial if self.head.len() > self.max_head => return Err(Refusal::HeadTooLarge),
                        Parsed::Partial => break,
                        Parsed::Invalid => {
                            self.state = State::Opaque;
                            break;
                        }
                        Parsed::Complete(length, _) if length > self.max_head => return Err(Refusal::HeadTooLarge),
                        Parsed::Complete(length, next) => {
                            data = &data[length - before..];
                            self.head.clear();
                            if self.head.capacity() > KEPT_HEAD_CAPACITY {
                                self.head = Vec::new();
                            }
                            self.state = next;
                            ended |= next == State::Head;
                        }
                    }
                }
            }
        }
        Ok(ended)
    }
}

/// What the bytes of a head so far say.
enum Parsed {
    /// The head is not complete yet (or is only empty lines so far).
    Partial,
    /// A head `httparse` refuses: actix-http answers it and closes.
    Invalid,
    /// The head is this long, and what follows it.
    Complete(usize, State),
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
    Ok(Parsed::Complete(length, if body == 0 { State::Head } else { State::Body(body) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(max_head: usize) -> Framing {
        Framing::new(max_head)
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
        assert_eq!((s.state, s.head.len()), (State::Head, 0));
        s.follow(&both).unwrap();
        assert_eq!((s.state, s.head.len()), (State::Head, 0));
        s.follow(&post[..post.len() - 2]).unwrap();
        assert_eq!(s.state, State::Body(2), "two body bytes still to come");
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
        assert_eq!(exact.follow(&fits), Ok(true), "a head of exactly the limit passes");
    }

    #[test]
    fn chunked_bodies_are_refused_and_unparsable_heads_are_left_to_actix() {
        let chunked = b"POST /buy HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(stream(1024).follow(chunked), Err(Refusal::LengthRequired));
        let mut garbage = stream(1024);
        garbage.follow(b"\x01\x02 nonsense\r\n\r\nGET / HTTP/1.1\r\n").unwrap();
        assert_eq!(garbage.state, State::Opaque);
        let mut bad_length = stream(1024);
        bad_length.follow(b"POST / HTTP/1.1\r\nContent-Length: ten\r\n\r\n").unwrap();
        assert_eq!(bad_length.state, State::Opaque);
    }
}
