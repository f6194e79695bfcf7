//! [`Framing`]: where a connection's bytes are in the requests they carry (a head, a body of a
//! known length), followed alongside actix-http so the edge can bound what it cannot: a head over
//! the limit or over 96 header lines (431), a chunked body (411), a head actix-http would refuse
//! (400, answered here with the JSON error actix-http's own empty answer lacks), how many
//! requests a read hands on (the pipelining bound), and whether a read waits mid-request (the
//! deadline). The head is parsed with `httparse`, the parser actix-http itself uses, with the
//! checks actix-http's decoder adds after it (one `Content-Length`, one `Host`, a `Host` in
//! HTTP/1.1, a URI `http` accepts), where it lies in the bytes just read when it arrived whole
//! (the usual case), else from a buffer of at most the limit and one byte, parsed again only
//! when a line has ended.

use std::mem::MaybeUninit;

use super::Refusal;

/// Where the bytes are in a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a head (its bytes so far are in `Framing::head`).
    Head,
    /// Reading a body: the bytes still to come.
    Body(u64),
    /// The connection was refused: nothing more is followed.
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

    /// Follows `data`, the bytes just read, through heads and bodies, stopping right after the
    /// `ends`-th request that ends in them (at least one): how many requests ended and how many
    /// bytes were followed (the rest is for a later call), or the refusal a head earns.
    pub(super) fn follow(&mut self, data: &[u8], ends: u32) -> Result<Followed, Refusal> {
        let total = data.len();
        let mut data = data;
        let mut ended = 0;
        while !data.is_empty() && ended < ends.max(1) {
            match self.state {
                State::Opaque => data = &[],
                State::Body(left) => {
                    let taken = left.min(data.len() as u64);
                    data = &data[taken as usize..];
                    self.state = if taken == left { State::Head } else { State::Body(left - taken) };
                    ended += u32::from(self.state == State::Head);
                }
                State::Head => {
                    // The usual case: a whole head in what was just read, parsed where it lies.
                    if self.head.is_empty() {
                        match parse(data)? {
                            Parsed::Complete(length, _) if length > self.max_head => return Err(Refusal::HeadTooLarge),
                            Parsed::Complete(length, next) => {
                                data = &data[length..];
                                self.state = next;
                                ended += u32::from(next == State::Head);
                                continue;
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
                        // Everything read so far is in the buffer.
                        Parsed::Partial => data = &[],
                        Parsed::Complete(length, _) if length > self.max_head => return Err(Refusal::HeadTooLarge),
                        Parsed::Complete(length, next) => {
                            data = &data[length - before..];
                            self.head.clear();
                            if self.head.capacity() > KEPT_HEAD_CAPACITY {
                                self.head = Vec::new();
                            }
                            self.state = next;
                            ended += u32::from(next == State::Head);
                        }
                    }
                }
            }
        }
        Ok(Followed { ended, taken: total - data.len() })
    }
}

/// What [`Framing::follow`] went through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Followed {
    /// The requests that ended.
    pub(super) ended: u32,
    /// The bytes followed, from the start of the data.
    pub(super) taken: usize,
}

/// What the bytes of a head so far say.
enum Parsed {
    /// The head is not complete yet (or is only empty lines so far).
    Partial,
    /// The head is this long, and what follows it.
    Complete(usize, State),
}

