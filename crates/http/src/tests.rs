//! The handlers, driven through the router with tower's `oneshot` over a
//! real single node's state.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use base64::Engine;
use baton_core::{Command, Key, LockTable};
use baton_server::{Auth, Clock, SharedLocks, SingleNode};
use serde_json::Value;
use tower::ServiceExt;

use crate::{router, HttpContext};

const SELF: &str = "127.0.0.1:7411";

fn locks_with(keys: &[&str]) -> Arc<SharedLocks<SingleNode>> {
    let mut table = LockTable::new();
    for k in keys {
        let key = Key::new(k.as_bytes()).expect("key");
        // Leases counted from 0 on the node's clock, which starts at 0.
        table.apply(
            &Command::Grant {
                key,
                lease_ms: 600_000,
            },
            0,
        );
    }
    let node = SingleNode::starting_above(table, 1 << 40);
    Arc::new(SharedLocks::new(node, Clock::new()))
}

fn app(keys: &[&str], auth: Option<Arc<Auth>>) -> Router {
    router(HttpContext::new(locks_with(keys), SELF.to_string(), auth))
}

async fn get(
    app: &Router,
    uri: &str,
    basic: Option<(&str, &str)>,
) -> (StatusCode, axum::http::HeaderMap, String) {
    let mut request = Request::get(uri);
    if let Some((user, secret)) = basic {
        let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{secret}"));
        request = request.header(header::AUTHORIZATION, format!("Basic {encoded}"));
    }
    let response = app
        .clone()
        .oneshot(request.body(Body::empty()).expect("request"))
        .await
        .expect("infallible");
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 24).await.expect("body");
    (
        parts.status,
        parts.headers,
        String::from_utf8(bytes.to_vec()).expect("utf-8"),
    )
}

fn assert_has_line(text: &str, line: &str) {
    assert!(
        text.lines().any(|l| l == line),
        "no line {line:?} in\n{text}"
    );
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[tokio::test]
async fn health_of_a_single_node_is_200_serving() {
    let app = app(&[], None);
    let (code, headers, body) = get(&app, "/health", None).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "application/json");
    let body = json(&body);
    assert_eq!(body["status"], "serving");
    assert_eq!(body["role"], "single");
    assert_eq!(body["mode"], "single");
    assert_eq!(body["self"], SELF);
    assert_eq!(body["active"], SELF);
    assert!(body.get("term").is_none());
}

#[tokio::test]
async fn metrics_are_prometheus_text_with_the_node_state() {
    let app = app(&["a", "b"], None);
    let (code, headers, text) = get(&app, "/metrics", None).await;
    assert_eq!(code, StatusCode::OK);
    assert!(headers[header::CONTENT_TYPE]
        .to_str()
        .expect("ascii")
        .starts_with("text/plain; version=0.0.4"));
    for line in [
        "# TYPE baton_requests_total counter",
        "baton_requests_total{op=\"acquire\"} 0",
        "baton_errors_total{reason=\"not_held\"} 0",
        "baton_grants_total 0",
        "baton_expiries_total 0",
        "baton_locks_held 2",
        "baton_waiters_queued 0",
        "baton_role{role=\"single\"} 1",
        "baton_role{role=\"leader\"} 0",
        "# TYPE baton_acquire_wait_seconds histogram",
        "baton_acquire_wait_seconds_bucket{le=\"+Inf\"} 0",
        "baton_hold_seconds_count 0",
        "baton_handover_seconds_sum 0.0",
    ] {
        assert_has_line(&text, line);
    }
    let token = text
        .lines()
        .find_map(|l| l.strip_prefix("baton_last_token "))
        .expect("token");
    // The floor was raised above the two grants of the table.
    assert_eq!(token.parse::<u64>().expect("integer"), 1 << 40);
}

