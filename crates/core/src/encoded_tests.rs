// A failed unwrap in a test is a failed test.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;

use super::*;

fn key(s: &str) -> Key {
    Key::try_from(s).unwrap()
}

fn a_few() -> Vec<Command> {
    let mut commands = Command::widest();
    commands.extend([
        Command::Grant {
            key: key("a"),
            lease_ms: 0,
        },
        Command::Release {
            key: key("b"),
            token: 300,
        },
        Command::RaiseTokenFloor { floor: 0 },
        Command::Expire {
            key: key("c"),
            token: 1,
        },
        Command::GrantWith {
            key: key("d"),
            lease_ms: 5,
            options: AcquireOptions {
                permits: 3,
                mode: LockMode::Exclusive,
                value: None,
            },
        },
        Command::SetValue {
            key: key("d"),
            token: 9,
            value: None,
        },
    ]);
    commands
}

#[test]
fn the_1_1_commands_keep_their_bytes() {
    // What a 1.1 node journaled, logged or sent: still read the same.
    let grant = Command::Grant {
        key: key("a"),
        lease_ms: 300,
    };
    let encoded: EncodedCommands = [grant.clone()].iter().collect();
    assert_eq!(encoded.as_bytes(), &[0, 1, b'a', 0xac, 0x02]);
    let parsed = EncodedCommands::parse(1, &[0, 1, b'a', 0xac, 0x02]).unwrap();
    assert_eq!(parsed.iter().next().unwrap().unwrap(), grant);
}

#[test]
fn bad_options_and_values_are_refused() {
    // GrantWith of key "a", lease 1, permits 0: options that do not hold together.
    assert_eq!(
        EncodedCommands::parse(1, &[5, 1, b'a', 1, 0, 0, 0]),
        Err(DecodeError::Options)
    );
    // Shared with 2 permits.
    assert_eq!(
        EncodedCommands::parse(1, &[5, 1, b'a', 1, 2, 1, 0]),
        Err(DecodeError::Options)
    );
    // A mode past the enum.
    assert_eq!(
        EncodedCommands::parse(1, &[5, 1, b'a', 1, 1, 2, 0]),
        Err(DecodeError::Options)
    );
    // SetValue with the value "-", and with a space.
    assert_eq!(
        EncodedCommands::parse(1, &[6, 1, b'a', 1, 1, 1, b'-']),
        Err(DecodeError::Value(ValueError::Dash))
    );
    assert!(EncodedCommands::parse(1, &[6, 1, b'a', 1, 1, 1, b' ']).is_err());
    // A value longer than the rules allow, and a presence byte past 1.
    let mut long = vec![6, 1, b'a', 1, 1, 129, 1];
    long.extend([b'v'; 129]);
    assert!(EncodedCommands::parse(1, &long).is_err());
    assert!(EncodedCommands::parse(1, &[6, 1, b'a', 1, 2]).is_err());
}

/// What postcard writes for the commands as a list, and our bytes with
/// the list's length in front.
fn both_encodings(commands: &[Command]) -> (Vec<u8>, Vec<u8>) {
    let encoded: EncodedCommands = commands.iter().collect();
    let mut ours = Vec::new();
    encode_varint(encoded.len() as u64, &mut ours);
    ours.extend_from_slice(encoded.as_bytes());
    (postcard::to_allocvec(&commands.to_vec()).unwrap(), ours)
}

#[test]
fn the_bytes_are_postcards_encoding_of_the_list() {
    let commands = a_few();
    let (postcard, ours) = both_encodings(&commands);
    assert_eq!(ours, postcard);
    let encoded: EncodedCommands = commands.iter().collect();
    // The serde implementation writes the same.
    assert_eq!(postcard::to_allocvec(&encoded).unwrap(), postcard);
    let back: EncodedCommands = postcard::from_bytes(&postcard).unwrap();
    assert_eq!(back, encoded);
}

#[test]
fn parsed_bytes_decode_into_the_commands() {
    let commands = a_few();
    let encoded: EncodedCommands = commands.iter().collect();
    let parsed = EncodedCommands::parse(commands.len(), encoded.as_bytes()).unwrap();
    let decoded: Vec<Command> = parsed.iter().map(Result::unwrap).collect();
    assert_eq!(decoded, commands);
    assert_eq!(parsed.highest_token(), u64::MAX);
    assert_eq!(encoded.highest_token(), u64::MAX);
}