/// Parses the head at the start of `bytes`, refusing what actix-http's decoder refuses.
fn parse(bytes: &[u8]) -> Result<Parsed, Refusal> {
    let mut headers = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut []);
    let length = match request.parse_with_uninit_headers(bytes, &mut headers) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Ok(Parsed::Partial),
        Err(httparse::Error::TooManyHeaders) => return Err(Refusal::HeadTooLarge),
        Err(_) => return Err(Refusal::BadRequest),
    };
    if http::Uri::try_from(request.path.unwrap_or_default()).is_err() {
        return Err(Refusal::BadRequest);
    }
    // actix-http reads the body of a CONNECT, or of a request asking a WebSocket upgrade, until the
    // client closes, Content-Length or not: followed here as ended, it would hold its connection
    // with no deadline. No route upgrades or tunnels.
    if request.method == Some("CONNECT") {
        return Err(Refusal::BadRequest);
    }
    let (mut body, mut hosts) = (None, 0);
    for header in request.headers.iter() {
        if header.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(Refusal::LengthRequired);
        }
        if header.name.eq_ignore_ascii_case("upgrade")
            && std::str::from_utf8(header.value).is_ok_and(|v| v.trim().eq_ignore_ascii_case("websocket"))
        {
            return Err(Refusal::BadRequest);
        }
        if header.name.eq_ignore_ascii_case("content-length") {
            let value = std::str::from_utf8(header.value).map(str::trim).unwrap_or("+");
            match value.parse::<u64>() {
                Ok(n) if body.is_none() && !value.starts_with('+') => body = Some(n),
                _ => return Err(Refusal::BadRequest),
            }
        }
        hosts += u32::from(header.name.eq_ignore_ascii_case("host"));
    }
    let http11 = request.version == Some(1);
    let post10 = !http11 && request.method == Some("POST") && body.is_none();
    if hosts > 1 || (http11 && hosts == 0) || post10 {
        return Err(Refusal::BadRequest);
    }
    let body = body.unwrap_or(0);
    Ok(Parsed::Complete(length, if body == 0 { State::Head } else { State::Body(body) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(max_head: usize) -> Framing {
        Framing::new(max_head)
    }

    /// Follows all of `data`, however many requests end in it.
    fn all(s: &mut Framing, data: &[u8]) -> Result<u32, Refusal> {
        s.follow(data, u32::MAX).map(|followed| followed.ended)
    }

    #[test]
    fn heads_and_bodies_are_followed_across_reads_and_pipelined_requests() {
        let mut s = stream(1024);
        let post = b"POST /buy HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
        let get = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
        let both = [&post[..], &get[..], &post[..]].concat();
        // Byte by byte, then all at once: the same framing.
        let ended: u32 = both.chunks(1).map(|chunk| all(&mut s, chunk).unwrap()).sum();
        assert_eq!((s.state, s.head.len(), ended), (State::Head, 0, 3));
        assert_eq!(all(&mut s, &both), Ok(3));
        assert_eq!((s.state, s.head.len()), (State::Head, 0));
        all(&mut s, &post[..post.len() - 2]).unwrap();
        assert_eq!(s.state, State::Body(2), "two body bytes still to come");
        assert!(s.mid_request());
        all(&mut s, b"lo\r\n").unwrap();
        assert!(s.mid_request(), "a blank line after a body is only the start of a head");
        all(&mut s, get).unwrap();
        assert!(!s.mid_request());
    }

    #[test]
    fn following_stops_after_the_requests_it_may_hand_on() {
        let get = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
        let post = b"POST /buy HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
        let pipelined = [&get[..], &post[..], &get[..]].concat();
        let mut s = stream(1024);
        assert_eq!(s.follow(&pipelined, 2), Ok(Followed { ended: 2, taken: get.len() + post.len() }));
        assert_eq!(s.follow(&pipelined[get.len() + post.len()..], 2), Ok(Followed { ended: 1, taken: get.len() }));
        // Zero is taken as one: the request under way is always handed on to its end.
        let mut mid = stream(1024);
        assert_eq!(mid.follow(&post[..20], 0), Ok(Followed { ended: 0, taken: 20 }));
        let rest = [&post[20..], &get[..]].concat();
        assert_eq!(mid.follow(&rest, 0), Ok(Followed { ended: 1, taken: post.len() - 20 }));
    }

    #[test]
    fn a_head_over_the_limit_is_refused_whatever_its_reads() {
        let mut big = b"GET / HTTP/1.1\r\nHost: x\r\nCookie: ".to_vec();
        big.extend(std::iter::repeat_n(b'a', 2000));
        let mut whole = stream(1024);
        assert_eq!(all(&mut whole, &big), Err(Refusal::HeadTooLarge));
        let mut pieces = stream(1024);
        let refused = big.chunks(100).map(|chunk| all(&mut pieces, chunk)).find(Result::is_err);
        assert_eq!(refused, Some(Err(Refusal::HeadTooLarge)));
        assert!(pieces.head.len() <= 1025, "the buffer never holds more than the limit and one byte");
        let mut exact = stream(1024);
        let mut fits = b"GET / HTTP/1.1\r\nHost: x\r\nX: ".to_vec();
        fits.extend(std::iter::repeat_n(b'a', 1024 - fits.len() - 4));
        fits.extend(b"\r\n\r\n");
        assert_eq!(fits.len(), 1024);
        assert_eq!(all(&mut exact, &fits), Ok(1), "a head of exactly the limit passes");
        let many = format!("GET / HTTP/1.1\r\nHost: x\r\n{}\r\n", "A: b\r\n".repeat(96));
        assert_eq!(all(&mut stream(8192), many.as_bytes()), Err(Refusal::HeadTooLarge), "97 header lines");
    }

    #[test]
    fn heads_actix_refuses_are_refused_here_and_chunked_bodies_too() {
        let chunked = b"POST /buy HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(all(&mut stream(1024), chunked), Err(Refusal::LengthRequired));
        for bad in [
            &b"\x01\x02 nonsense\r\n\r\n"[..],
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello",
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
            b"GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
            b"GET / HTTP/1.1\r\n\r\n",
            b"POST /buy HTTP/1.0\r\n\r\n",
            b"GET http://[::1 HTTP/1.1\r\nHost: x\r\n\r\n",
            b"POST /buy HTTP/1.1\r\nHost: x\r\nUpgrade:  WebSocket \r\nContent-Length: 2\r\n\r\n{}",
            b"CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n",
        ] {
            assert_eq!(all(&mut stream(1024), bad), Err(Refusal::BadRequest), "{}", String::from_utf8_lossy(bad));
        }
        for good in [
            &b"GET / HTTP/1.0\r\n\r\n"[..],
            b"GET /sales/a?x=1 HTTP/1.1\r\nhost: x\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n",
        ] {
            assert_eq!(all(&mut stream(1024), good), Ok(1), "{}", String::from_utf8_lossy(good));
        }
    }
}
