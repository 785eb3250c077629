//! Snapshot parts: cutting, assembling, and every way a transfer is given
//! up.

use openraft::impls::leader_id_adv::LeaderId;

use super::*;
use crate::raft::types::StoredMembership;

fn head() -> SnapshotHead {
    SnapshotHead {
        vote: Vote {
            leader_id: LeaderId {
                term: 3,
                node_id: 0,
            },
            committed: true,
        },
        meta: SnapshotMeta {
            last_log_id: None,
            last_membership: StoredMembership::default(),
        },
    }
}

fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

#[test]
fn a_snapshot_is_cut_into_bounded_parts_and_put_back_together() {
    for len in [0, 1, SNAPSHOT_PART_BYTES, 2 * SNAPSHOT_PART_BYTES + 3] {
        let snapshot = data(len);
        let parts = parts(9, head(), &snapshot);
        assert_eq!(parts.len(), len.div_ceil(SNAPSHOT_PART_BYTES).max(1));
        assert!(parts.iter().all(|p| p.data.len() <= SNAPSHOT_PART_BYTES));
        assert!(parts[0].head.is_some());
        assert!(parts[1..].iter().all(|p| p.head.is_none()));
        let budget = AssemblyBudget::default();
        let mut assembly = Assembly::new(budget.clone());
        let now = Instant::now();
        let count = parts.len();
        for (i, part) in parts.into_iter().enumerate() {
            let got = assembly.receive(part, now).expect("in order");
            if i + 1 < count {
                assert!(got.is_none());
                assert!(assembly.receiving());
                assert_eq!(budget.used(), len, "the whole length is held");
            } else {
                let (h, d) = got.expect("complete");
                assert_eq!(h, head());
                assert_eq!(d, snapshot);
            }
        }
        assert!(!assembly.receiving());
        assert_eq!(budget.used(), 0, "given back once complete");
    }
}

#[test]
fn parts_out_of_order_or_too_large_give_the_transfer_up() {
    let now = Instant::now();
    let snapshot = data(3 * SNAPSHOT_PART_BYTES);
    let budget = AssemblyBudget::default();
    let mut assembly = Assembly::new(budget.clone());
    let p = parts(1, head(), &snapshot);
    assert!(assembly
        .receive(p[0].clone(), now)
        .expect("first")
        .is_none());
    assert_eq!(
        assembly.receive(p[2].clone(), now),
        Err(TransferError::OutOfOrder),
        "a skipped part"
    );
    assert!(!assembly.receiving());
    assert_eq!(budget.used(), 0);
    assert_eq!(
        assembly.receive(p[1].clone(), now),
        Err(TransferError::OutOfOrder),
        "nothing to continue"
    );
    // Another transfer's part in the middle of one.
    assembly.receive(p[0].clone(), now).expect("first");
    let mut other = p[1].clone();
    other.transfer = 2;
    assert_eq!(assembly.receive(other, now), Err(TransferError::OutOfOrder));
    // A part larger than allowed.
    let mut big = p[0].clone();
    big.data = vec![0; SNAPSHOT_PART_BYTES + 1];
    assert_eq!(
        assembly.receive(big, now),
        Err(TransferError::PartTooLarge(SNAPSHOT_PART_BYTES + 1))
    );
    // A total over the limit, or a part past the claimed end.
    let mut huge = p[0].clone();
    huge.total = MAX_SNAPSHOT_BYTES as u64 + 1;
    assert_eq!(
        assembly.receive(huge, now),
        Err(TransferError::TooLarge(MAX_SNAPSHOT_BYTES as u64 + 1))
    );
    let mut short = p[0].clone();
    short.total = 10;
    assert_eq!(assembly.receive(short, now), Err(TransferError::PastEnd));
    // A first part without its head; a later one with a head.
    let mut headless = p[0].clone();
    headless.head = None;
    assert_eq!(assembly.receive(headless, now), Err(TransferError::NoHead));
    assembly.receive(p[0].clone(), now).expect("first");
    let mut headed = p[1].clone();
    headed.head = Some(head());
    assert_eq!(
        assembly.receive(headed, now),
        Err(TransferError::OutOfOrder)
    );
    assert_eq!(budget.used(), 0);
}

#[test]
fn a_new_transfer_supersedes_the_one_in_progress() {
    let now = Instant::now();
    let budget = AssemblyBudget::default();
    let mut assembly = Assembly::new(budget.clone());
    let old = parts(1, head(), &data(2 * SNAPSHOT_PART_BYTES));
    assembly.receive(old[0].clone(), now).expect("first");
    let new = parts(2, head(), &data(10));
    let (_, d) = assembly
        .receive(new[0].clone(), now)
        .expect("new")
        .expect("complete");
    assert_eq!(d, data(10));
    assert_eq!(
        assembly.receive(old[1].clone(), now),
        Err(TransferError::OutOfOrder),
        "the old one is gone"
    );
    assert_eq!(budget.used(), 0);
}

#[test]
fn a_stalled_transfer_can_be_given_up_and_each_part_extends_it() {
    let t0 = Instant::now();
    let mut assembly = Assembly::new(AssemblyBudget::default());
    let p = parts(1, head(), &data(2 * SNAPSHOT_PART_BYTES));
    assert_eq!(assembly.stalls_at(), None);
    assembly.receive(p[0].clone(), t0).expect("first");
    assert_eq!(assembly.stalls_at(), Some(t0 + SNAPSHOT_STALL));
    assembly.give_up();
    assert_eq!(assembly.stalls_at(), None);
    assert!(assembly.receive(p[1].clone(), t0).is_err());
}

#[test]
fn transfers_on_all_links_share_one_budget() {
    let now = Instant::now();
    let budget = AssemblyBudget::new(3 * SNAPSHOT_PART_BYTES);
    let mut one = Assembly::new(budget.clone());
    let mut two = Assembly::new(budget.clone());
    let big = parts(1, head(), &data(2 * SNAPSHOT_PART_BYTES));
    one.receive(big[0].clone(), now).expect("fits");
    assert_eq!(
        two.receive(big[0].clone(), now),
        Err(TransferError::NoBudget)
    );
    drop(one);
    assert_eq!(budget.used(), 0, "a closed link gives its budget back");
    two.receive(big[0].clone(), now).expect("fits now");
}
