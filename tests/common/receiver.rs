//! A webhook receiver for the tests: a bare HTTP/1.1 server on 127.0.0.1:0 that records every
//! attempt (its `webhook-*` headers and body) and answers as its [`Mode`] says, and the
//! signature check a receiver runs, written here from the spec and independent of the service.

use std::sync::{Arc, Mutex};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The secret of the test deployments, and its key.
pub const WEBHOOK_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// How the receiver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// 500 to the first attempt of each `webhook-id`, 200 after.
    FailFirst,
    /// 200 to everything.
    Accept,
    /// Closes every connection without an answer (a receiver that is down).
    Down,
    /// Reads each request and never answers, holding the connection until the sender gives up (a
    /// receiver that hangs).
    Hang,
    /// 500 to everything, with a body that holds a NUL byte.
    RefuseWithNul,
}

/// One request received.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub id: String,
    pub timestamp: String,
    pub signature: String,
    pub body: String,
    /// What the receiver answered (0: nothing, it was down).
    pub answered: u16,
}

#[derive(Default)]
struct State {
    mode: Option<Mode>,
    attempts: Vec<Attempt>,
}

/// A running receiver; dropped, it stops.
pub struct Receiver {
    /// `http://127.0.0.1:<port>/hook`
    pub url: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    pub async fn start(mode: Mode) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State { mode: Some(mode), attempts: vec![] }));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, shared.clone()));
            }
        });
        Self { url, state, task }
    }

    /// Every request so far, in arrival order.
    pub fn attempts(&self) -> Vec<Attempt> {
        self.state.lock().unwrap().attempts.clone()
    }

    pub fn set_mode(&self, mode: Mode) {
        self.state.lock().unwrap().mode = Some(mode);
    }
}

/// Reads one request (headers up to 16 KiB, then its Content-Length), answers, closes.
async fn serve(mut stream: TcpStream, state: Arc<Mutex<State>>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) if buf.len() + n <= 16 * 1024 => buf.extend_from_slice(&chunk[..n]),
            Ok(_) => return,
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let header = |name: &str| {
        head.lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_owned())
            .unwrap_or_default()
    };
    let length: usize = header("content-length").parse().unwrap_or(0);
    while buf.len() < head_end + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body = String::from_utf8_lossy(&buf[head_end..head_end + length]).to_string();
    let id = header("webhook-id");
    let answered = {
        let mut state = state.lock().unwrap();
        let seen = state.attempts.iter().any(|a| a.id == id);
        let answered = match state.mode.unwrap_or(Mode::Accept) {
            Mode::Down | Mode::Hang => 0,
            Mode::Accept => 200,
            Mode::FailFirst if seen => 200,
            Mode::FailFirst | Mode::RefuseWithNul => 500,
        };
        let (timestamp, signature) = (header("webhook-timestamp"), header("webhook-signature"));
        state.attempts.push(Attempt { id, timestamp, signature, body, answered });
        answered
    };
    if answered == 0 {
        if state.lock().unwrap().mode == Some(Mode::Hang) {
            // Held open, unanswered, until the sender closes it.
            while let Ok(1..) = stream.read(&mut chunk).await {}
        }
        return; // dropped: the connection closes without an answer
    }
    let reason = if answered == 200 { "OK" } else { "Internal Server Error" };
    let body = if state.lock().unwrap().mode == Some(Mode::RefuseWithNul) { "x\0y" } else { "no" };
    let answer =
        format!("HTTP/1.1 {answered} {reason}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
    let _ = stream.write_all(answer.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Whether one of the attempt's `v1` signatures is the HMAC-SHA256, keyed by `secret`'s bytes,
/// of `"<id>.<timestamp>.<body>"` (the Standard Webhooks check).
pub fn signature_valid(secret: &str, attempt: &Attempt) -> bool {
    let key = STANDARD.decode(secret.strip_prefix("whsec_").unwrap()).unwrap();
    attempt.signature.split(' ').filter_map(|s| s.strip_prefix("v1,")).any(|sig| {
        let Ok(sig) = STANDARD.decode(sig) else { return false };
        let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
        mac.update(format!("{}.{}.{}", attempt.id, attempt.timestamp, attempt.body).as_bytes());
        mac.verify_slice(&sig).is_ok()
    })
}
