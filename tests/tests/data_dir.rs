//! A data directory belongs to one node at a time, in every mode: a second
//! start on a live node's directory is refused before it reads anything,
//! naming the path and the holder; the lock dies with its holder, kill -9
//! included; and every data-directory error names the path.

mod data_dir_support;

use std::path::Path;

use baton_tests::{free_addr, Batond};

use data_dir_support::{exit_line, start_fails};

/// The arguments of a node of `mode` on `dir`, alone in its cluster.
fn args(mode: &str, addr: &str, dir: &Path) -> Vec<String> {
    let mut args: Vec<String> = vec!["--listen".into(), addr.into()];
    if mode != "single" {
        args.extend(["--mode".into(), mode.into(), "--peers".into(), addr.into()]);
    }
    args.extend(["--data-dir".into(), dir.display().to_string()]);
    args
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// Every file under `dir`, with its size, in order.
fn listing(dir: &Path) -> Vec<(String, u64)> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(at) = todo.pop() {
        for entry in std::fs::read_dir(&at).expect("read dir") {
            let entry = entry.expect("dir entry");
            let meta = entry.metadata().expect("metadata");
            if meta.is_dir() {
                todo.push(entry.path());
            } else {
                files.push((entry.path().display().to_string(), meta.len()));
            }
        }
    }
    files.sort();
    files
}

#[tokio::test]
async fn a_second_node_on_a_live_nodes_data_dir_is_refused_naming_path_and_holder() {
    for mode in ["raft", "priority", "single"] {
        let base = tempfile::tempdir().expect("temp dir");
        let dir = base.path().join("shared");
        let first_addr = free_addr().to_string();
        let mut first = Batond::start(&strs(&args(mode, &first_addr, &dir)));
        // Let the first node serve and write a grant before looking at the
        // directory, so that nothing in it changes while the second tries.
        let mut c = first.connect().await;
        c.wait_status("serving", std::time::Duration::from_secs(10), |s| {
            s.get("role")
                .is_some_and(|r| ["single", "active", "leader"].contains(&r.as_str()))
        })
        .await;
        let _ = baton_tests::grant_token(&c.request("A settled 0 600").await, "settled");
        if mode != "raft" {
            let state = dir.join(format!("{mode}-state"));
            data_dir_support::wait_on_disk(&state, b"settled").await;
        }
        let before = listing(&dir);
        let second_addr = free_addr().to_string();
        let (_, stderr) = start_fails(&strs(&args(mode, &second_addr, &dir)));
        let line = exit_line(&stderr);
        for needed in [
            dir.display().to_string(),
            "in use".to_string(),
            format!("pid {}", first.pid()),
            first.addr().to_string(),
        ] {
            assert!(
                line.contains(&needed),
                "{mode}: the refusal should say {needed:?}: {line}"
            );
        }
        // A Raft leader may still record its commit index meanwhile, so
        // for it only the file names must stay (an opener makes a segment).
        let names = |files: &[(String, u64)]| -> Vec<String> {
            files.iter().map(|(name, _)| name.clone()).collect()
        };
        let after = listing(&dir);
        if mode == "raft" {
            assert_eq!(
                names(&after),
                names(&before),
                "{mode}: the refused node touched the directory"
            );
        } else {
            assert_eq!(
                after, before,
                "{mode}: the refused node touched the directory"
            );
        }
        assert!(first.is_running(), "{mode}: the first node died");
        // The lock dies with its holder, even by kill -9.
        first.kill();
        first.restart();
        assert!(first.is_running(), "{mode}: restart on a freed directory");
    }
}

#[tokio::test]
async fn a_data_dir_that_is_a_file_is_refused_naming_the_path() {
    let base = tempfile::tempdir().expect("temp dir");
    let file = base.path().join("a-file");
    std::fs::write(&file, b"not a directory").expect("write");
    for mode in ["raft", "priority", "single"] {
        let addr = free_addr().to_string();
        let (status, stderr) = start_fails(&strs(&args(mode, &addr, &file)));
        assert_eq!(status.code(), Some(1), "{mode}: {stderr}");
        let line = exit_line(&stderr);
        assert!(
            line.contains(&file.display().to_string()),
            "{mode}: the error should name {}: {line}",
            file.display()
        );
    }
}

#[tokio::test]
async fn a_single_node_whose_state_cannot_be_saved_refuses_to_start_or_stops() {
    let base = tempfile::tempdir().expect("temp dir");
    let dir = base.path().join("node");
    let dir_arg = dir.display().to_string();
    let mut node = Batond::start(&["--data-dir", &dir_arg]);
    let mut c = node.connect().await;
    let token = baton_tests::grant_token(&c.request("A saved 0 600").await, "saved");
    data_dir_support::wait_on_disk(&dir.join("single-state"), b"saved").await;
    // Being root, the test cannot take write permission away; a directory
    // where the state's temporary file goes makes every write of it fail.
    let tmp = dir.join("single-state.tmp");
    std::fs::create_dir(&tmp).expect("create the blocking directory");
    let _ = c.request("A unsaved 0 600").await;
    let exit = node
        .wait_exit(std::time::Duration::from_secs(10))
        .expect("a node whose state cannot be saved still runs 10 s later");
    let log = node.log_tail(200);
    assert_eq!(exit.code(), Some(1), "{log}");
    let line = exit_line(&log);
    assert!(line.contains(&tmp.display().to_string()), "{line}");
    // Nor does it start again until the directory takes writes.
    let (_, stderr) = start_fails(&["--listen", "127.0.0.1:0", "--data-dir", &dir_arg]);
    assert!(
        exit_line(&stderr).contains(&tmp.display().to_string()),
        "{stderr}"
    );
    std::fs::remove_dir(&tmp).expect("unblock");
    node.restart();
    let mut c = node.connect().await;
    assert_eq!(
        c.request(&format!("R saved {token}")).await,
        "R saved",
        "the saved lock survived"
    );
}

