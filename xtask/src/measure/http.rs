//! A minimal HTTP/1.1 client for the drivers' own requests to an app on 127.0.0.1 (the orders a
//! bench row needs bought beforehand, the checks after a load run): one request per connection,
//! and the app answers with a `Content-Length` body. Load is the generators' job, not this one's.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::time::Duration;

use anyhow::Context;
use serde_json::Value;

/// One answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

impl Answer {
    /// The body as JSON (`Null` when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// The value of the sample `sample` (a name with its labels, as `/metrics` prints it) in the
/// app's `GET /metrics` on 127.0.0.1:`port`.
pub fn metric(port: u16, sample: &str) -> anyhow::Result<f64> {
    let answer = request(port, "GET", "/metrics", &[], None)?;
    let line = answer.body.lines().find(|l| l.split_whitespace().next() == Some(sample));
    line.and_then(|l| l.split_whitespace().nth(1)?.parse().ok()).with_context(|| format!("no {sample} in /metrics"))
}

/// `method path` on 127.0.0.1:`port` with `headers`, and a JSON `body` if given.
pub fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> anyhow::Result<Answer> {
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    for (name, value) in headers {
        head += &format!("{name}: {value}\r\n");
    }
    if let Some(body) = body {
        head += &format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len());
    }
    head += "\r\n";
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.unwrap_or_default().as_bytes())?;
    let mut text = String::new();
    stream.read_to_string(&mut text).with_context(|| format!("reading the answer to {method} {path}"))?;
    let (head, body) = text.split_once("\r\n\r\n").with_context(|| format!("{method} {path}: no header end"))?;
    anyhow::ensure!(
        !head.to_ascii_lowercase().contains("transfer-encoding: chunked"),
        "{method} {path}: a chunked answer (not supported here)"
    );
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok());
    Ok(Answer { status: status.with_context(|| format!("{method} {path}: no status line"))?, body: body.into() })
}
