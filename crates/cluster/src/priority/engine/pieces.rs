//! Cutting what a node sends into messages within the frame cap
//! ([`MAX_MESSAGE_BYTES`], or a smaller limit a test sets): a table into
//! [`TablePart`]s, a batch of commands into several `Commands`.
//!
//! Each message's header is sized with its numbers at their largest
//! (`piece`, `first_seq`, the length of the list), so the header bound
//! holds for every piece; items are then added while their exact encoded
//! sizes fit. A piece always carries at least one item, so a limit below
//! one item (only a test sets one) still makes progress.

use baton_core::{EncodedCommands, TableSnapshot, Token};
use serde::Serialize;

use super::super::messages::{encoded_len, PriorityMessage, TablePart, Term, MAX_MESSAGE_BYTES};

/// What the list length adds beyond the one byte an empty list takes: a
/// varint of a `usize` is at most 10 bytes.
const LIST_LEN_SLACK: usize = 9;

/// `table` cut into pieces numbered from 0, each wrapped by `wrap` into a
/// message of at most `limit` bytes. An empty table is one (last) piece.
pub(super) fn table_parts(
    table: TableSnapshot,
    id: u64,
    limit: usize,
    wrap: impl Fn(TablePart) -> PriorityMessage,
) -> Vec<PriorityMessage> {
    let TableSnapshot { last_token, locks } = table;
    let part = |piece: u32, last: bool, locks| TablePart {
        table: id,
        piece,
        last,
        last_token,
        locks,
    };
    let header = encoded_len(&wrap(part(u32::MAX, false, Vec::new()))) + LIST_LEN_SLACK;
    let chunks = split(locks, limit.saturating_sub(header));
    let count = chunks.len();
    let parts: Vec<PriorityMessage> = chunks
        .into_iter()
        .enumerate()
        .map(|(i, locks)| {
            // More than 4 billion pieces is more than any memory holds.
            let piece = u32::try_from(i).unwrap_or(u32::MAX);
            wrap(part(piece, i + 1 == count, locks))
        })
        .collect();
    debug_assert!(parts.iter().all(|m| fits(m, limit)), "a piece over {limit}");
    parts
}

/// `commands`, numbered from `first_seq`, as `Commands` messages of at
/// most `limit` bytes each, in order, sharing the commands' bytes. None
/// for no commands.
pub(super) fn command_batches(
    term: Term,
    first_seq: u64,
    commands: EncodedCommands,
    limit: usize,
) -> Vec<PriorityMessage> {
    if commands.is_empty() {
        return Vec::new();
    }
    let header = encoded_len(&PriorityMessage::Commands {
        term,
        first_seq: u64::MAX,
        commands: EncodedCommands::default(),
    }) + LIST_LEN_SLACK;
    let room = limit.saturating_sub(header);
    // The common case, a burst of commands far below the cap, is one
    // batch, and the commands' size is known without walking them.
    let runs = if commands.as_bytes().len() <= room {
        vec![commands]
    } else {
        commands.split(room)
    };
    let mut next = first_seq;
    let batches: Vec<PriorityMessage> = runs
        .into_iter()
        .map(|commands| {
            let batch_first = next;
            next = next.saturating_add(commands.len() as u64);
            PriorityMessage::Commands {
                term,
                first_seq: batch_first,
                commands,
            }
        })
        .collect();
    debug_assert!(
        batches.iter().all(|m| fits(m, limit)),
        "a batch over {limit}"
    );
    batches
}

/// `items` in runs whose encoded sizes add up to at most `room` (a run of
/// one item may be larger). At least one run, empty for no items.
fn split<T: Serialize>(items: Vec<T>, room: usize) -> Vec<Vec<T>> {
    let mut runs = Vec::new();
    let mut run = Vec::new();
    let mut used = 0usize;
    for item in items {
        let size = encoded_len(&item);
        if !run.is_empty() && used.saturating_add(size) > room {
            runs.push(std::mem::take(&mut run));
            used = 0;
        }
        used = used.saturating_add(size);
        run.push(item);
    }
    runs.push(run);
    runs
}

/// Whether `message` is within `limit`, or is a piece of a single item (a
/// limit below one item, which only tests set). Under the real cap every
/// message fits: the largest item is a few hundred bytes.
fn fits(message: &PriorityMessage, limit: usize) -> bool {
    let items = match message {
        PriorityMessage::SnapshotPart { part, .. } | PriorityMessage::HandoffPart { part } => {
            part.locks.len()
        }
        PriorityMessage::Commands { commands, .. } => commands.len(),
        _ => 0,
    };
    let len = encoded_len(message);
    len <= limit || (items <= 1 && limit < MAX_MESSAGE_BYTES)
}

/// The highest token a table part names (its last token or a lock's).
pub(super) fn highest_token(part: &TablePart) -> Token {
    part.locks
        .iter()
        .map(|l| l.token)
        .fold(part.last_token, Token::max)
}

#[cfg(test)]
mod tests {
    use baton_core::{Command, MAX_ENCODED_COMMAND};

    use super::*;

    #[test]
    fn no_command_encodes_longer_than_the_bound() {
        for command in Command::widest() {
            assert!(encoded_len(&command) <= MAX_ENCODED_COMMAND, "{command:?}");
        }
    }
}
