//! A minimal HTTP/1.1 client for the tests of `batond --http-listen`: one
//! request per connection (`Connection: close`), the answer read to its
//! end, bounded in time; and a reader of the Prometheus text format that
//! refuses any line it cannot parse.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// How long one request may take.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// An answer: status code, headers (names lower-cased) and body.
#[derive(Debug, Clone)]
pub struct HttpReply {
    pub code: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpReply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The value of an `Authorization` header for HTTP basic auth.
pub fn basic_authorization(user: &str, secret: &str) -> String {
    format!("Basic {}", base64(format!("{user}:{secret}").as_bytes()))
}

/// `GET path` on `addr`, with `Authorization: Basic` when `basic` is given.
pub async fn http_get(addr: SocketAddr, path: &str, basic: Option<(&str, &str)>) -> HttpReply {
    let auth = basic.map_or(String::new(), |(user, secret)| {
        format!("Authorization: {}\r\n", basic_authorization(user, secret))
    });
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n");
    http_raw(addr, request.as_bytes()).await
}

/// `method path` on `addr` with a JSON `body` (if any): for the routes
/// that change things (`POST`/`DELETE /v1/members`).
pub async fn http_send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> HttpReply {
    let body = body.unwrap_or("");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    http_raw(addr, request.as_bytes()).await
}

/// Sends `request` as it is and reads the answer to the end.
pub async fn http_raw(addr: SocketAddr, request: &[u8]) -> HttpReply {
    match try_http_raw(addr, request).await {
        Ok(reply) => reply,
        Err(why) => panic!("{why}"),
    }
}

/// [`http_get`] that reports a failed exchange (a connection reset or
/// closed unanswered, no HTTP answer) instead of panicking: for polls
/// that wait for an endpoint to take connections again.
pub async fn try_http_get(addr: SocketAddr, path: &str) -> Result<HttpReply, String> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    try_http_raw(addr, request.as_bytes()).await
}

async fn try_http_raw(addr: SocketAddr, request: &[u8]) -> Result<HttpReply, String> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(request).await?;
        let mut bytes = Vec::new();
        stream.read_to_end(&mut bytes).await?;
        Ok::<_, std::io::Error>(bytes)
    };
    let bytes = match timeout(HTTP_TIMEOUT, exchange).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(e)) => return Err(format!("HTTP to {addr} failed: {e}")),
        Err(_) => return Err(format!("HTTP to {addr} took over {HTTP_TIMEOUT:?}")),
    };
    parse_reply(&bytes)
        .ok_or_else(|| format!("not an HTTP answer: {:?}", String::from_utf8_lossy(&bytes)))
}

fn parse_reply(bytes: &[u8]) -> Option<HttpReply> {
    let text = String::from_utf8_lossy(bytes);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let mut lines = head.split("\r\n");
    let code = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_string()
    };
    Some(HttpReply {
        code,
        headers,
        body,
    })
}

fn dechunk(mut body: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n")?;
        let size = usize::from_str_radix(size.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        out.push_str(rest.get(..size)?);
        body = rest.get(size + 2..)?;
    }
}

fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A scrape: each sample by its name with labels as written
/// (`baton_requests_total{op="acquire"}`), and each family's type.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    pub samples: BTreeMap<String, f64>,
    pub types: BTreeMap<String, String>,
}

impl Scrape {
    /// Parses the Prometheus text format; panics on a line it cannot read.
    pub fn parse(text: &str) -> Scrape {
        let mut scrape = Scrape::default();
        for line in text.lines().filter(|l| !l.is_empty()) {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest
                    .split_once(' ')
                    .unwrap_or_else(|| panic!("bad TYPE line {line:?}"));
                scrape.types.insert(name.to_string(), kind.to_string());
                continue;
            }
            if line.starts_with("# HELP ") {
                continue;
            }
            let (series, value) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("bad sample line {line:?}"));
            let value = match value {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v
                    .parse()
                    .unwrap_or_else(|_| panic!("bad value in {line:?}")),
            };
            let name_end = series.find('{').unwrap_or(series.len());
            let name = &series[..name_end];
            assert!(
                !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
                "bad metric name in {line:?}"
            );
            assert!(
                name_end == series.len() || series.ends_with('}'),
                "bad labels in {line:?}"
            );
            scrape.samples.insert(series.to_string(), value);
        }
        scrape
    }

    /// The sample `series`, panicking when absent.
    pub fn get(&self, series: &str) -> f64 {
        *self.samples.get(series).unwrap_or_else(|| {
            panic!(
                "no sample {series} in {:?}",
                self.samples.keys().collect::<Vec<_>>()
            )
        })
    }
}
