// Baton console: reads /v1/cluster, /ui/changes, /v1/locks and /metrics
// every REFRESH_MS (one request of each, then the next round only once they
// are answered: never a storm), and changes things through
// /v1/force-release and /v1/members. Every value from the node is written with textContent,
// never as HTML.
"use strict";

const REFRESH_MS = 2000;
// 5 minutes of samples at one every REFRESH_MS.
const HISTORY = 150;
// Latency quantiles over this many samples (10 s), so one quiet sample does not blank them.
const QUANTILE_SPAN = 5;
// How long "Add" keeps asking for a new member to catch up and vote, as
// `baton member add` does; past it a learner that never caught up is
// taken out again (the node waits at most 5 s per ask: no storm).
const ADD_MEMBER_MS = 60000;

const state = {
  prefix: "",
  limit: 50,
  cursors: [null], // the `after` of each page seen, for Previous
  page: 0,
  next: null,
  selected: null, // the key shown in the detail
  cluster: null,
  samples: [],
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function note(id, text, kind) {
  const p = $(id);
  p.hidden = !text;
  p.textContent = text || "";
  p.className = "note" + (kind ? " " + kind : "");
}

async function request(method, path, body) {
  const init = { method, cache: "no-store", credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const text = await response.text();
  let json = null;
  try { json = JSON.parse(text); } catch (_) { /* /metrics is text */ }
  return { status: response.status, json, text };
}

function seconds(ms) {
  if (ms === undefined || ms === null) return "–";
  return (ms / 1000).toFixed(1) + " s";
}

function reachable(memberState) {
  return !["down", "unknown", "refusing"].includes(memberState);
}

// What this node can tell of a member's reachability: "yes", "no", or
// "unknown" on a Raft follower, which hears the leader only.
function reachability(c, m) {
  const knowsAll = c.mode !== "raft" || c.role === "leader";
  if (!knowsAll && !m.self && m.state !== "leader") return "unknown";
  return reachable(m.state) ? "yes" : "no";
}

// ---- cluster ---------------------------------------------------------------

function renderCluster(c) {
  $("node-line").textContent = `${c.self} · ${c.role}`;
  document.title = `Baton ${c.self} (${c.role})`;
  $("mode").textContent = c.mode;
  $("self").textContent = `${c.self} (${c.role})`;
  $("serving").textContent = c.active || "none known";
  $("term").textContent = c.term === null || c.term === undefined ? "–" : c.term;
  $("held").textContent = c.locks;
  $("waiting").textContent = c.waiters;
  note("cluster-note", clusterNote(c));
  const rows = c.members.map((m) => {
    const up = reachability(c, m);
    const remove = c.mode === "raft" && !m.self
      ? el("button", { type: "button", class: "remove", "data-addr": m.addr, onclick: () => askRemove(m.addr) }, "Remove")
      : "";
    return el("tr", { "data-addr": m.addr, "data-state": m.state, "data-up": up === "unknown" ? up : String(up === "yes") },
      el("td", {}, m.addr + (m.self ? " (this node)" : "")),
      el("td", { class: m.state === "leader" || m.state === "active" ? "leader" : "" }, m.state),
      el("td", {}, m.membership || "voter"),
      el("td", {}, m.matched_index ?? "–"),
      el("td", {}, m.lag ?? "–"),
      el("td", { class: up === "yes" ? "up" : up === "no" ? "down" : "muted" }, up === "unknown" ? "not known here" : up),
      el("td", {}, remove));
  });
  $("members").tBodies[0].replaceChildren(...rows);
  $("member-add").hidden = c.mode !== "raft";
}

// What this page cannot show. A Raft follower or a node with no leader
// knows the roles and the membership, not the leader's replication and
// reachability figures nor the locks; it cannot read them from the serving
// node, so it says so and names that node.
function clusterNote(c) {
  if (c.mode !== "raft" || c.role === "leader") {
    return c.active ? "" : "No node serves now: clients are refused until one does.";
  }
  if (!c.active) {
    return `This node is a ${c.role} and knows no leader: no node serves now. ` +
      "The members are listed as its log holds them; their reachability is not known here.";
  }
  return `This node is a ${c.role}: this page cannot show the serving node's picture. ` +
    `Roles and membership below are as this node knows them; replication (matched, lag), ` +
    `the other members' reachability and the locks are known to the leader, ${c.active}, only: ` +
    "open the console on its HTTP address for them.";
}

async function refreshCluster() {
  const r = await request("GET", "/v1/cluster");
  if (r.status !== 200 || !r.json) throw new Error(`/v1/cluster: ${r.status} ${r.text}`);
  state.cluster = r.json;
  renderCluster(r.json);
}

// The node's own log of role, serving-node, term and member changes.
async function refreshChanges() {
  const r = await request("GET", "/ui/changes");
  if (r.status !== 200 || !r.json) throw new Error(`/ui/changes: ${r.status}`);
  $("changes").replaceChildren(...r.json.changes.map((c) =>
    el("li", {}, `${new Date(c.at_ms).toLocaleTimeString()} ${c.what}`)));
}

// ---- locks -----------------------------------------------------------------

function holdersOf(lock) {
  if (Array.isArray(lock.holders)) return lock.holders;
  return [{ token: lock.token, lease_left_ms: lock.lease_left_ms, value: null }];
}

// At most this many holders' tokens or values in a row of the table (the
// key's detail lists them all).
const ROW_HOLDERS = 3;

function listed(items) {
  return items.slice(0, ROW_HOLDERS).join(", ") + (items.length > ROW_HOLDERS ? ` … (${items.length})` : "");
}

// Holders out of the permits; a shared lock takes no permits, so its
// holders are just counted.
function holdersText(lock) {
  const n = holdersOf(lock).length;
  return lock.mode === "shared" ? String(n) : `${n}/${lock.permits || 1}`;
}

function modeOf(lock) {
  return lock.mode || "exclusive";
}

function valuesText(lock) {
  const values = holdersOf(lock).map((h) => h.value).filter((v) => v !== null && v !== undefined);
  return values.length ? listed(values) : "–";
}

function lockRow(lock) {
  const row = el("tr", { "data-key": lock.key, onclick: () => select(lock.key) },
    el("td", { class: "key" }, lock.key),
    el("td", { class: "mode" }, modeOf(lock)),
    el("td", { class: "holders" }, holdersText(lock)),
    el("td", { class: "token" }, listed(holdersOf(lock).map((h) => h.token))),
    el("td", {}, seconds(lock.lease_left_ms)),
    el("td", { class: "waiters" }, lock.waiters),
    el("td", { class: "value" }, valuesText(lock)));
  if (lock.key === state.selected) row.classList.add("selected");
  return row;
}

function locksPath(prefix, after, limit) {
  const q = new URLSearchParams({ prefix, limit: String(limit) });
  if (after !== null) q.set("after", after);
  return "/v1/locks?" + q.toString();
}

function notServingText(r) {
  const active = r.json && r.json.active;
  return active
    ? `This node does not serve the lock table; the serving node is ${active}. Open the console on its HTTP address to see the locks.`
    : "This node does not serve the lock table and knows no serving node: the cluster cannot serve now.";
}

async function refreshLocks() {
  const r = await request("GET", locksPath(state.prefix, state.cursors[state.page], state.limit));
  const body = $("locks-table").tBodies[0];
  if (r.status === 503) {
    note("locks-note", notServingText(r));
    body.replaceChildren();
    state.next = null;
  } else if (r.status !== 200 || !r.json) {
    note("locks-note", `/v1/locks: ${r.status} ${(r.json && r.json.error) || r.text}`, "error");
    return;
  } else {
    note("locks-note", r.json.locks.length ? "" : "No lock held" + (state.prefix ? ` under ${state.prefix}` : "") + ".");
    body.replaceChildren(...r.json.locks.map(lockRow));
    state.next = r.json.next;
  }
  $("page-no").textContent = `page ${state.page + 1}`;
  $("prev-page").disabled = state.page === 0;
  $("first-page").disabled = state.page === 0;
  $("next-page").disabled = !state.next;
}

// ---- one key ---------------------------------------------------------------

function select(key) {
  state.selected = key;
  $("detail").hidden = false;
  $("detail-key").textContent = key;
  refreshDetail().catch(showError);
}

async function refreshDetail() {
  const key = state.selected;
  if (key === null) return;
  const r = await request("GET", locksPath(key, null, 1));
  const lock = r.status === 200 && r.json && r.json.locks.find((l) => l.key === key);
  const rows = $("holders").tBodies[0];
  if (!lock) {
    $("detail-state").textContent = r.status === 503 ? notServingText(r) : "Free: nobody holds it.";
    rows.replaceChildren();
    return;
  }
  $("detail-state").textContent =
    `${modeOf(lock)}, ${holdersText(lock)} holding, ${lock.waiters} waiting in its queue.`;
  rows.replaceChildren(...holdersOf(lock).map((h) => el("tr", { "data-token": h.token },
    el("td", { class: "token" }, h.token),
    el("td", {}, seconds(h.lease_left_ms)),
    el("td", { class: "key" }, h.value === null || h.value === undefined ? "–" : h.value),
    el("td", {}, el("button", { type: "button", class: "force-release danger", "data-token": h.token,
      onclick: () => askRelease(key, h.token) }, "Force release")))));
}

// ---- admin actions -----------------------------------------------------------

let confirmed = null;

function ask(text, action) {
  $("confirm-text").textContent = text;
  confirmed = action;
  $("confirm").hidden = false;
  $("confirm-no").focus();
}

function closeDialog() {
  $("confirm").hidden = true;
  confirmed = null;
}

function askRelease(key, token) {
  ask(`Release ${key}, held with token ${token}? The client that holds it will lose it; the next waiter gets the key.`,
    async () => {
      const r = await request("POST", "/v1/force-release", { key, token });
      const text = r.status === 200
        ? `Released ${key} (token ${token}).`
        : r.status === 503 ? notServingText(r) : `Not released: ${(r.json && r.json.error) || r.status}`;
      note("action-result", text, r.status === 200 ? "ok" : "error");
    });
}

function askRemove(addr) {
  ask(`Remove ${addr} from the cluster's membership?`, async () => {
    const r = await request("DELETE", "/v1/members/" + encodeURIComponent(addr));
    note("member-result", memberAnswer(r, `Removed ${addr}.`), r.status === 200 ? "ok" : "error");
  });
}

function memberAnswer(r, done) {
  if (r.status === 200) return done;
  if (r.status === 421) return `Only the leader changes the membership: ask ${r.json.leader || "the leader (none known now)"}.`;
  if (r.status === 202) return `${r.json.error} (a learner catching up: add it again to see it vote).`;
  return `Refused (${r.status}): ${(r.json && r.json.error) || r.text}`;
}

// Asks again while the new member catches up (202), each ask telling the
// node how long is left, so that its last one takes out a learner that
// never caught up.
async function addMember(event) {
  event.preventDefault();
  const addr = $("member-addr").value.trim();
  if (!addr) return;
  const deadline = Date.now() + ADD_MEMBER_MS;
  const button = $("member-add").querySelector("button");
  button.disabled = true;
  let r;
  try {
    do {
      note("member-result", `Adding ${addr}: it joins as a learner and votes once it has caught up…`);
      r = await request("POST", "/v1/members", { addr, wait_ms: Math.max(1, deadline - Date.now()) });
    } while (r.status === 202 && Date.now() < deadline);
  } finally {
    button.disabled = false;
  }
  note("member-result", memberAnswer(r, `${addr} is a voter.`), r.status === 200 ? "ok" : "error");
  if (r.status === 200) $("member-addr").value = "";
}

// ---- rates and latencies -----------------------------------------------------

function parseMetrics(text) {
  const families = new Map();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{([^}]*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    for (const pair of (m[3] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[pair[1]] = pair[2];
    if (!families.has(m[1])) families.set(m[1], []);
    families.get(m[1]).push({ labels, value: Number(m[4]) });
  }
  return families;
}

function total(families, name) {
  return (families.get(name) || []).reduce((sum, s) => sum + s.value, 0);
}

function buckets(families, name) {
  return (families.get(name + "_bucket") || [])
    .map((s) => ({ le: s.labels.le === "+Inf" ? Infinity : Number(s.labels.le), count: s.value }))
    .sort((a, b) => a.le - b.le);
}

function sample(families) {
  return {
    t: Date.now() / 1000,
    requests: total(families, "baton_requests_total"),
    grants: total(families, "baton_grants_total"),
    handovers: total(families, "baton_handover_seconds_count"),
    expiries: total(families, "baton_expiries_total"),
    timeouts: total(families, "baton_wait_timeouts_total"),
    connections: total(families, "baton_connections_open"),
    roleChanges: total(families, "baton_role_changes_total"),
    wait: buckets(families, "baton_acquire_wait_seconds"),
    handover: buckets(families, "baton_handover_seconds"),
  };
}

// The q-quantile (ms) of the observations between two cumulative bucket sets,
// interpolated within its bucket as Prometheus's histogram_quantile does.
function quantile(q, older, newer) {
  if (!older || older.length !== newer.length) return null;
  const counts = newer.map((b, i) => b.count - older[i].count);
  const all = counts[counts.length - 1];
  if (!(all > 0)) return null;
  const rank = q * all;
  for (let i = 0; i < counts.length; i++) {
    if (counts[i] >= rank) {
      const upper = newer[i].le;
      const lower = i === 0 ? 0 : newer[i - 1].le;
      if (upper === Infinity) return lower * 1000;
      const below = i === 0 ? 0 : counts[i - 1];
      const inBucket = counts[i] - below;
      const part = inBucket > 0 ? (rank - below) / inBucket : 1;
      return (lower + (upper - lower) * part) * 1000;
    }
  }
  return null;
}

const CHARTS = [
  { title: "requests /s", rate: "requests" },
  { title: "grants /s", rate: "grants" },
  { title: "hand-overs /s", rate: "handovers" },
  { title: "expiries /s", rate: "expiries" },
  { title: "wait timeouts /s", rate: "timeouts" },
  { title: "connections open", gauge: "connections" },
  { title: "acquire wait p50 / p99 (ms)", histogram: "wait" },
  { title: "hand-over p50 / p99 (ms)", histogram: "handover" },
];

function series(chart) {
  const s = state.samples;
  const points = [[], []];
  for (let i = 1; i < s.length; i++) {
    const dt = s[i].t - s[i - 1].t;
    if (chart.gauge) points[0].push(s[i][chart.gauge]);
    else if (chart.rate) points[0].push(dt > 0 ? Math.max(0, s[i][chart.rate] - s[i - 1][chart.rate]) / dt : 0);
    else {
      const older = s[Math.max(0, i - QUANTILE_SPAN)][chart.histogram];
      points[0].push(quantile(0.5, older, s[i][chart.histogram]));
      points[1].push(quantile(0.99, older, s[i][chart.histogram]));
    }
  }
  return chart.histogram ? points : [points[0]];
}

// The samples so far across the whole width (the page's history starts
// when it opens), the largest value at the top.
function polyline(values, top, cls) {
  const w = 300, h = 60;
  const step = w / Math.max(1, values.length - 1);
  const pts = values.map((v, i) => v === null ? null : `${(i * step).toFixed(1)},${(h - 2 - (v / top) * (h - 4)).toFixed(1)}`)
    .filter((p) => p !== null).join(" ");
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", pts);
  if (cls) line.setAttribute("class", cls);
  return line;
}

function formatValue(v) {
  if (v === null || v === undefined) return "–";
  return v >= 100 ? v.toFixed(0) : v.toFixed(v >= 10 ? 1 : 2);
}

function minutes(samples) {
  if (samples.length < 2) return "starting";
  const span = samples[samples.length - 1].t - samples[0].t;
  return span < 90 ? `last ${Math.round(span)} s` : `last ${(span / 60).toFixed(1)} min`;
}

function renderCharts() {
  const cards = CHARTS.map((chart) => {
    const lines = series(chart);
    const top = Math.max(1e-9, ...lines.flat().filter((v) => v !== null));
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("viewBox", "0 0 300 60");
    svg.setAttribute("preserveAspectRatio", "none");
    lines.forEach((values, i) => svg.append(polyline(values, top, i ? "second" : "")));
    const last = lines.map((values) => formatValue(values[values.length - 1]));
    return el("div", { class: "chart", "data-chart": chart.title },
      el("div", { class: "title" }, chart.title, el("span", { class: "now" }, last.join(" / "))),
      svg,
      el("div", { class: "scale" }, `max ${formatValue(top > 1e-9 ? top : 0)} · ${minutes(state.samples)}`));
  });
  $("chart-grid").replaceChildren(...cards);
}

async function refreshMetrics() {
  const r = await request("GET", "/metrics");
  if (r.status !== 200) throw new Error(`/metrics: ${r.status}`);
  const s = sample(parseMetrics(r.text));
  state.samples.push(s);
  if (state.samples.length > HISTORY) state.samples.shift();
  $("role-changes").textContent = `${s.roleChanges} since this node started`;
  renderCharts();
}

// ---- the loop ----------------------------------------------------------------

function showError(err) {
  $("refresh-state").textContent = `refresh failed: ${err.message || err}`;
}

async function refreshAll() {
  const results = await Promise.allSettled([refreshCluster(), refreshChanges(), refreshLocks(), refreshMetrics(), refreshDetail()]);
  const failed = results.find((r) => r.status === "rejected");
  if (failed) showError(failed.reason);
  else $("refresh-state").textContent = `updated ${new Date().toLocaleTimeString()}`;
}

// A hidden tab asks nothing; it catches up when shown again.
async function loop() {
  if (!document.hidden) await refreshAll();
  setTimeout(loop, REFRESH_MS);
}

function goToPage(page) {
  state.page = page;
  state.cursors.length = page + 1;
  refreshLocks().catch(showError);
}

function wire() {
  $("search").addEventListener("submit", (event) => {
    event.preventDefault();
    state.prefix = $("prefix").value;
    state.limit = Number($("limit").value);
    state.cursors = [null];
    goToPage(0);
  });
  $("first-page").addEventListener("click", () => goToPage(0));
  $("prev-page").addEventListener("click", () => goToPage(Math.max(0, state.page - 1)));
  $("next-page").addEventListener("click", () => {
    if (!state.next) return;
    state.cursors[state.page + 1] = state.next;
    state.page += 1;
    refreshLocks().catch(showError);
  });
  $("detail-close").addEventListener("click", () => {
    state.selected = null;
    $("detail").hidden = true;
  });
  $("confirm-no").addEventListener("click", closeDialog);
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && !$("confirm").hidden) closeDialog();
  });
  $("confirm-yes").addEventListener("click", () => {
    const action = confirmed;
    closeDialog();
    if (action) action().then(() => refreshAll()).catch(showError);
  });
  $("member-add").addEventListener("submit", (event) => addMember(event).catch(showError));
}

wire();
loop();