#[test]
fn bad_bytes_are_refused_with_their_reason() {
    let grant: EncodedCommands = [Command::Grant {
        key: key("k"),
        lease_ms: 5,
    }]
    .iter()
    .collect();
    let bytes = grant.as_bytes();
    assert_eq!(bytes, [0, 1, b'k', 5]);
    let parse = |count, bytes: &[u8]| EncodedCommands::parse(count, bytes);
    assert_eq!(parse(1, &bytes[..3]), Err(DecodeError::Truncated));
    assert_eq!(parse(2, bytes), Err(DecodeError::Truncated));
    assert_eq!(parse(0, bytes), Err(DecodeError::Trailing(4)));
    assert_eq!(parse(1, &[9, 1, b'k', 5]), Err(DecodeError::Variant(9)));
    assert_eq!(
        parse(1, &[0, 1, b' ', 5]),
        Err(DecodeError::Key(KeyError::ForbiddenByte { byte: b' ' }))
    );
    assert_eq!(parse(1, &[0, 0, 5]), Err(DecodeError::Key(KeyError::Empty)));
    assert_eq!(
        parse(1, &[0, 0xfb, 0x01]),
        Err(DecodeError::Key(KeyError::TooLong { len: 251 }))
    );
    let mut too_wide = vec![4];
    too_wide.extend([0xff; 9]);
    too_wide.push(0x02);
    assert_eq!(parse(1, &too_wide), Err(DecodeError::Overflow));
    let mut widest = vec![4];
    widest.extend([0xff; 9]);
    widest.push(0x01);
    assert_eq!(parse(1, &widest).unwrap().highest_token(), u64::MAX);
}

#[test]
fn a_split_keeps_the_order_and_each_run_within_room() {
    let commands: Vec<Command> = (0..40)
        .map(|i| Command::Release {
            key: key(&format!("key-{i}")),
            token: i,
        })
        .collect();
    let encoded: EncodedCommands = commands.iter().collect();
    for room in [0, 1, 9, 10, 50, 1000] {
        let runs = encoded.split(room);
        let rejoined: Vec<Command> = runs
            .iter()
            .flat_map(|r| r.iter())
            .map(Result::unwrap)
            .collect();
        assert_eq!(rejoined, commands, "room {room}");
        assert!(runs
            .iter()
            .all(|r| r.len() == 1 || r.as_bytes().len() <= room));
        assert!(runs.iter().all(|r| !r.is_empty()));
        // Each run knows its own highest token.
        for run in &runs {
            let highest = run.iter().map(|c| match c.unwrap() {
                Command::Release { token, .. } => token,
                _ => unreachable!(),
            });
            assert_eq!(Some(run.highest_token()), highest.max());
        }
    }
    assert_eq!(encoded.split(1000).len(), 1);
    assert_eq!(EncodedCommands::default().split(10).len(), 1);
}

#[test]
fn the_encoder_starts_over_after_each_take() {
    let mut encoder = CommandEncoder::default();
    assert!(encoder.is_empty());
    encoder.push(&Command::RaiseTokenFloor { floor: 7 });
    let first = encoder.take();
    assert!(encoder.is_empty());
    encoder.push(&Command::RaiseTokenFloor { floor: 8 });
    let second = encoder.take();
    assert_eq!(
        (first.as_bytes(), second.as_bytes()),
        (&[4, 7][..], &[4, 8][..])
    );
}

/// The token a command names: what `highest_token` is the maximum of.
fn named_token(command: &Command) -> u64 {
    match command {
        Command::Grant { .. } | Command::GrantWith { .. } => 0,
        Command::Release { token, .. }
        | Command::Renew { token, .. }
        | Command::Expire { token, .. }
        | Command::SetValue { token, .. } => *token,
        Command::RaiseTokenFloor { floor } => *floor,
    }
}

fn any_key() -> impl Strategy<Value = Key> {
    proptest::collection::vec(0x21u8..0x7f, 1..=MAX_KEY_LEN).prop_map(|b| Key::new(&b).unwrap())
}