#[tokio::test]
async fn locks_are_listed_by_key_with_prefix_limit_and_paging() {
    let app = app(&["jobs/3", "jobs/1", "orders/1", "jobs/2", "jobs/10"], None);
    let (code, _, body) = get(&app, "/v1/locks?prefix=jobs/&limit=2", None).await;
    assert_eq!(code, StatusCode::OK);
    let page = json(&body);
    let keys: Vec<&str> = page["locks"]
        .as_array()
        .expect("array")
        .iter()
        .map(|l| l["key"].as_str().expect("key"))
        .collect();
    assert_eq!(keys, ["jobs/1", "jobs/10"]);
    assert_eq!(page["next"], "jobs/10");
    let first = &page["locks"][0];
    assert!(first["token"]
        .as_str()
        .expect("a string")
        .parse::<u64>()
        .is_ok());
    assert!(first["lease_left_ms"].as_u64().expect("ms") > 590_000);
    assert_eq!(first["waiters"], 0);
    assert_eq!(
        (&first["permits"], &first["mode"]),
        (&Value::from(1), &Value::from("exclusive"))
    );
    let holders = first["holders"].as_array().expect("holders");
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0]["token"], first["token"]);
    assert_eq!(holders[0]["value"], Value::Null);
    let (_, _, body) = get(&app, "/v1/locks?prefix=jobs/&limit=2&after=jobs/10", None).await;
    let page = json(&body);
    assert_eq!(page["locks"].as_array().expect("array").len(), 2);
    assert_eq!(page["next"], Value::Null);
    let (_, _, body) = get(&app, "/v1/locks", None).await;
    assert_eq!(json(&body)["locks"].as_array().expect("array").len(), 5);
    // Percent-encoded prefixes are decoded.
    let (_, _, body) = get(&app, "/v1/locks?prefix=orders%2F", None).await;
    assert_eq!(json(&body)["locks"][0]["key"], "orders/1");
}

