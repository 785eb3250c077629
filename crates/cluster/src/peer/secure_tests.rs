//! Tests of the handshake and the record codec, over in-memory pipes.

use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::*;
use crate::peer::keys::ClusterKeys;

const HELLO: &[u8] = b"BATON-TEST/2\n";
const LIMIT: usize = 1 << 20;

fn keys(text: &str) -> ClusterKeys {
    ClusterKeys::from_text(&text.repeat(40)).expect("key")
}

/// The responder side: reads the hello line as the server's sniffing
/// would, then accepts.
async fn respond(
    mut stream: DuplexStream,
    keys: &ClusterKeys,
) -> Result<(SecureFramed<DuplexStream>, BytesMut), PeerError> {
    let mut hello = vec![0u8; HELLO.len()];
    stream.read_exact(&mut hello).await?;
    accept(stream, BytesMut::from(&hello[..]), HELLO, keys, LIMIT).await
}

async fn pair(
    dialler: &ClusterKeys,
    responder: &ClusterKeys,
) -> (
    Result<SecureFramed<DuplexStream>, PeerError>,
    Result<(SecureFramed<DuplexStream>, BytesMut), PeerError>,
) {
    let (a, b) = tokio::io::duplex(1 << 20);
    let first = Bytes::from_static(b"link hello");
    let dial = connect(a, HELLO, dialler.primary(), first, LIMIT);
    tokio::join!(dial, respond(b, responder))
}

#[tokio::test]
async fn same_key_connects_and_frames_flow_both_ways() {
    let key = keys("a");
    let (dialled, answered) = pair(&key, &key).await;
    let mut dialled = dialled.expect("dialler");
    let (mut answered, first) = answered.expect("responder");
    assert_eq!(&first[..], b"link hello");
    dialled
        .send(Bytes::from_static(b"ping"))
        .await
        .expect("send");
    assert_eq!(
        &answered.next().await.expect("frame").expect("ok")[..],
        b"ping"
    );
    answered.send(Bytes::new()).await.expect("send empty");
    answered
        .send(Bytes::from_static(b"pong"))
        .await
        .expect("send");
    assert!(dialled.next().await.expect("frame").expect("ok").is_empty());
    assert_eq!(
        &dialled.next().await.expect("frame").expect("ok")[..],
        b"pong"
    );
}

#[tokio::test]
async fn a_wrong_key_is_refused_at_both_ends() {
    let (dialled, answered) = pair(&keys("a"), &keys("b")).await;
    assert!(matches!(answered, Err(PeerError::WrongKey)), "{answered:?}");
    // The responder said so (an empty handshake message) and hung up.
    assert!(matches!(dialled, Err(PeerError::WrongKey)), "{dialled:?}");
}

#[tokio::test]
async fn a_responder_without_the_key_is_found_out_by_the_dialler() {
    // A fake node that answers the handshake with its own key.
    let (a, mut b) = tokio::io::duplex(1 << 16);
    let fake = tokio::spawn(async move {
        let mut opening = vec![0u8; HELLO.len() + 2 + 48];
        b.read_exact(&mut opening).await.expect("opening");
        let wrong = keys("z");
        let prologue = prologue(HELLO);
        let mut noise = builder(&prologue, wrong.primary())
            .expect("builder")
            .build_responder()
            .expect("responder");
        let mut payload = [0u8; 256];
        // Its key differs: it cannot even read the dialler's message, so
        // it makes up a reply of the right shape.
        assert!(noise
            .read_message(&opening[HELLO.len() + 2..], &mut payload)
            .is_err());
        let mut reply = vec![0u8, 48];
        reply.extend([7u8; 48]);
        b.write_all(&reply).await.expect("reply");
        b
    });
    let dialled = connect(a, HELLO, keys("a").primary(), Bytes::new(), LIMIT).await;
    assert!(matches!(dialled, Err(PeerError::WrongKey)), "{dialled:?}");
    drop(fake.await);
}

#[tokio::test]
async fn a_replayed_handshake_gets_nowhere() {
    let key = keys("a");
    // Record what a genuine dialler sends.
    let (a, mut tap) = tokio::io::duplex(1 << 20);
    let (b, mut responder_end) = tokio::io::duplex(1 << 20);
    let key_for_responder = key.clone();
    let genuine = tokio::spawn(async move {
        let mut hello = vec![0u8; HELLO.len()];
        responder_end.read_exact(&mut hello).await.expect("hello");
        accept(
            responder_end,
            BytesMut::from(&hello[..]),
            HELLO,
            &key_for_responder,
            LIMIT,
        )
        .await
    });
    let dial = tokio::spawn({
        let key = key.clone();
        async move { connect(a, HELLO, key.primary(), Bytes::from_static(b"hi"), LIMIT).await }
    });
    // Relay both ways while recording what the dialler wrote.
    let (mut tap_read, mut tap_write) = tokio::io::split(&mut tap);
    let (mut b_read, mut b_write) = tokio::io::split(b);
    let mut recorded = Vec::new();
    let mut buf = [0u8; 4096];
    let mut answer = vec![0u8; 2 + 48];
    // Dialler's opening and first frame.
    while recorded.len() < HELLO.len() + 2 + 48 {
        let n = tap_read.read(&mut buf).await.expect("read");
        recorded.extend_from_slice(&buf[..n]);
    }
    b_write.write_all(&recorded).await.expect("relay");
    b_read.read_exact(&mut answer).await.expect("answer");
    tap_write.write_all(&answer).await.expect("relay back");
    let mut frame = vec![0u8; 2 + 1 + 2 + TAG_LEN];
    tap_read.read_exact(&mut frame).await.expect("first frame");
    b_write.write_all(&frame).await.expect("relay frame");
    recorded.extend_from_slice(&frame);
    assert!(dial.await.expect("join").is_ok());
    assert!(genuine.await.expect("join").is_ok());

    // The same bytes again, to a fresh responder: the opening reads (it
    // was made with the key), but its reply has a new ephemeral key, so
    // the recorded first frame does not decrypt.
    let (mut attacker, victim) = tokio::io::duplex(1 << 20);
    attacker.write_all(&recorded).await.expect("replay");
    let replayed = respond(victim, &key).await;
    assert!(matches!(replayed, Err(PeerError::Forged)), "{replayed:?}");
}

