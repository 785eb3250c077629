//! The `baton-bench` command: parses flags, pins itself if asked, runs the
//! plan and prints the table. Exits non-zero on any error, protocol error
//! or lock-safety violation.

use std::net::SocketAddr;
use std::process::ExitCode;

use baton_bench::cli::Args;
use baton_bench::{bench, echo, pin, report};
use clap::Parser;

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(addr) = args.serve_echo {
        return serve_echo(addr);
    }
    if let Some(cpu) = args.pin_driver {
        match pin::reexec_pinned(cpu) {
            Ok(None) => {}
            Ok(Some(code)) => return ExitCode::from(u8::try_from(code).unwrap_or(1)),
            Err(message) => return fail(&message),
        }
    }
    let plan = args.plan();
    let mut targets = Vec::new();
    for &target in &plan.targets {
        match target.launch(args.addr, args.spawn.as_ref()) {
            Ok(launch) => targets.push((target, launch)),
            Err(error) => return fail(&format!("cannot set up {}: {error}", target.name())),
        }
    }
    // Affinity (from taskset) limits what std reports, so a pinned driver
    // runs one thread and does not fight itself for its core.
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let runtime = match threads {
        1 => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        _ => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build(),
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(error) => return fail(&format!("cannot start the async runtime: {error}")),
    };
    match runtime.block_on(bench::run(&plan, &targets, args.pin_server)) {
        Ok(rows) => {
            println!(
                "# warm-up {:?}, {:?} measured, median of {} run(s); driver: {threads} thread(s){}; server: {}",
                plan.timing.warmup,
                plan.timing.duration,
                plan.runs,
                args.pin_driver.map_or(String::new(), |cpu| format!(" on cpu {cpu}")),
                args.pin_server.map_or("unpinned".into(), |cpu| format!("cpu {cpu}")),
            );
            print!("{}", report::render(&rows));
            ExitCode::SUCCESS
        }
        Err(error) => fail(&error.to_string()),
    }
}

/// The echo ceiling as a child process, so it can be pinned like a real
/// server. It exits when its stdin closes, that is when the bench ends.
fn serve_echo(addr: SocketAddr) -> ExitCode {
    if !addr.ip().is_loopback() {
        return fail(&format!("{addr} is not a loopback address"));
    }
    std::thread::spawn(|| {
        // EOF or an error both mean the bench is gone.
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return fail(&format!("cannot start the async runtime: {error}")),
    };
    let served = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        println!("listening {}", listener.local_addr()?);
        echo::serve(listener).await
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fail(&format!("echo server: {error}")),
    }
}

fn fail(message: &str) -> ExitCode {
    eprintln!("baton-bench: {message}");
    ExitCode::FAILURE
}