#[tokio::test]
async fn bad_listing_parameters_are_400_and_huge_limits_are_capped() {
    let app = app(&["a"], None);
    for uri in [
        "/v1/locks?limit=0",
        "/v1/locks?limit=-1",
        "/v1/locks?limit=x",
        "/v1/locks?bogus=1",
    ] {
        let (code, _, body) = get(&app, uri, None).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{uri}: {body}");
        // Every error is `{"error": "..."}`, as docs/metrics.md says.
        let error: serde_json::Value = serde_json::from_str(&body).expect("a JSON body");
        assert!(error["error"].is_string(), "{uri}: {body}");
    }
    let (_, _, body) = get(&app, "/v1/locks?bogus=1", None).await;
    assert!(
        json(&body)["error"].as_str().is_some_and(
            |e| e.starts_with("bad query string: ") && e.contains("unknown field `bogus`")
        ),
        "{body}"
    );
    let long = "x".repeat(251);
    let (code, _, _) = get(&app, &format!("/v1/locks?prefix={long}"), None).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    let (code, _, body) = get(&app, "/v1/locks?limit=99999999999999999999", None).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{body}");
    let (code, _, body) = get(&app, "/v1/locks?limit=1000000", None).await;
    assert_eq!(code, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn the_cluster_of_a_single_node_is_itself() {
    let app = app(&["a"], None);
    let (code, _, body) = get(&app, "/v1/cluster", None).await;
    assert_eq!(code, StatusCode::OK);
    let c = json(&body);
    assert_eq!(c["role"], "single");
    assert_eq!(c["locks"], 1);
    assert_eq!(c["members"][0]["addr"], SELF);
    assert_eq!(c["members"][0]["self"], true);
}

#[tokio::test]
async fn unknown_routes_are_404_and_other_methods_405() {
    let app = app(&[], None);
    let (code, _, _) = get(&app, "/nope", None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    let response = app
        .clone()
        .oneshot(
            Request::post("/health")
                .body(Body::from("x"))
                .expect("request"),
        )
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
}

/// `method uri` with `body` (and a JSON content type when `as_json`): the
/// status, the content type, and the body parsed as JSON.
async fn answer(
    app: &Router,
    method: &str,
    uri: &str,
    body: Vec<u8>,
    as_json: bool,
) -> (StatusCode, String, Value) {
    let mut request = Request::builder().method(method).uri(uri);
    if as_json {
        request = request.header(header::CONTENT_TYPE, "application/json");
    }
    let request = request.body(Body::from(body)).expect("request");
    let response = app.clone().oneshot(request).await.expect("infallible");
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20).await.expect("body");
    let kind = parts
        .headers
        .get(header::CONTENT_TYPE)
        .map(|t| t.to_str().unwrap_or_default().to_owned())
        .unwrap_or_default();
    (parts.status, kind, json(&String::from_utf8_lossy(&bytes)))
}

#[tokio::test]
async fn every_error_is_json_with_the_status_that_says_why() {
    let app = app(&["jobs/1"], None);
    let too_large = vec![b'a'; crate::limits::MAX_BODY_BYTES + 1];
    let cases: [(&str, &str, Vec<u8>, bool, StatusCode); 10] = [
        (
            "POST",
            "/v1/locks",
            vec![],
            false,
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (
            "DELETE",
            "/v1/cluster",
            vec![],
            false,
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (
            "GET",
            "/v1/force-release",
            vec![],
            false,
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (
            "PUT",
            "/health",
            vec![],
            false,
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        ("GET", "/v1/nope", vec![], false, StatusCode::NOT_FOUND),
        (
            "GET",
            "/v1/locks?foo=1",
            vec![],
            false,
            StatusCode::BAD_REQUEST,
        ),
        (
            "GET",
            "/v1/locks?limit=x",
            vec![],
            false,
            StatusCode::BAD_REQUEST,
        ),
        (
            "POST",
            "/v1/force-release",
            b"{bad".to_vec(),
            true,
            StatusCode::BAD_REQUEST,
        ),
        (
            "POST",
            "/v1/force-release",
            b"{}".to_vec(),
            false,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
        (
            "POST",
            "/v1/force-release",
            too_large,
            true,
            StatusCode::PAYLOAD_TOO_LARGE,
        ),
    ];
    for (method, uri, body, as_json, expected) in cases {
        let (code, kind, body) = answer(&app, method, uri, body, as_json).await;
        assert_eq!(code, expected, "{method} {uri}: {body}");
        assert_eq!(kind, "application/json", "{method} {uri}");
        let words = body["error"].as_str().unwrap_or_default();
        assert!(!words.is_empty(), "{method} {uri}: {body}");
    }
    let (_, _, body) = answer(&app, "POST", "/v1/locks", vec![], false).await;
    assert_eq!(
        body["error"],
        "method not allowed: POST /v1/locks (the Allow header lists the methods it takes)"
    );
    let (_, _, listed) = get(&app, "/v1/locks", None).await;
    assert_eq!(json(&listed)["locks"].as_array().map(Vec::len), Some(1));
}

fn users() -> (Arc<Auth>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("users.toml");
    let file = "[[user]]\nname = \"ops\"\nsecret = \"ops-secret\"\nadmin = true\n\n[[user]]\nname = \"billing\"\nsecret = \"billing-secret\"\nprefixes = [\"billing/\"]\n";
    std::fs::write(&path, file).expect("write");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    (Arc::new(Auth::load(&path).expect("users")), dir)
}

#[tokio::test(start_paused = true)]
async fn with_users_the_v1_routes_need_an_admin_and_the_others_stay_open() {
    let (auth, _dir) = users();
    let app = app(&["billing/1"], Some(auth));
    for uri in ["/v1/locks", "/v1/cluster", "/ui", "/ui/console.js"] {
        let (code, headers, _) = get(&app, uri, None).await;
        assert_eq!(code, StatusCode::UNAUTHORIZED, "{uri}");
        assert_eq!(
            headers[header::WWW_AUTHENTICATE],
            crate::basic_auth::CHALLENGE
        );
        let (code, headers, _) = get(&app, uri, Some(("ops", "wrong"))).await;
        assert_eq!(code, StatusCode::UNAUTHORIZED, "{uri}");
        assert!(headers.contains_key(header::WWW_AUTHENTICATE));
        let (code, _, _) = get(&app, uri, Some(("nobody", "ops-secret"))).await;
        assert_eq!(code, StatusCode::UNAUTHORIZED, "{uri}");
        let (code, _, _) = get(&app, uri, Some(("billing", "billing-secret"))).await;
        assert_eq!(code, StatusCode::FORBIDDEN, "{uri}");
        let (code, _, _) = get(&app, uri, Some(("ops", "ops-secret"))).await;
        assert_eq!(code, StatusCode::OK, "{uri}");
    }
    let (code, _, _) = get(&app, "/health", None).await;
    assert_eq!(code, StatusCode::OK);
    let (code, _, _) = get(&app, "/metrics", None).await;
    assert_eq!(code, StatusCode::OK);
}

#[test]
fn basic_credentials_are_read_from_the_header() {
    use axum::http::{HeaderMap, HeaderValue};
    let mut headers = HeaderMap::new();
    let encoded = base64::engine::general_purpose::STANDARD.encode("ops:a:b");
    headers.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("basic {encoded}")).expect("ascii"),
    );
    let (user, secret) = crate::basic_auth::credentials(&headers).expect("read");
    assert_eq!(
        (user.as_slice(), secret.as_slice()),
        (&b"ops"[..], &b"a:b"[..])
    );
    for bad in ["Bearer x", "Basic !!!", "Basic", "Basic b3Bz"] {
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static(bad));
        assert!(crate::basic_auth::credentials(&headers).is_none(), "{bad}");
    }
}

#[tokio::test]
async fn histogram_buckets_are_cumulative_in_the_text() {
    let locks = locks_with(&[]);
    for ms in [0, 3, 3, 7_000] {
        locks.metrics().acquire_wait.observe(ms);
    }
    let app = router(HttpContext::new(locks, SELF.to_string(), None));
    let (_, _, text) = get(&app, "/metrics", None).await;
    for line in [
        "baton_acquire_wait_seconds_bucket{le=\"0.001\"} 1",
        "baton_acquire_wait_seconds_bucket{le=\"0.002\"} 1",
        "baton_acquire_wait_seconds_bucket{le=\"0.005\"} 3",
        "baton_acquire_wait_seconds_bucket{le=\"2.5\"} 3",
        "baton_acquire_wait_seconds_bucket{le=\"10\"} 4",
        "baton_acquire_wait_seconds_bucket{le=\"+Inf\"} 4",
        "baton_acquire_wait_seconds_count 4",
        "baton_acquire_wait_seconds_sum 7.006",
    ] {
        assert_has_line(&text, line);
    }
}

/// A membership that answers from a script: `add` of `pending:*` is 202
/// (504 once the caller's wait is under a second), of `taken:*` 409, of
/// `follower:*` 421; `remove` of `gone:*` is 404.
struct ScriptedMembers;

impl crate::members::MembershipAdmin for ScriptedMembers {
    fn list(&self) -> Vec<crate::members::MemberEntry> {
        vec![crate::members::MemberEntry {
            // A joined node's id: above 2^53, where JSON numbers round.
            id: (1 << 62) + 1,
            addr: "a:1".into(),
            membership: "voter",
        }]
    }

    fn add<'a>(
        &'a self,
        addr: &'a str,
        wait: Option<std::time::Duration>,
    ) -> crate::members::AdminFuture<'a> {
        use crate::members::AdminError;
        Box::pin(async move {
            let last_ask = wait.is_some_and(|w| w.as_secs() < 1);
            match addr.split_once(':').map(|(kind, _)| kind) {
                Some("pending") if last_ask => Err(AdminError::TimedOut("rolled back".into())),
                Some("pending") => Err(AdminError::Pending("catching up".into())),
                Some("taken") => Err(AdminError::Conflict("already".into())),
                Some("follower") => Err(AdminError::NotLeader {
                    leader: Some("b:2".into()),
                }),
                _ => Ok(self.list()),
            }
        })
    }

    fn remove<'a>(&'a self, addr: &'a str) -> crate::members::AdminFuture<'a> {
        Box::pin(async move {
            if addr.starts_with("gone:") {
                Err(crate::members::AdminError::NotFound("not a member".into()))
            } else {
                Ok(self.list())
            }
        })
    }
}

async fn send(app: &Router, method: &str, uri: &str, body: &str) -> (StatusCode, Value) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .expect("request");
    let response = app.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("body");
    (status, json(&String::from_utf8_lossy(&bytes)))
}

#[tokio::test]
async fn members_routes_answer_each_outcome_with_its_status() {
    let mut ctx = HttpContext::new(locks_with(&[]), SELF.to_string(), None);
    ctx.members = Some(Arc::new(ScriptedMembers));
    let app = router(ctx);
    let (code, _, body) = get(&app, "/v1/members", None).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(json(&body)["members"][0]["membership"], "voter");
    assert_eq!(json(&body)["members"][0]["id"], "4611686018427387905");
    let add = |addr: &str| format!("{{\"addr\": \"{addr}\"}}");
    let cases = [
        ("new:1", StatusCode::OK),
        ("pending:1", StatusCode::ACCEPTED),
        ("taken:1", StatusCode::CONFLICT),
        ("follower:1", StatusCode::MISDIRECTED_REQUEST),
    ];
    for (addr, want) in cases {
        let (code, body) = send(&app, "POST", "/v1/members", &add(addr)).await;
        assert_eq!(code, want, "{addr}: {body}");
    }
    let (_, body) = send(&app, "POST", "/v1/members", &add("follower:1")).await;
    assert_eq!(body["leader"], "b:2");
    let last = "{\"addr\": \"pending:1\", \"wait_ms\": 500}";
    let (code, body) = send(&app, "POST", "/v1/members", last).await;
    assert_eq!(code, StatusCode::GATEWAY_TIMEOUT, "{body}");
    for bad in [
        "",
        "{}",
        "{\"addr\": 5}",
        "{\"addr\": \"a:1\", \"x\": 1}",
        "[1]",
    ] {
        let (code, body) = send(&app, "POST", "/v1/members", bad).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{bad:?}: {body}");
    }
    let (code, _) = send(&app, "DELETE", "/v1/members/gone:1", "").await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    let (code, _) = send(&app, "DELETE", "/v1/members/a%3A1", "").await;
    assert_eq!(code, StatusCode::OK);
}

#[tokio::test]
async fn a_node_without_raft_has_no_membership_to_change() {
    let app = app(&[], None);
    let (code, _, body) = get(&app, "/v1/members", None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert!(body.contains("rolling restart"), "{body}");
    let (code, _) = send(&app, "POST", "/v1/members", "{\"addr\": \"a:1\"}").await;
    assert_eq!(code, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn with_users_membership_changes_need_an_admin() {
    let (auth, _dir) = users();
    let mut ctx = HttpContext::new(locks_with(&[]), SELF.to_string(), Some(auth));
    ctx.members = Some(Arc::new(ScriptedMembers));
    let app = router(ctx);
    let (code, _) = send(&app, "POST", "/v1/members", "{\"addr\": \"new:1\"}").await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    let (code, _, _) = get(&app, "/v1/members", Some(("billing", "billing-secret"))).await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    let (code, _, _) = get(&app, "/v1/members", Some(("ops", "ops-secret"))).await;
    assert_eq!(code, StatusCode::OK);
}

#[tokio::test]
async fn the_configured_caps_and_the_start_are_gauges() {
    let locks = locks_with(&[]);
    let quota = baton_core::Quota {
        max_locks: 500,
        max_waiters: 600,
        ..baton_core::Quota::default()
    };
    locks.metrics().started(100, quota, 1_700_000_000_999);
    let app = router(HttpContext::new(locks, SELF.to_string(), None));
    let (_, _, text) = get(&app, "/metrics", None).await;
    for line in [
        "# TYPE baton_max_connections gauge",
        "baton_max_connections 100",
        "baton_max_locks 500",
        "baton_max_waiters 600",
        "baton_start_time_seconds 1700000000",
        "baton_expiry_overdue_seconds 0.0",
    ] {
        assert_has_line(&text, line);
    }
}

#[tokio::test]
async fn the_console_is_served_with_its_files_under_a_strict_policy() {
    let app = app(&[], None);
    let (code, headers, page) = get(&app, "/ui", None).await;
    assert_eq!(code, StatusCode::OK);
    assert!(page.contains("/ui/console.js") && page.contains("/ui/console.css"));
    let policy = headers[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .expect("ascii");
    assert!(policy.contains("default-src 'self'") && policy.contains("frame-ancestors 'none'"));
    for (file, kind) in [
        ("console.js", "text/javascript"),
        ("console.css", "text/css"),
    ] {
        let (code, headers, body) = get(&app, &format!("/ui/{file}"), None).await;
        assert_eq!(code, StatusCode::OK, "{file}");
        assert!(headers[header::CONTENT_TYPE]
            .to_str()
            .expect("ascii")
            .starts_with(kind));
        assert!(!body.is_empty());
    }
    let (code, _, _) = get(&app, "/ui/other.js", None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn force_release_ends_only_the_grant_with_that_token() {
    let app = app(&["jobs/1"], None);
    let (_, _, listed) = get(&app, "/v1/locks", None).await;
    let token = json(&listed)["locks"][0]["token"]
        .as_str()
        .expect("token")
        .to_string();
    let wrong = (token.parse::<u64>().expect("number") + 1).to_string();
    let body = |t: &str| serde_json::json!({ "key": "jobs/1", "token": t }).to_string();
    let (code, answer) = send(&app, "POST", "/v1/force-release", &body(&wrong)).await;
    assert_eq!(code, StatusCode::CONFLICT, "{answer}");
    for bad in ["{}", "{\"key\": \"jobs/1\", \"token\": 5}", &body("x")] {
        let (code, answer) = send(&app, "POST", "/v1/force-release", bad).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{bad}: {answer}");
    }
    let (code, _, listed) = get(&app, "/v1/locks", None).await;
    assert_eq!(
        (code, json(&listed)["locks"].as_array().map(Vec::len)),
        (StatusCode::OK, Some(1))
    );
    let (code, answer) = send(&app, "POST", "/v1/force-release", &body(&token)).await;
    assert_eq!(code, StatusCode::OK, "{answer}");
    assert_eq!(answer["token"], token.as_str());
    let (_, _, listed) = get(&app, "/v1/locks", None).await;
    assert_eq!(json(&listed)["locks"], serde_json::json!([]));
}

#[tokio::test(start_paused = true)]
async fn a_console_refusal_is_a_readable_page_and_v1_stays_json() {
    let (auth, _dir) = users();
    let app = app(&["billing/1"], Some(auth));
    let html = |headers: &axum::http::HeaderMap| {
        headers[header::CONTENT_TYPE]
            .to_str()
            .expect("ascii")
            .starts_with("text/html")
    };
    let (code, headers, page) = get(&app, "/ui", None).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    assert!(html(&headers), "{headers:?}");
    assert_eq!(
        headers[header::WWW_AUTHENTICATE],
        crate::basic_auth::CHALLENGE
    );
    assert!(page.contains("<h1>401 Unauthorized</h1>"), "{page}");
    let (code, headers, page) = get(&app, "/ui", Some(("billing", "billing-secret"))).await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    assert!(html(&headers) && !headers.contains_key(header::WWW_AUTHENTICATE));
    assert!(
        page.contains("permission denied") && !page.contains("billing/1"),
        "{page}"
    );
    let (code, headers, _) = get(&app, "/ui/other.js", Some(("ops", "ops-secret"))).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert!(html(&headers));
    let (code, _, _) = get(&app, "/ui/changes", Some(("billing", "billing-secret"))).await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    let (code, _, body) = get(&app, "/ui/changes", Some(("ops", "ops-secret"))).await;
    assert_eq!(code, StatusCode::OK);
    assert!(json(&body)["changes"].is_array(), "{body}");
    for who in [None, Some(("billing", "billing-secret"))] {
        let (_, headers, body) = get(&app, "/v1/locks", who).await;
        assert!(headers[header::CONTENT_TYPE]
            .to_str()
            .expect("ascii")
            .starts_with("application/json"));
        assert!(json(&body)["error"].is_string(), "{body}");
    }
}
