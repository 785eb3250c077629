//! The hand-made encoding of `Commands` is the derived one, byte for byte.

use baton_core::{Command, Key};

use super::*;
use crate::priority::messages::Heartbeat;
use crate::priority::PeerRole;

fn key(len: usize, fill: u8) -> Key {
    Key::new(&vec![fill; len]).expect("a valid key")
}

/// Commands of every kind, keys of 1, 127, 128 (a two-byte length) and
/// the longest length, numbers small and at their largest.
fn batch() -> Vec<Command> {
    let mut commands = Command::widest();
    for (i, len) in [1usize, 127, 128, baton_core::MAX_KEY_LEN]
        .into_iter()
        .enumerate()
    {
        let k = key(len, b'a' + i as u8);
        commands.extend([
            Command::Grant {
                key: k.clone(),
                lease_ms: 30_000,
            },
            Command::Renew {
                key: k.clone(),
                token: u64::MAX,
                lease_ms: 1,
            },
            Command::Release {
                key: k.clone(),
                token: 300,
            },
            Command::Expire { key: k, token: 0 },
        ]);
    }
    commands.push(Command::RaiseTokenFloor { floor: 1 << 40 });
    commands
}

fn commands(commands: Vec<Command>) -> PriorityMessage {
    PriorityMessage::Commands {
        term: 77,
        first_seq: 1 << 33,
        commands: commands.into_iter().collect(),
    }
}

#[test]
fn commands_encode_exactly_as_derived_and_decode_back() {
    for message in [commands(batch()), commands(Vec::new())] {
        let derived = postcard::to_allocvec(&message).expect("derived");
        assert_eq!(derived[0], COMMANDS);
        let ours = encode_into(&message, Vec::new()).expect("ours");
        assert_eq!(ours, derived);
        assert_eq!(decode(&derived).expect("decode"), message);
    }
}

#[test]
fn encoding_appends_to_what_is_there() {
    let message = commands(batch());
    let mut expected = vec![1, 2, 3, 4];
    expected.extend(postcard::to_allocvec(&message).expect("derived"));
    assert_eq!(
        encode_into(&message, vec![1, 2, 3, 4]).expect("ours"),
        expected
    );
}

#[test]
fn other_messages_keep_the_derived_encoding() {
    let beat = PriorityMessage::Heartbeat(Heartbeat {
        role: PeerRole::Active,
        term: 3,
        seq: 9,
        last_token: 12,
        following: None,
    });
    for message in [
        beat,
        PriorityMessage::SyncRequest,
        PriorityMessage::HandoffTaken,
    ] {
        let derived = postcard::to_allocvec(&message).expect("derived");
        assert_eq!(encode_into(&message, Vec::new()).expect("ours"), derived);
        assert_eq!(decode(&derived).expect("decode"), message);
    }
}

#[test]
fn a_key_against_the_rules_is_refused_like_the_derived_decoding_does() {
    let message = commands(vec![Command::Release {
        key: key(3, b'k'),
        token: 5,
    }]);
    let good = postcard::to_allocvec(&message).expect("derived");
    let at = good.iter().position(|&b| b == b'k').expect("the key");
    for bad_byte in [b' ', 0x7f, 0] {
        let mut bad = good.clone();
        bad[at] = bad_byte;
        assert!(postcard::from_bytes::<PriorityMessage>(&bad).is_err());
        assert!(decode(&bad).is_err(), "byte {bad_byte:#x}");
    }
    // An empty key, and a key cut short by the end of the message.
    let mut empty = good.clone();
    empty[at - 1] = 0;
    empty.truncate(at);
    empty.push(5);
    assert!(decode(&empty).is_err());
    assert!(decode(&good[..at + 1]).is_err());
    assert!(decode(&[COMMANDS]).is_err());
    assert!(decode(&[]).is_err());
}
