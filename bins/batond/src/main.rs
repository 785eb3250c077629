//! `batond`: the Baton lock server. Parses flags, sets up logging and the
//! open-file limit, and runs a node until SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::process::ExitCode;

use baton_proto::Limits;
use baton_server::{Server, ServerConfig};
use clap::Parser;

/// Baton lock server: exclusive locks with fencing tokens, FIFO waiters and
/// leases, over a pipelined text protocol.
#[derive(Debug, Parser)]
#[command(name = "batond", version)]
struct Flags {
    /// Address clients connect to (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:7411")]
    listen: SocketAddr,
    /// Longest wait an acquire may ask for, in seconds.
    #[arg(long, value_name = "SECS", default_value = "86400", value_parser = parse_seconds)]
    max_wait: u64,
    /// Longest lease an acquire or renew may ask for, in seconds.
    #[arg(long, value_name = "SECS", default_value = "86400", value_parser = parse_seconds)]
    max_lease: u64,
    /// Client connections served at once; more are refused.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    max_connections: usize,
    /// Queued acquires per connection; more are answered with an error.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    max_pending: usize,
}

/// Seconds with at most 3 decimals, as in the protocol, to milliseconds.
fn parse_seconds(text: &str) -> Result<u64, String> {
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || (text.contains('.') && (!digits(frac) || frac.len() > 3)) {
        return Err("expected seconds, e.g. 30 or 0.5 (at most 3 decimals)".into());
    }
    let whole: u64 = whole.parse().map_err(|_| "too large".to_string())?;
    let frac_ms: u64 = format!("{frac:0<3}").parse().unwrap_or(0);
    whole
        .checked_mul(1000)
        .and_then(|ms| ms.checked_add(frac_ms))
        .ok_or_else(|| "too large".to_string())
}

fn main() -> ExitCode {
    let flags = Flags::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    // The default connection limit needs as many descriptors.
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => tracing::debug!(limit, "open-file limit"),
        Err(error) => tracing::warn!(%error, "could not raise the open-file limit"),
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("batond: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let config = ServerConfig {
        listen: flags.listen,
        limits: Limits {
            max_wait_ms: flags.max_wait,
            max_lease_ms: flags.max_lease,
        },
        max_connections: flags.max_connections,
        max_pending: flags.max_pending,
    };
    match runtime.block_on(serve(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("batond: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config: ServerConfig) -> Result<(), String> {
    // Watch for signals before anyone can learn the node is up.
    let shutdown = shutdown_signal().map_err(|e| format!("cannot watch for signals: {e}"))?;
    let server = Server::bind(config).await.map_err(|e| e.to_string())?;
    // Scripts and tests wait for this line to know the node is up, and
    // learn the port when they asked for port 0.
    println!("listening {}", server.local_addr());
    tracing::info!(addr = %server.local_addr(), "batond serving");
    server.run(shutdown).await;
    Ok(())
}

fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::parse_seconds;

    #[test]
    fn seconds_parse_like_the_protocol() {
        assert_eq!(parse_seconds("86400"), Ok(86_400_000));
        assert_eq!(parse_seconds("0.5"), Ok(500));
        assert_eq!(parse_seconds("2.125"), Ok(2125));
        for bad in ["", ".5", "1.", "1.2345", "-1", "1e3", "x"] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
    }
}
