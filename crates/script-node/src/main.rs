//! `script-node SCENARIO`: plays one client-behaviour scenario with the
//! adapter on stdin/stdout (see tests/client-behaviour/README.md).
//! `script-node --check FILE...` only reads the files and reports mistakes.

use std::path::PathBuf;

use baton_script_node::{exit, run, Scenario};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let status = match args.as_slice() {
        [flag, files @ ..] if flag == "--check" && !files.is_empty() => check(files),
        [file] if !file.starts_with('-') => play(PathBuf::from(file)),
        _ => {
            eprintln!("usage: script-node SCENARIO | script-node --check FILE...");
            exit::BAD_SCENARIO
        }
    };
    std::process::exit(status);
}

fn play(file: PathBuf) -> i32 {
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(run(&file)),
        Err(e) => {
            eprintln!("script-node: cannot start tokio: {e}");
            exit::FAIL
        }
    }
}

fn check(files: &[String]) -> i32 {
    let mut status = exit::PASS;
    for file in files {
        if let Err(e) = Scenario::load(file.as_ref()) {
            eprintln!("{e}");
            status = exit::BAD_SCENARIO;
        }
    }
    status
}