/// The newest Raft log segment under `dir` and where each of its records
/// starts (a record: u32 length, u32 CRC-32, payload, little-endian).
fn newest_segment(dir: &Path) -> (std::path::PathBuf, Vec<u8>, Vec<usize>) {
    let mut segments: Vec<_> = std::fs::read_dir(dir.join("log"))
        .expect("read the log directory")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    segments.sort();
    let path = segments.pop().expect("a segment");
    let bytes = std::fs::read(&path).expect("read the segment");
    let mut starts = Vec::new();
    let mut at = 0;
    while at + 8 <= bytes.len() {
        starts.push(at);
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        at += 8 + len as usize;
    }
    (path, bytes, starts)
}

#[tokio::test]
async fn a_raft_node_with_a_flipped_bit_in_its_log_refuses_to_start_naming_the_file() {
    let base = tempfile::tempdir().expect("temp dir");
    let dir = base.path().join("node");
    let addr = free_addr().to_string();
    let mut node = Batond::start(&strs(&args("raft", &addr, &dir)));
    let mut c = node.connect().await;
    c.wait_status("leader", std::time::Duration::from_secs(10), |s| {
        s.get("role").is_some_and(|r| r == "leader")
    })
    .await;
    let token = baton_tests::grant_token(&c.request("A held 0 600").await, "held");
    for i in 0..3 {
        let _ = c.request(&format!("A more/{i} 0 600")).await;
    }
    drop(c);
    assert!(node.terminate().success());
    let (path, bytes, starts) = newest_segment(&dir);
    assert!(
        starts.len() >= 3,
        "{} records in {}",
        starts.len(),
        path.display()
    );
    // The first record of the newest segment (the vote, written at start),
    // with records after it that the node fsynced.
    let mut flipped = bytes.clone();
    flipped[starts[0] + 9] ^= 0x20;
    std::fs::write(&path, &flipped).expect("flip a bit");
    let (status, stderr) = start_fails(&strs(&args("raft", &addr, &dir)));
    assert_eq!(status.code(), Some(1), "{stderr}");
    let line = exit_line(&stderr);
    assert!(
        line.contains(&path.display().to_string()) && line.contains("corrupt"),
        "the refusal should name {} as corrupt: {line}",
        path.display()
    );
    assert_eq!(
        std::fs::read(&path).expect("read"),
        flipped,
        "the refused node cut its log"
    );
    // Repaired, the node starts with its lock.
    std::fs::write(&path, &bytes).expect("repair");
    node.restart();
    let mut c = node.connect().await;
    c.wait_status("leader", std::time::Duration::from_secs(10), |s| {
        s.get("role").is_some_and(|r| r == "leader")
    })
    .await;
    assert_eq!(c.request(&format!("R held {token}")).await, "R held");
}

/// Every directory and file under `dir` that others may read or write.
fn open_to_others(dir: &Path) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut open = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(at) = todo.pop() {
        let mode = std::fs::metadata(&at)
            .expect("metadata")
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            open.push(format!("{} {:o}", at.display(), mode & 0o777));
        }
        if at.is_dir() {
            for entry in std::fs::read_dir(&at).expect("read dir") {
                todo.push(entry.expect("dir entry").path());
            }
        }
    }
    open
}

#[tokio::test]
async fn the_data_dir_and_its_files_are_for_the_owner_only() {
    // The common umask, which leaves files readable by all: the nodes
    // started below inherit it, and must not rely on it.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    for mode in ["raft", "priority", "single"] {
        let base = tempfile::tempdir().expect("temp dir");
        // Not there yet: the node creates it (and its parent).
        let top = base.path().join("new");
        let dir = top.join(mode);
        let addr = free_addr().to_string();
        let mut args = args(mode, &addr, &dir);
        if mode == "raft" {
            // A snapshot after every other entry: its files are checked too.
            args.extend(["--snapshot-every".into(), "2".into()]);
        }
        let node = Batond::start(&strs(&args));
        let mut c = node.connect().await;
        c.wait_status("serving", std::time::Duration::from_secs(10), |s| {
            s.get("role")
                .is_some_and(|r| ["single", "active", "leader"].contains(&r.as_str()))
        })
        .await;
        for k in 0..6 {
            let answer = c.request(&format!("A perms/{k} 0 30")).await;
            assert!(answer.starts_with("A perms/"), "{mode}: {answer}");
        }
        // Wait for the grants to reach the disk (written at once or
        // within the node's save interval; a Raft snapshot), then look.
        let written = |files: &[(String, u64)]| match mode {
            "raft" => files.iter().any(|(f, _)| f.contains("snapshot")),
            _ => files.len() >= 2,
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !written(&listing(&dir)) && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(written(&listing(&dir)), "{mode}: {:?}", listing(&dir));
        assert_eq!(open_to_others(&top), Vec::<String>::new(), "{mode}");
        drop(node);
    }
}
