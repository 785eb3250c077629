//! The echo ceiling: a minimal line server that answers every request with
//! a response of the same shape (`A k 5 10` -> `A k <n>`, `R k t` -> `R k`)
//! and does nothing else. Driven by the same code as Baton, it shows what
//! loopback, syscalls and the driver itself allow.

use std::io;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::lines::{Filled, LineReader};
use crate::wire::push_u64;

/// Serves connections until the process ends.
pub async fn serve(listener: TcpListener) -> io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        tokio::spawn(async move {
            // A connection that fails just ends; the driver reports it.
            let _ = echo_connection(stream).await;
        });
    }
}

/// Answers each burst of lines with one write, as a real server should.
async fn echo_connection(mut stream: TcpStream) -> io::Result<()> {
    let mut lines = LineReader::new();
    let mut out = Vec::with_capacity(4096);
    let mut tokens = 0;
    loop {
        if lines.fill(&mut stream).await? != Filled::Bytes {
            return Ok(());
        }
        while let Some(line) = lines.next_line() {
            answer(line, &mut tokens, &mut out);
        }
        stream.write_all(&out).await?;
        out.clear();
    }
}

/// The same-shaped answer to one request line. Tokens rise per connection
/// so each key's grants on that connection look like a real server's.
pub fn answer(line: &[u8], tokens: &mut u64, out: &mut Vec<u8>) {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut fields = line.split(|&b| b == b' ');
    let op = fields.next().unwrap_or_default();
    let key = fields.next().filter(|key| !key.is_empty());
    match (op, key) {
        (b"A", Some(key)) => {
            *tokens += 1;
            out.extend_from_slice(b"A ");
            out.extend_from_slice(key);
            out.push(b' ');
            push_u64(out, *tokens);
        }
        (b"R" | b"K", Some(key)) => {
            out.extend_from_slice(op);
            out.push(b' ');
            out.extend_from_slice(key);
        }
        // Every field a Baton client requires (baton-proto refuses an `S`
        // without them), with nothing held: the echo keeps no state.
        (b"S", None) => {
            out.extend_from_slice(b"S role=single mode=single self=- active=- token=");
            push_u64(out, *tokens);
            out.extend_from_slice(b" locks=0 waiters=0");
        }
        _ => out.extend_from_slice(b"E ? ? unknown op"),
    }
    out.push(b'\n');
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap in a test is a failed test
mod tests {
    use super::*;

    fn answers(lines: &[&str]) -> String {
        let mut out = Vec::new();
        let mut tokens = 0;
        for line in lines {
            answer(line.as_bytes(), &mut tokens, &mut out);
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn answers_with_the_shape_of_baton_responses() {
        assert_eq!(
            answers(&["A k1 5 10", "R k1 1", "A k2 5 10\r", "K k2 2 10", "S"]),
            "A k1 1\nR k1\nA k2 2\nK k2\nS role=single mode=single self=- active=- token=2 locks=0 waiters=0\n"
        );
    }

    #[test]
    fn answers_junk_with_an_error_line() {
        assert_eq!(
            answers(&["", "X k", "A", "A  5"]),
            "E ? ? unknown op\n".repeat(4)
        );
    }
}
