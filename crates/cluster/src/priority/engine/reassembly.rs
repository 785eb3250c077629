//! Tables arriving in pieces: what a receiver holds of one until its last
//! piece, and when it gives that up.
//!
//! One table at most is in progress per peer, so what a receiver holds is
//! bounded by the peer count times [`MAX_TABLE_LOCKS`]. A piece 0 starts a
//! table afresh (a newer table supersedes an unfinished one); any other
//! piece must be the next one of the table in progress, or the table is
//! dropped: links deliver in order, so a gap means a piece was lost, and
//! a table short of a piece must never be taken (a handoff is atomic: the
//! successor takes the role only with the whole table).

use baton_core::{Millis, SnapshotLock, TableSnapshot, Token};

use super::super::messages::{TablePart, Term, MAX_TABLE_LOCKS};

/// What a table in pieces is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TableKind {
    /// The followed active's table, after which commands continue from
    /// `seq` of `term`.
    Snapshot { term: Term, seq: u64 },
    /// A handoff: the sender's final table, and with it the active role.
    Handoff,
}

/// A table from one peer, not complete yet.
#[derive(Debug, Clone)]
pub(super) struct Incoming {
    pub(super) kind: TableKind,
    table: u64,
    next_piece: u32,
    last_token: Token,
    locks: Vec<SnapshotLock>,
    /// When the last piece came: a table that stops coming is dropped.
    pub(super) updated_at: Millis,
}

/// What a piece did.
#[derive(Debug)]
pub(super) enum Assembled {
    /// More pieces to come.
    Partial,
    Complete(TableSnapshot),
    /// Not the next piece of the table in progress: that table (if any)
    /// is dropped.
    Gap,
    /// The table grew past [`MAX_TABLE_LOCKS`]: dropped.
    TooLarge,
}

/// Adds `part` (of a table of `kind`) to what `slot` holds from its peer.
pub(super) fn assemble(
    slot: &mut Option<Incoming>,
    kind: TableKind,
    part: TablePart,
    now: Millis,
) -> Assembled {
    let TablePart {
        table,
        piece,
        last,
        last_token,
        locks,
    } = part;
    if piece == 0 {
        *slot = Some(Incoming {
            kind,
            table,
            next_piece: 0,
            last_token,
            locks: Vec::new(),
            updated_at: now,
        });
    }
    let Some(incoming) = slot.as_mut() else {
        return Assembled::Gap;
    };
    if incoming.kind != kind || incoming.table != table || incoming.next_piece != piece {
        *slot = None;
        return Assembled::Gap;
    }
    if incoming.locks.len().saturating_add(locks.len()) > MAX_TABLE_LOCKS {
        *slot = None;
        return Assembled::TooLarge;
    }
    incoming.locks.extend(locks);
    incoming.last_token = incoming.last_token.max(last_token);
    incoming.updated_at = now;
    if !last {
        // No piece can follow one numbered u32::MAX: the table is dropped.
        return match piece.checked_add(1) {
            Some(next) => {
                incoming.next_piece = next;
                Assembled::Partial
            }
            None => {
                *slot = None;
                Assembled::Gap
            }
        };
    }
    match slot.take() {
        Some(done) => Assembled::Complete(TableSnapshot {
            last_token: done.last_token,
            locks: done.locks,
        }),
        None => Assembled::Gap,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_core::Key;

    fn part(table: u64, piece: u32, last: bool, keys: &[&str]) -> TablePart {
        TablePart {
            table,
            piece,
            last,
            last_token: 90,
            locks: keys
                .iter()
                .enumerate()
                .map(|(i, k)| {
                    SnapshotLock::plain(
                        Key::try_from(*k).unwrap_or_else(|e| panic!("{e}")),
                        i as u64 + 1,
                        100,
                    )
                })
                .collect(),
        }
    }

    const SNAP: TableKind = TableKind::Snapshot { term: 7, seq: 3 };

    fn complete(result: Assembled) -> TableSnapshot {
        match result {
            Assembled::Complete(table) => table,
            other => panic!("not complete: {other:?}"),
        }
    }

    #[test]
    fn pieces_in_order_make_the_table() {
        let mut slot = None;
        assert!(matches!(
            assemble(&mut slot, SNAP, part(5, 0, false, &["a"]), 1),
            Assembled::Partial
        ));
        assert!(matches!(
            assemble(&mut slot, SNAP, part(5, 1, false, &["b"]), 2),
            Assembled::Partial
        ));
        let table = complete(assemble(&mut slot, SNAP, part(5, 2, true, &["c"]), 3));
        let keys: Vec<_> = table.locks.iter().map(|l| l.key.to_string()).collect();
        assert_eq!(keys, ["a", "b", "c"]);
        assert_eq!(table.last_token, 90);
        assert!(slot.is_none());
    }

    #[test]
    fn a_gap_another_table_or_another_kind_drops_the_table() {
        let mut slot = None;
        assemble(&mut slot, SNAP, part(5, 0, false, &["a"]), 1);
        assert!(matches!(
            assemble(&mut slot, SNAP, part(5, 2, true, &["c"]), 2),
            Assembled::Gap
        ));
        assert!(slot.is_none());
        // The rest of a dropped table is dropped too.
        assert!(matches!(
            assemble(&mut slot, SNAP, part(5, 3, true, &[]), 2),
            Assembled::Gap
        ));
        assemble(&mut slot, SNAP, part(5, 0, false, &["a"]), 3);
        assert!(matches!(
            assemble(&mut slot, SNAP, part(6, 1, true, &["b"]), 4),
            Assembled::Gap
        ));
        assemble(&mut slot, SNAP, part(5, 0, false, &["a"]), 5);
        let other = TableKind::Snapshot { term: 8, seq: 3 };
        assert!(matches!(
            assemble(&mut slot, other, part(5, 1, true, &["b"]), 6),
            Assembled::Gap
        ));
        assemble(&mut slot, SNAP, part(5, 0, false, &["a"]), 7);
        assert!(matches!(
            assemble(&mut slot, TableKind::Handoff, part(5, 1, true, &["b"]), 8),
            Assembled::Gap
        ));
    }

    #[test]
    fn a_new_first_piece_supersedes_an_unfinished_table() {
        let mut slot = None;
        assemble(&mut slot, SNAP, part(5, 0, false, &["old"]), 1);
        let table = complete(assemble(
            &mut slot,
            TableKind::Handoff,
            part(6, 0, true, &["new"]),
            2,
        ));
        assert_eq!(table.locks.len(), 1);
        assert_eq!(table.locks[0].key.to_string(), "new");
    }

    #[test]
    fn a_piece_numbered_past_the_end_never_completes() {
        let mut slot = None;
        assemble(&mut slot, SNAP, part(5, 0, false, &[]), 1);
        if let Some(incoming) = slot.as_mut() {
            incoming.next_piece = u32::MAX;
        }
        assert!(matches!(
            assemble(&mut slot, SNAP, part(5, u32::MAX, false, &[]), 2),
            Assembled::Gap
        ));
        assert!(slot.is_none());
    }
}
