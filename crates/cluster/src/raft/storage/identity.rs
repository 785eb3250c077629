//! The node id a data directory belongs to, kept in its `node-id` file.
//!
//! A node's id is fixed the first time it runs on a data directory (a
//! seed's place in `--peers`, or a joined node's id from its address, see
//! [`crate::raft::members`]) and read back on every later start: the log, the
//! vote and the cluster's membership all name the node by it, so a
//! reordered `--peers` or an added `--join` must not change it.

use std::fs;
use std::io::{self, Write};
use std::path::Path;

use baton_server::durable::DurableFile;

use crate::raft::members::plausible_id;
use crate::raft::types::NodeId;

const FILE: &str = "node-id";

/// The id this data directory belongs to: the one recorded, or `wanted`
/// (then recorded, durably, before any Raft state is written).
pub fn settle(data_dir: &Path, wanted: NodeId) -> io::Result<NodeId> {
    fs::create_dir_all(data_dir)?;
    let path = data_dir.join(FILE);
    match fs::read_to_string(&path) {
        Ok(text) => {
            let recorded = parse(&text).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{} does not hold a node id", path.display()),
                )
            })?;
            if recorded != wanted {
                tracing::info!(
                    recorded,
                    flags_say = wanted,
                    "this data directory belongs to node {recorded}; keeping that id"
                );
            }
            Ok(recorded)
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            record(data_dir, wanted)?;
            Ok(wanted)
        }
        Err(error) => Err(error),
    }
}

fn parse(text: &str) -> Option<NodeId> {
    text.trim().parse().ok().filter(|id| plausible_id(*id))
}

/// Records the id durably: a crash leaves no id or the whole of it.
fn record(data_dir: &Path, id: NodeId) -> io::Result<()> {
    DurableFile::new(data_dir, FILE).replace(|file| writeln!(file, "{id}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_id_stays_whatever_later_flags_say() {
        let dir = tempfile::tempdir().expect("dir");
        let data = dir.path().join("node");
        assert_eq!(settle(&data, 2).expect("first"), 2);
        assert_eq!(settle(&data, 0).expect("again"), 2);
        assert_eq!(
            fs::read_to_string(data.join(FILE)).expect("file").trim(),
            "2"
        );
    }

    #[test]
    fn a_damaged_id_file_stops_the_start() {
        let dir = tempfile::tempdir().expect("dir");
        for text in ["", "x", "64", "18446744073709551615"] {
            fs::write(dir.path().join(FILE), text).expect("write");
            let error = settle(dir.path(), 1).expect_err(text);
            assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{text:?}");
        }
    }
}