fn any_command() -> impl Strategy<Value = Command> {
    prop_oneof![
        (any_key(), any::<u64>()).prop_map(|(key, lease_ms)| Command::Grant { key, lease_ms }),
        (any_key(), any::<u64>()).prop_map(|(key, token)| Command::Release { key, token }),
        (any_key(), any::<u64>(), any::<u64>()).prop_map(|(key, token, lease_ms)| {
            Command::Renew {
                key,
                token,
                lease_ms,
            }
        }),
        (any_key(), any::<u64>()).prop_map(|(key, token)| Command::Expire { key, token }),
        any::<u64>().prop_map(|floor| Command::RaiseTokenFloor { floor }),
        (any_key(), any::<u64>(), any_options()).prop_map(|(key, lease_ms, options)| {
            Command::GrantWith {
                key,
                lease_ms,
                options,
            }
        }),
        (any_key(), any::<u64>(), proptest::option::of(any_value()))
            .prop_map(|(key, token, value)| Command::SetValue { key, token, value }),
    ]
}

fn any_value() -> impl Strategy<Value = HolderValue> {
    proptest::collection::vec(0x21u8..0x7f, 2..=MAX_VALUE_LEN)
        .prop_map(|b| HolderValue::new(&b).unwrap())
}

fn any_options() -> impl Strategy<Value = AcquireOptions> {
    (
        1..=crate::MAX_PERMITS,
        any::<bool>(),
        proptest::option::of(any_value()),
    )
        .prop_map(|(permits, shared, value)| AcquireOptions {
            permits: if shared { 1 } else { permits },
            mode: if shared {
                LockMode::Shared
            } else {
                LockMode::Exclusive
            },
            value,
        })
}

proptest! {
    #[test]
    fn any_commands_encode_as_postcard_and_decode_back(
        commands in proptest::collection::vec(any_command(), 0..20),
    ) {
        let (postcard, ours) = both_encodings(&commands);
        prop_assert_eq!(ours, postcard);
        let encoded: EncodedCommands = commands.iter().collect();
        let parsed = EncodedCommands::parse(commands.len(), encoded.as_bytes()).unwrap();
        let decoded: Vec<Command> = parsed.iter().map(Result::unwrap).collect();
        let highest = commands.iter().map(named_token).max().unwrap_or(0);
        prop_assert_eq!((encoded.highest_token(), parsed.highest_token()), (highest, highest));
        prop_assert_eq!(decoded, commands);
    }

    /// Hostile bytes: never a panic, and whatever is accepted is what
    /// postcard reads from the same bytes.
    #[test]
    fn any_bytes_parse_or_are_refused_as_postcard_would(
        count in 0usize..4,
        bytes in proptest::collection::vec(any::<u8>(), 0..40),
    ) {
        let Ok(parsed) = EncodedCommands::parse(count, &bytes) else {
            return Ok(());
        };
        let mut listed = Vec::new();
        encode_varint(count as u64, &mut listed);
        listed.extend_from_slice(&bytes);
        let theirs: Vec<Command> = postcard::from_bytes(&listed).unwrap();
        let ours: Vec<Command> = parsed.iter().map(Result::unwrap).collect();
        prop_assert_eq!(ours, theirs);
    }

    /// A valid list with one byte changed: mostly refused, and where not,
    /// read as postcard reads it.
    #[test]
    fn a_changed_byte_is_refused_or_read_as_postcard_would(
        commands in proptest::collection::vec(any_command(), 1..6),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let encoded: EncodedCommands = commands.iter().collect();
        let mut bytes = encoded.as_bytes().to_vec();
        let i = at.index(bytes.len());
        bytes[i] = byte;
        if let Ok(parsed) = EncodedCommands::parse(commands.len(), &bytes) {
            let mut listed = Vec::new();
            encode_varint(commands.len() as u64, &mut listed);
            listed.extend_from_slice(&bytes);
            let theirs: Vec<Command> = postcard::from_bytes(&listed).unwrap();
            let ours: Vec<Command> = parsed.iter().map(Result::unwrap).collect();
            prop_assert_eq!(ours, theirs);
        }
    }
}
