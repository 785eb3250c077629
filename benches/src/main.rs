//! The `baton-bench` command: parses flags, pins itself if asked, runs the
//! plan and prints the table. Exits non-zero on any error, protocol error
//! or lock-safety violation.

use std::net::SocketAddr;
use std::process::ExitCode;

use baton_bench::cli::Args;
use baton_bench::launch::Programs;
use baton_bench::server::SpawnSettings;
use baton_bench::{bench, chart, echo, floor, markdown, pin, report};
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
    let programs = Programs {
        batond: args.spawn.clone(),
        baton_addr: args.addr,
        redis_server: args.redis_server.clone(),
        etcd: args.etcd.clone(),
        java: args.java.clone(),
        zookeeper_classpath: args.zookeeper_classpath.clone(),
    };
    let settings = SpawnSettings {
        pin_cpu: args.pin_server,
        work_dir: args.work_dir.clone(),
        pid_file: args.pid_file.clone(),
        batond_args: Vec::new(),
    };
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
    let outcome = runtime.block_on(bench::run(&plan, &programs, &settings));
    let setup = format!(
        "warm-up {:?}, {:?} measured, median of {} run(s); driver: {threads} thread(s){}; server: {}; machine: {}",
        plan.timing.warmup,
        plan.timing.duration,
        plan.runs,
        args.pin_driver.map_or(String::new(), |cpu| format!(" on cpu {cpu}")),
        args.pin_server.map_or("unpinned".into(), |cpu| format!("cpu {cpu}")),
        machine(),
    );
    println!("# {setup}");
    if let Some(floor) = &outcome.floor {
        print!("{}", floor::console(floor));
    }
    print!("{}", report::render(&outcome.rows));
    let cpu = report::cpu_lines(&outcome.rows);
    if !cpu.is_empty() {
        println!("# server CPU over the measured stretch (median of the runs):");
        for line in cpu {
            println!("# {line}");
        }
    }
    let context = markdown::Context {
        command: std::env::var("BATON_BENCH_COMMAND")
            .unwrap_or_else(|_| std::env::args().collect::<Vec<_>>().join(" ")),
        setup,
    };
    let mut failed = !outcome.failures.is_empty();
    if let Some(path) = &args.markdown {
        if let Err(error) = std::fs::write(path, markdown::render(&outcome, &context)) {
            eprintln!("baton-bench: cannot write {}: {error}", path.display());
            failed = true;
        }
    }
    if let Some(path) = &args.svg {
        if let Some(svg) = chart::render(&outcome.rows) {
            if let Err(error) = std::fs::write(path, svg) {
                eprintln!("baton-bench: cannot write {}: {error}", path.display());
                failed = true;
            }
        }
    }
    for note in &outcome.skipped {
        eprintln!("baton-bench: skipped {note}");
    }
    for failure in &outcome.failures {
        eprintln!("baton-bench: {failure}");
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// CPU count and model, for the record.
fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, model)| model.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let all = std::process::Command::new("nproc")
        .arg("--all")
        .output()
        .ok()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .unwrap_or_default();
    format!("{all} CPU(s) ({cpus} usable by the driver), {model}")
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