#[tokio::test]
async fn a_flipped_bit_in_any_frame_closes_the_channel() {
    let key = keys("a");
    let (a, b) = tokio::io::duplex(1 << 20);
    // The responder reads through a pipe we can tamper with.
    let (mut tamper_in, tamper_out) = tokio::io::duplex(1 << 20);
    let (mut a_read, mut a_write) = tokio::io::split(a);
    let responder_key = key.clone();
    let mut responder_side = tokio::spawn(async move { respond(tamper_out, &responder_key).await });
    let dial = tokio::spawn({
        let key = key.clone();
        async move {
            let mut framed = connect(b, HELLO, key.primary(), Bytes::from_static(b"first"), LIMIT)
                .await
                .expect("connect");
            framed
                .send(Bytes::from_static(b"second frame"))
                .await
                .expect("send");
            framed
        }
    });
    // Relay the dialler's bytes, flipping one bit of the second frame.
    let mut relayed = Vec::new();
    let mut buf = [0u8; 4096];
    let opening = HELLO.len() + 2 + 48;
    let first = 2 + 1 + 5 + TAG_LEN;
    let second = 2 + 1 + 12 + TAG_LEN;
    let mut answer_relay_done = false;
    while relayed.len() < opening + first + second {
        tokio::select! {
            n = a_read.read(&mut buf) => {
                let n = n.expect("read");
                relayed.extend_from_slice(&buf[..n]);
            }
            _ = async {}, if !answer_relay_done && relayed.len() >= opening => {
                answer_relay_done = true;
            }
        }
        if relayed.len() >= opening && !answer_relay_done {
            tamper_in
                .write_all(&relayed[..opening])
                .await
                .expect("opening");
            let mut answer = vec![0u8; 2 + 48];
            tamper_in.read_exact(&mut answer).await.expect("answer");
            a_write.write_all(&answer).await.expect("answer back");
            answer_relay_done = true;
        }
    }
    let mut rest = relayed[opening..].to_vec();
    rest[first + 10] ^= 0x04;
    tamper_in.write_all(&rest).await.expect("rest");
    let (mut framed, hello) = (&mut responder_side).await.expect("join").expect("accept");
    assert_eq!(&hello[..], b"first");
    let tampered = framed.next().await.expect("an item");
    assert!(matches!(tampered, Err(PeerError::Forged)), "{tampered:?}");
    drop(dial.await);
}

#[tokio::test]
async fn large_frames_travel_in_records_and_the_limit_holds() {
    let key = keys("a");
    let (dialled, answered) = pair(&key, &key).await;
    let mut dialled = dialled.expect("dialler");
    let (mut answered, _) = answered.expect("responder");
    let big: Vec<u8> = (0..(3 * MAX_CHUNK + 17)).map(|i| i as u8).collect();
    let sender = tokio::spawn(async move {
        dialled.send(Bytes::from(big.clone())).await.expect("send");
        dialled
            .send(Bytes::from(vec![1u8; 200_000]))
            .await
            .expect("send");
        (dialled, big)
    });
    let got = answered.next().await.expect("frame").expect("ok");
    answered.codec_mut().set_max_frame(100_000);
    let over = answered.next().await.expect("an item");
    let (_dialled, big) = sender.await.expect("join");
    assert_eq!(&got[..], &big[..]);
    assert!(
        matches!(over, Err(PeerError::TooLarge { max: 100_000, .. })),
        "{over:?}"
    );
}

#[tokio::test]
async fn during_a_rotation_either_key_is_accepted() {
    let old = keys("o");
    let new = keys("n");
    let both = ClusterKeys::new(vec![old.primary().clone(), new.primary().clone()]).expect("two");
    let (dialled, answered) = pair(&new, &both).await;
    assert!(dialled.is_ok() && answered.is_ok());
    let (dialled, answered) = pair(&old, &both).await;
    assert!(dialled.is_ok() && answered.is_ok());
    let (_, answered) = pair(&both, &new).await;
    assert!(
        matches!(answered, Err(PeerError::WrongKey)),
        "dials with its first, the old key"
    );
}

#[tokio::test(start_paused = true)]
async fn an_unfinished_handshake_is_closed_in_time() {
    let (mut a, b) = tokio::io::duplex(1 << 16);
    a.write_all(HELLO).await.expect("hello");
    a.write_all(&[0, 48, 1, 2, 3])
        .await
        .expect("part of a message");
    let answered = respond(b, &keys("a")).await;
    assert!(
        matches!(answered, Err(PeerError::HandshakeTimeout)),
        "{answered:?}"
    );
    drop(a);
}

#[tokio::test]
async fn oversized_handshake_messages_are_refused_at_once() {
    let (mut a, b) = tokio::io::duplex(1 << 16);
    a.write_all(HELLO).await.expect("hello");
    a.write_all(&[0xff, 0xff]).await.expect("a 64 KiB length");
    let answered = respond(b, &keys("a")).await;
    assert!(
        matches!(answered, Err(PeerError::Malformed)),
        "{answered:?}"
    );
}
