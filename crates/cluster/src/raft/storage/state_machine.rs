//! openraft's state machine over the lock table.
//!
//! The table itself lives in the node's engine, behind the server's mutex,
//! so the leader learns a command's outcome the moment it is applied and
//! answers the client from there. This adapter forwards committed entries
//! to the engine through a [`TableHost`] (as [`Committed`] entries), keeps the applied log id and
//! membership, and takes and installs snapshots.

use std::io;
use std::sync::Arc;

use baton_core::TableSnapshot;
use futures_util::{Stream, TryStreamExt};
use openraft::entry::RaftEntry;
use openraft::storage::{EntryResponder, RaftSnapshotBuilder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend};

use crate::raft::engine::Committed;
use crate::raft::storage::snapshot_store::{self, SnapshotStore};
use crate::raft::types::{
    Entry, LogId, Snapshot, SnapshotData, SnapshotMeta, StoredMembership, TypeConfig,
};

/// Whatever holds the lock table: the engine behind the server's mutex, or
/// a simulation's.
pub trait TableHost: Send + Sync + 'static {
    /// Applies committed entries, in order.
    fn apply(&self, entries: &[Entry]);
    /// The table now, for a snapshot.
    fn snapshot(&self) -> TableSnapshot;
    /// Replaces the table with a snapshot's.
    fn restore(&self, snapshot: &TableSnapshot);
    /// The table's last token (a copy of the table by default; installs
    /// are rare).
    fn last_token(&self) -> baton_core::Token {
        self.snapshot().last_token
    }
}

impl<'a> From<&'a Entry> for Committed<'a> {
    /// openraft's entry in the engine's terms (the engine knows no openraft type).
    fn from(entry: &'a Entry) -> Committed<'a> {
        match &entry.payload {
            EntryPayload::Normal(proposal) => Committed::Proposal(proposal),
            EntryPayload::Blank => Committed::LeaderBlank {
                leader: entry.log_id.leader_id.node_id,
                term: entry.log_id.leader_id.term,
            },
            EntryPayload::Membership(_) => Committed::Membership,
        }
    }
}

/// The state machine handed to openraft.
#[derive(Debug)]
pub struct LockStateMachine<H> {
    host: Arc<H>,
    applied: Option<LogId>,
    membership: StoredMembership,
    store: SnapshotStore,
}

impl<H: TableHost> LockStateMachine<H> {
    /// The state machine over `store`, whose snapshot openraft installs on
    /// start and replays the committed log after. The caller has read the
    /// snapshot once with [`SnapshotStore::check`], so that a damaged file
    /// (or one whose tokens no node can have issued) stops the start,
    /// naming it.
    pub fn open(host: Arc<H>, store: SnapshotStore) -> io::Result<LockStateMachine<H>> {
        Ok(LockStateMachine {
            host,
            applied: None,
            membership: StoredMembership::default(),
            store,
        })
    }
}

/// Builds a snapshot from a copy of the table taken between two applies.
#[derive(Debug)]
pub struct Builder {
    meta: SnapshotMeta,
    /// Taken by the build.
    table: Option<TableSnapshot>,
    store: SnapshotStore,
}

impl RaftSnapshotBuilder<TypeConfig> for Builder {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        // One copy of the table at a time: the encoding replaces the
        // table's copy, the file is written from it, and openraft takes it.
        let table = self
            .table
            .take()
            .ok_or_else(|| io::Error::other("snapshot built twice"))?;
        let data = snapshot_store::encode_table(&table)?;
        drop(table);
        self.store.save_parts(&self.meta, &data)?;
        Ok(Snapshot {
            meta: self.meta.clone(),
            snapshot: data,
        })
    }
}

impl<H: TableHost> RaftStateMachine<TypeConfig> for LockStateMachine<H> {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = Builder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        Ok((self.applied, self.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        let mut batch = Vec::new();
        let mut responders = Vec::new();
        while let Some((entry, responder)) = entries.try_next().await? {
            self.applied = Some(entry.log_id);
            if let Some(membership) = entry.get_membership() {
                self.membership = StoredMembership::new(Some(entry.log_id), membership);
            }
            batch.push(entry);
            responders.extend(responder);
        }
        self.host.apply(&batch);
        for responder in responders {
            responder.send(());
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        let table = self.host.snapshot();
        Builder {
            meta: SnapshotMeta {
                last_log_id: self.applied,
                last_membership: self.membership.clone(),
            },
            table: Some(table),
            store: self.store.clone(),
        }
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: SnapshotData,
    ) -> Result<(), io::Error> {
        let mut table = snapshot_store::decode_table(&snapshot)?;
        let mut snapshot = snapshot;
        // A snapshot never lowers the token counter: a token handed out
        // once must never be handed out again, whatever a peer (or a bug)
        // sends. In a sound cluster the table being replaced is a prefix
        // of the snapshot's log, so this changes nothing.
        let current = self.host.last_token();
        if table.last_token < current {
            tracing::warn!(
                snapshot = table.last_token,
                current,
                "a snapshot would lower the token counter; keeping the higher one"
            );
            table.last_token = current;
            snapshot = snapshot_store::encode_table(&table)?;
        }
        self.store.save_parts(meta, &snapshot)?;
        drop(snapshot);
        self.host.restore(&table);
        self.applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        // Read from the file: kept in memory, the encoded table would cost
        // as much again as a quarter of the table, for the rare follower
        // too far behind for the log.
        Ok(self.store.load()?.map(|stored| Snapshot {
            meta: stored.meta,
            snapshot: stored.data,
        }))
    }
}
