// streamproc operator console: plain DOM, the public REST API only, no build step.
import { CronError, CronUnsupported, nextFireTimes, parseCron, validTimeZone } from "./cron.js";
import { dpopKey, proof, takeNonce } from "./dpop.js";
import { externalHref, safeHref } from "./links.js";

const BASE = "/api/v1/scheduler";
const TOKEN_KEY = "streamproc.console.token";
const ACTIVE = new Set(["planning", "queued", "running"]);
const SCHEDULE_PAGE = 50;
const RUN_PAGE = 100;
const DELTA_PAGE = 50;
const IMAGE_PAGE = 50;
const EXPORT_PAGE = 100;

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  claims: null,
  generation: 0,
  timers: [],
  schedules: { cursors: [null], page: 0, enabled: "", deleted: false },
  runs: { state: "", trigger: "", auto: true },
  images: { cursors: [null], page: 0, repository: "", namespace: "" },
};

// ----------------------------------------------------------------------------- helpers

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "href" && !safeHref(v)) continue; // never a javascript:, data: … link
    if (k === "class") el.className = v;
    else if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

const $ = (sel, root = document) => root.querySelector(sel);

/** Replace ``el``'s children; arrays are flattened and null/false left out, as in ``h``. */
function put(el, ...children) {
  el.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
}

function debounce(fn, ms) {
  let t = 0;
  return (...args) => {
    clearTimeout(t);
    t = setTimeout(() => fn(...args), ms);
  };
}

function splitList(text) {
  return (text || "")
    .split(/[\s,]+/)
    .map((s) => s.trim())
    .filter(Boolean);
}

const n = (v) => (typeof v === "number" ? v.toLocaleString("en-US") : "—");

function fmtIn(iso, timeZone) {
  if (!iso) return "—";
  try {
    return new Intl.DateTimeFormat("en-GB", {
      timeZone,
      weekday: "short",
      day: "2-digit",
      month: "short",
      year: "numeric",
      hour: "2-digit",
      minute: "2-digit",
      timeZoneName: "short",
    }).format(new Date(iso));
  } catch {
    return iso;
  }
}

function fmtLocal(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  return Number.isNaN(d.getTime())
    ? iso
    : d.toLocaleString("en-GB", { dateStyle: "short", timeStyle: "medium" });
}

function fmtDuration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms) || ms < 0) return "—";
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} m ${Math.round(s % 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} m`;
}

function runDuration(run) {
  if (!run.startedAt) return null;
  const end = run.finishedAt ? Date.parse(run.finishedAt) : Date.now();
  return end - Date.parse(run.startedAt);
}

const short = (s, len = 19) => (s && s.length > len ? `${s.slice(0, len)}…` : s || "");

function badge(text, kind) {
  return h("span", { class: `badge ${kind || text}` }, text);
}

// ----------------------------------------------------------------------------- auth

function decodeClaims(token) {
  const parts = token.split(".");
  if (parts.length !== 3) throw new Error("a bearer token is a JWT: three dot-separated parts");
  const b64 = parts[1].replace(/-/g, "+").replace(/_/g, "/");
  const json = new TextDecoder().decode(
    Uint8Array.from(atob(b64 + "=".repeat((4 - (b64.length % 4)) % 4)), (c) => c.charCodeAt(0)),
  );
  const claims = JSON.parse(json);
  if (typeof claims !== "object" || !claims) throw new Error("the token's payload is not an object");
  return claims;
}

function scopes(claims) {
  const s = claims?.scope ?? claims?.scp ?? [];
  return new Set(Array.isArray(s) ? s : String(s).split(/\s+/).filter(Boolean));
}

const isAdmin = () => scopes(state.claims).has("scheduler.admin");
const canWriteImages = () => isAdmin() || scopes(state.claims).has("scheduler.images.write");

function signOut(message) {
  state.token = "";
  state.claims = null;
  sessionStorage.removeItem(TOKEN_KEY);
  $("#backlog").hidden = true;
  renderHeader();
  location.hash = "#/signin";
  if (message) showBanner(message);
}

// ----------------------------------------------------------------------------- API

class ApiError extends Error {
  constructor(status, problem) {
    super(problem?.detail || problem?.message || problem?.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem || {};
  }
}

const STATUS_HINT = {
  0: "Network error",
  400: "Invalid request",
  401: "Not signed in",
  403: "Not allowed",
  404: "Not found",
  409: "Conflict",
  412: "Changed by someone else",
  413: "Too large",
  415: "Unsupported media type",
  503: "Service unavailable",
};

function describe(err) {
  if (!(err instanceof ApiError)) return String(err?.message || err);
  const p = err.problem;
  const hint = STATUS_HINT[err.status] || (err.status >= 500 ? "Server error" : `HTTP ${err.status}`);
  const bits = [`${hint} (${err.status || "no answer"}): ${err.message}`];
  if (p.field) bits.push(`field ${p.field}`);
  if (p.reason) bits.push(`reason ${p.reason}`);
  if (err.status === 412) bits.push("reload to see the current version");
  if (err.status === 413 && p.limit) bits.push(`limit ${p.limit}`);
  if (err.status >= 500) bits.push("retry shortly");
  if (p.requestId) bits.push(`request ${p.requestId}`);
  return bits.join(" · ");
}

async function api(method, path, { body, query, headers } = {}) {
  // Signed out (a view's late timer, an open modal): nothing goes out without a token.
  if (!state.token) throw new ApiError(401, { detail: "signed out" });
  const url = new URL(BASE + path, location.origin);
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, String(v));
  }
  // DPoP: a fresh proof of this browser's key per request; a use_dpop_nonce challenge is
  // answered once with the nonce it hands out.
  const token = state.token;
  let resp;
  for (let attempt = 0; ; attempt++) {
    let dpop;
    try {
      dpop = await proof(method, url.href, token);
    } catch (e) {
      throw new ApiError(0, { detail: `cannot sign the request: ${e.message}` });
    }
    if (state.token !== token) throw new ApiError(401, { detail: "signed out" });
    const init = {
      method,
      headers: { Accept: "application/json", Authorization: `DPoP ${token}`, DPoP: dpop, ...headers },
      cache: "no-store",
    };
    if (body !== undefined) {
      init.body = JSON.stringify(body);
      init.headers["Content-Type"] = "application/json";
    }
    try {
      resp = await fetch(url, init);
    } catch (e) {
      throw new ApiError(0, { detail: `the gateway did not answer (${e.message})` });
    }
    if (!takeNonce(resp) || attempt > 0) break;
  }
  const text = await resp.text();
  let doc = null;
  try {
    doc = text ? JSON.parse(text) : null;
  } catch {
    doc = null;
  }
  if (!resp.ok) {
    const err = new ApiError(resp.status, doc || { detail: text.slice(0, 300) || resp.statusText });
    if (resp.status === 401) signOut(describe(err));
    throw err;
  }
  return { status: resp.status, doc, etag: resp.headers.get("ETag") };
}

// ----------------------------------------------------------------------------- chrome

function showBanner(message, kind = "error") {
  const el = $("#banner");
  put(el, h("span", {}, message), h("button", { type: "button", class: "ghost", "aria-label": "Dismiss", onclick: () => (el.hidden = true) }, "×"));
  el.className = kind;
  el.hidden = false;
}

function clearBanner() {
  $("#banner").hidden = true;
}

// The backlog banner: work a run spilled over its maxJobs to the next window (GET /backlog),
// on every page, refreshed while it is open.
async function refreshBacklog() {
  const el = $("#backlog");
  let doc;
  try {
    ({ doc } = await api("GET", "/backlog"));
  } catch {
    return; // the page's own calls report errors; the banner just stays as it was
  }
  if (!state.token || !doc.images) {
    el.hidden = true;
    return;
  }
  const first = doc.runs[0];
  put(el,
    h("b", {}, "Backlog: "),
    h("span", { id: "backlog-images" }, n(doc.images)),
    ` image${doc.images === 1 ? "" : "s"} spilled to the next window by ${n(doc.runs.length)} run${doc.runs.length === 1 ? "" : "s"} over their job limit (KEV and critical went first); a continuation run plans them. Oldest: `,
    h("a", { href: `#/runs/${encodeURIComponent(first.runId)}` }, short(first.runId, 12)),
    `, planned ${fmtLocal(first.plannedAt)}.`,
  );
  el.hidden = false;
}

function toast(message) {
  const el = h("div", { class: "toast" }, message);
  $("#toasts").append(el);
  setTimeout(() => el.remove(), 2500);
}

function errorBox(err) {
  return h("p", { class: "error", role: "alert" }, describe(err));
}

function renderHeader() {
  const signedIn = Boolean(state.token && state.claims);
  $("#nav").hidden = !signedIn;
  const who = $("#who");
  who.hidden = !signedIn;
  if (!signedIn) return put(who);
  const c = state.claims;
  const exp = c.exp ? new Date(c.exp * 1000) : null;
  put(who, 
    h("span", { class: "tenant", title: "Every page shows only this tenant" }, "tenant ", h("b", { id: "tenant-name" }, c.tenant || "?")),
    h("span", { class: "muted", title: exp ? `expires ${exp.toLocaleString()}` : "" }, isAdmin() ? "admin" : "read-only"),
    h("button", { type: "button", class: "ghost", onclick: () => signOut() }, "Sign out"),
  );
  const route = (location.hash.split("/")[1] || "").split("?")[0];
  for (const a of document.querySelectorAll("[data-nav]")) {
    a.classList.toggle("active", a.dataset.nav === route);
  }
}

function later(fn, ms) {
  const gen = state.generation;
  const id = setInterval(() => {
    if (gen !== state.generation || document.hidden) return;
    fn();
  }, ms);
  state.timers.push(id);
}

function openModal(title, ...content) {
  const dlg = $("#modal");
  put(dlg, 
    h("div", { class: "modal-head" }, h("h2", { id: "modal-title" }, title), h("button", { type: "button", class: "ghost", "aria-label": "Close", onclick: () => dlg.close() }, "×")),
    ...content,
  );
  if (!dlg.open) dlg.showModal();
  return dlg;
}

function confirmModal(title, text, action) {
  return new Promise((resolve) => {
    const dlg = openModal(
      title,
      h("p", {}, text),
      h(
        "div",
        { class: "actions" },
        h("button", { type: "button", class: "ghost", onclick: () => dlg.close() }, "Cancel"),
        h("button", { type: "button", class: "danger", id: "confirm-yes", onclick: () => { resolve(true); dlg.close(); } }, action),
      ),
    );
    dlg.addEventListener("close", () => resolve(false), { once: true });
  });
}

// ----------------------------------------------------------------------------- sign-in

function viewSignIn(view) {
  const input = h("textarea", { id: "token", rows: 5, spellcheck: "false", autocomplete: "off", placeholder: "eyJhbGciOiJFZERTQSIs…" });
  const msg = h("p", { class: "error", role: "alert", hidden: true });
  const jkt = h("code", { id: "jkt" }, "…");
  const hint = h("pre", { class: "hint", id: "token-command" }, "");
  const button = h("button", { type: "submit", id: "signin", disabled: true }, "Sign in");
  const fail = (text) => {
    msg.textContent = text;
    msg.hidden = false;
  };
  let key = null;
  dpopKey().then(
    (k) => {
      key = k;
      jkt.textContent = k.jkt;
      hint.textContent = `.venv/bin/streamproc token issue --key data/dev/issuer.jwk \\\n    --tenant demo --scope scheduler.admin --jkt=${k.jkt}`;
      button.disabled = false;
    },
    (e) => fail(`The console cannot sign in here: ${e.message}.`),
  );
  const submit = async (ev) => {
    ev.preventDefault();
    const token = input.value.trim().replace(/^(Bearer|DPoP)\s+/i, "");
    msg.hidden = true;
    if (!key) return;
    let claims;
    try {
      claims = decodeClaims(token);
    } catch (e) {
      return fail(`That does not look like a token: ${e.message}`);
    }
    const bound = claims.cnf && claims.cnf.jkt;
    if (bound !== key.jkt) {
      return fail(
        bound
          ? `That token is bound to another key (cnf.jkt ${bound}), not this browser's (${key.jkt}).`
          : `That token is not bound to this browser's key: mint one with --jkt=${key.jkt}.`,
      );
    }
    state.token = token;
    state.claims = claims;
    try {
      await api("GET", "/schedules", { query: { limit: 1, next: 0 } });
    } catch (e) {
      state.token = "";
      state.claims = null;
      return fail(describe(e));
    }
    sessionStorage.setItem(TOKEN_KEY, token);
    clearBanner();
    location.hash = "#/schedules";
  };
  put(view, 
    h(
      "section",
      { class: "card signin" },
      h("h1", {}, "Sign in"),
      h("p", {}, "Paste an access token bound to this browser's DPoP key. The console signs every request with that key (kept in this browser, never readable by a page); the token stays in this tab's session storage only and is sent only to this gateway."),
      h("p", {}, "This browser's key (jkt): ", jkt),
      hint,
      h("form", { onsubmit: submit }, h("label", { for: "token" }, "Access token"), input, msg, h("div", { class: "actions" }, button)),
    ),
  );
  input.focus();
}

// ----------------------------------------------------------------------------- schedules

async function lastRunsBySchedule() {
  const { doc } = await api("GET", "/runs", { query: { limit: 200 } });
  const map = new Map();
  for (const run of doc.items) {
    for (const id of new Set([run.scheduleId, ...(run.scheduleIds || [])])) {
      if (id && !map.has(id)) map.set(id, run);
    }
  }
  return map;
}

function scheduleState(s) {
  if (s.deleted) return badge("deleted");
  return s.enabled ? badge("enabled") : badge("paused");
}

async function patchSchedule(s, body, done) {
  try {
    await api("PATCH", `/schedules/${encodeURIComponent(s.id)}`, {
      body,
      query: { wait: "true" },
      headers: { "If-Match": `"${s.version}"` },
    });
    toast(done);
  } catch (e) {
    showBanner(describe(e));
  }
  render();
}

async function deleteSchedule(s) {
  if (!(await confirmModal("Delete schedule", `Delete “${s.name}” (${s.id})? It stops firing; it stays listed under “show deleted”.`, "Delete"))) return;
  try {
    await api("DELETE", `/schedules/${encodeURIComponent(s.id)}`, { query: { wait: "true" }, headers: { "If-Match": `"${s.version}"` } });
    toast(`Deleted ${s.id}`);
  } catch (e) {
    showBanner(describe(e));
  }
  render();
}

function lastRunCell(run) {
  if (!run) return h("span", { class: "muted" }, "—");
  const st = run.stats || {};
  return h(
    "a",
    { href: `#/runs/${encodeURIComponent(run.id)}`, class: "lastrun" },
    badge(run.state),
    " ",
    h("span", { class: "muted" }, `${n(st.completed)}✓ ${n(st.failed)}✗ ${n(st.deltas)}Δ`),
  );
}

async function viewSchedules(view, gen) {
  const sc = state.schedules;
  const admin = isAdmin();
  const table = h("div", { class: "table-wrap" }, h("p", { class: "muted" }, "Loading…"));
  const pager = h("div", { class: "pager" });
  const reset = () => {
    sc.cursors = [null];
    sc.page = 0;
    render();
  };
  put(view, 
    h(
      "div",
      { class: "toolbar" },
      h("h1", {}, "Schedules"),
      h("span", { class: "spacer" }),
      h(
        "select",
        { "aria-label": "Filter", onchange: (e) => { sc.enabled = e.target.value; reset(); } },
        h("option", { value: "", selected: sc.enabled === "" }, "All"),
        h("option", { value: "true", selected: sc.enabled === "true" }, "Enabled"),
        h("option", { value: "false", selected: sc.enabled === "false" }, "Paused"),
      ),
      h("label", { class: "check" }, h("input", { type: "checkbox", checked: sc.deleted, onchange: (e) => { sc.deleted = e.target.checked; reset(); } }), "show deleted"),
      h("button", { type: "button", class: "ghost", onclick: () => render() }, "Refresh"),
      admin && h("a", { class: "button", href: "#/schedules/new", id: "new-schedule" }, "New schedule"),
    ),
    table,
    pager,
  );
  let page;
  let lastRuns = new Map();
  try {
    [page, lastRuns] = await Promise.all([
      api("GET", "/schedules", {
        query: { limit: SCHEDULE_PAGE, next: 3, cursor: sc.cursors[sc.page], enabled: sc.enabled, includeDeleted: sc.deleted ? "true" : "" },
      }).then((r) => r.doc),
      lastRunsBySchedule().catch(() => new Map()),
    ]);
  } catch (e) {
    if (gen === state.generation) put(table, errorBox(e));
    return;
  }
  if (gen !== state.generation) return;
  if (!page.items.length) {
    put(table, h("p", { class: "empty" }, sc.page ? "No more schedules." : "No schedules yet."));
  } else {
    const rows = page.items.map((s) =>
      h(
        "tr",
        { "data-id": s.id },
        h("td", { "data-label": "Schedule" }, h("b", {}, s.name), h("div", { class: "muted mono" }, s.id)),
        h("td", { "data-label": "State" }, scheduleState(s)),
        h("td", { "data-label": "Cron" }, h("code", {}, s.whenCron), h("div", { class: "muted" }, s.timezone)),
        h(
          "td",
          { "data-label": "Next fire times", class: "fire" },
          s.nextFireTimes?.length ? h("ol", { class: "times" }, s.nextFireTimes.slice(0, 3).map((t) => h("li", { title: t }, fmtIn(t, s.timezone)))) : h("span", { class: "muted" }, s.enabled ? "—" : "paused"),
        ),
        h("td", { "data-label": "Mode" }, s.mode),
        h("td", { "data-label": "Last run" }, lastRunCell(lastRuns.get(s.id))),
        h(
          "td",
          { class: "row-actions" },
          admin && !s.deleted && h("a", { class: "button ghost", href: `#/schedules/${encodeURIComponent(s.id)}/edit` }, "Edit"),
          admin && !s.deleted && h("button", { type: "button", class: "ghost", "data-action": "toggle-pause", onclick: () => patchSchedule(s, { enabled: !s.enabled }, `${s.enabled ? "Paused" : "Resumed"} ${s.id}`) }, s.enabled ? "Pause" : "Resume"),
          admin && !s.deleted && h("button", { type: "button", class: "ghost danger", "data-action": "delete", onclick: () => deleteSchedule(s) }, "Delete"),
        ),
      ),
    );
    put(table, 
      h(
        "table",
        { class: "grid schedules" },
        h("thead", {}, h("tr", {}, ["Schedule", "State", "Cron", "Next fire times", "Mode", "Last run", ""].map((t) => h("th", {}, t)))),
        h("tbody", {}, rows),
      ),
    );
  }
  put(pager, 
    h("button", { type: "button", class: "ghost", disabled: sc.page === 0, onclick: () => { sc.page -= 1; render(); } }, "← Previous"),
    h("span", { class: "muted" }, `page ${sc.page + 1} · ${page.items.length} shown`),
    h("button", { type: "button", class: "ghost", disabled: !page.nextCursor, onclick: () => { sc.cursors[sc.page + 1] = page.nextCursor; sc.page += 1; render(); } }, "Next →"),
  );
}

// ------------------------------------------------------------------- schedule form

let zones = null;
function timeZoneList() {
  if (!zones) {
    zones = h("datalist", { id: "zones" });
    const all = typeof Intl.supportedValuesOf === "function" ? Intl.supportedValuesOf("timeZone") : [];
    zones.append(...["UTC", ...all].map((z) => h("option", { value: z })));
  }
  return zones;
}

function field(label, input, help) {
  return h("div", { class: "field" }, h("label", { for: input.id }, label), input, help && h("div", { class: "help" }, help));
}

function normalSelection(sel) {
  const out = { scope: sel.scope || "all-images" };
  for (const key of ["namespaces", "repositories", "digests", "labels"]) {
    if (sel[key]?.length) out[key] = sel[key];
  }
  return out;
}

function selectionFrom(form) {
  const sel = { scope: form.scope.value };
  for (const key of ["namespaces", "repositories", "digests", "labels"]) {
    const values = key === "labels" ? form[key].value.split(/[\n,]+/).map((s) => s.trim()).filter(Boolean) : splitList(form[key].value);
    if (values.length) sel[key] = values;
  }
  return sel;
}

async function viewScheduleForm(view, gen, id) {
  const editing = Boolean(id);
  let current = null;
  if (editing) {
    try {
      current = (await api("GET", `/schedules/${encodeURIComponent(id)}`, { query: { next: 3 } })).doc;
    } catch (e) {
      if (gen === state.generation) put(view, h("a", { href: "#/schedules" }, "← Schedules"), errorBox(e));
      return;
    }
    if (gen !== state.generation) return;
  }
  const s = current || {
    id: "", name: "", whenCron: "0 2 * * *", timezone: Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC",
    mode: "analysis-only", enabled: true, subscriptions: [], selection: { scope: "all-images" },
    notify: { minSeverity: "high", includeKEV: true, onNewFindings: true },
  };
  const sel = s.selection || {};
  const input = (name, value, extra = {}) => h("input", { id: `f-${name}`, name, value: value ?? "", autocomplete: "off", ...extra });
  const select = (name, value, options) => h("select", { id: `f-${name}`, name }, options.map((o) => h("option", { value: o, selected: o === value }, o)));
  const cronHelp = h("div", { class: "help", id: "cron-feedback", "aria-live": "polite" });
  const firePreview = h("ol", { class: "times", id: "cron-next" });
  const impact = h("div", { id: "impact", class: "impact", "aria-live": "polite" }, h("span", { class: "muted" }, "…"));
  const formError = h("div", { id: "form-error" });
  const form = h(
    "form",
    { class: "schedule-form", novalidate: true },
    h(
      "div",
      { class: "cols" },
      h(
        "fieldset",
        {},
        h("legend", {}, "Schedule"),
        editing ? h("p", { class: "mono" }, `id ${s.id} · version ${s.version}`) : field("Id (optional)", input("id", "", { pattern: "[A-Za-z0-9_:\\-]{1,128}", placeholder: "generated when empty" })),
        field("Name", input("name", s.name, { required: true, maxlength: 200 })),
        h("div", { class: "field" }, h("label", { for: "f-cron" }, "Cron"), input("cron", s.whenCron, { required: true, class: "mono", spellcheck: "false" }), cronHelp),
        field("Time zone", input("timezone", s.timezone, { list: "zones", required: true })),
        field("Mode", select("mode", s.mode, ["analysis-only", "content-refresh"])),
        !editing && h("label", { class: "check" }, h("input", { type: "checkbox", name: "enabled", checked: s.enabled !== false }), "enabled"),
        h(
          "div",
          { class: "field" },
          h("span", { class: "label" }, "Also run on"),
          ["feedser", "vexer"].map((src) => h("label", { class: "check" }, h("input", { type: "checkbox", name: `sub-${src}`, checked: (s.subscriptions || []).includes(src) }), `${src} exports`)),
        ),
        h(
          "div",
          { class: "field" },
          h("span", { class: "label" }, "Notify"),
          h("label", { class: "check" }, "min severity ", select("minSeverity", s.notify?.minSeverity || "high", ["critical", "high", "medium", "low"])),
          h("label", { class: "check" }, h("input", { type: "checkbox", name: "includeKEV", checked: s.notify?.includeKEV !== false }), "KEV hits"),
        ),
      ),
      h(
        "fieldset",
        {},
        h("legend", {}, "Next fire times"),
        firePreview,
        editing && s.nextFireTimes?.length
          ? h("div", { class: "help" }, "Saved schedule (server): ", s.nextFireTimes.map((t) => fmtIn(t, s.timezone)).join(" · "))
          : null,
        h("legend", {}, "Selector"),
        field("Scope", select("scope", sel.scope || "all-images", ["all-images", "by-namespace", "by-repo", "by-digest", "by-labels"])),
        field("Namespaces", input("namespaces", (sel.namespaces || []).join(", ")), "comma separated; filters AND, values OR"),
        field("Repositories", input("repositories", (sel.repositories || []).join(", "))),
        field("Digests", input("digests", (sel.digests || []).join(", "), { class: "mono" })),
        field("Labels", input("labels", (sel.labels || []).join(", "), { placeholder: "team=payments" })),
        h("div", { class: "field" }, h("span", { class: "label" }, "Impact preview"), impact),
      ),
    ),
    formError,
    h(
      "div",
      { class: "actions" },
      h("a", { class: "button ghost", href: "#/schedules" }, "Cancel"),
      h("button", { type: "submit", id: "save-schedule" }, editing ? "Save changes" : "Create schedule"),
    ),
  );
  put(view, h("a", { href: "#/schedules" }, "← Schedules"), h("h1", {}, editing ? `Edit ${s.name}` : "New schedule"), timeZoneList(), form);

  const checkCron = () => {
    const cron = form.cron.value;
    const tz = form.timezone.value.trim();
    put(firePreview);
    cronHelp.className = "help";
    form.cron.setCustomValidity("");
    if (!validTimeZone(tz)) {
      cronHelp.textContent = `Unknown time zone “${tz}”.`;
      cronHelp.className = "help bad";
      return;
    }
    try {
      const times = nextFireTimes(cron, tz, 3);
      cronHelp.textContent = times.length ? "Valid. Next fire times, in the schedule's zone:" : "Valid, but it never fires in the next five years.";
      cronHelp.className = "help good";
      firePreview.append(...times.map((d) => h("li", {}, fmtIn(d.toISOString(), tz))));
    } catch (e) {
      if (e instanceof CronUnsupported) {
        cronHelp.textContent = `${e.message}: the server checks it when you save.`;
      } else if (e instanceof CronError) {
        cronHelp.textContent = e.message;
        cronHelp.className = "help bad";
        form.cron.setCustomValidity(e.message);
      } else {
        throw e;
      }
    }
  };
  let previewSeq = 0;
  const previewImpact = debounce(async () => {
    if (gen !== state.generation) return; // the form is gone (another page, signed out)
    const seq = ++previewSeq;
    put(impact, h("span", { class: "muted" }, "Previewing…"));
    try {
      const { doc } = await api("POST", "/preview/impact", { body: { selection: selectionFrom(form), sampleSize: 5 } });
      if (seq !== previewSeq) return;
      put(impact, 
        h("div", {}, "This selector covers ~", h("b", { id: "impact-count" }, n(doc.count)), ` image${doc.count === 1 ? "" : "s"} now.`),
        doc.sample.length ? h("ul", { class: "digests" }, doc.sample.map((d) => h("li", { class: "mono", title: d }, short(d, 30)))) : null,
      );
    } catch (e) {
      if (seq === previewSeq) put(impact, errorBox(e));
    }
  }, 350);
  form.cron.addEventListener("input", checkCron);
  form.timezone.addEventListener("input", checkCron);
  for (const name of ["scope", "namespaces", "repositories", "digests", "labels"]) {
    form[name].addEventListener("input", previewImpact);
  }
  checkCron();
  previewImpact();

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    put(formError);
    const body = {
      name: form.name.value.trim(),
      whenCron: form.cron.value.trim(),
      timezone: form.timezone.value.trim(),
      mode: form.mode.value,
      selection: selectionFrom(form),
      subscriptions: ["feedser", "vexer"].filter((src) => form[`sub-${src}`].checked),
      notify: { ...(s.notify || {}), minSeverity: form.minSeverity.value, includeKEV: form.includeKEV.checked },
    };
    const button = $("#save-schedule");
    button.disabled = true;
    try {
      if (editing) {
        const original = { ...s, selection: normalSelection(sel) };
        const changed = Object.fromEntries(Object.entries(body).filter(([k, v]) => JSON.stringify(v) !== JSON.stringify(original[k])));
        if (!Object.keys(changed).length) {
          location.hash = "#/schedules";
          return;
        }
        await api("PATCH", `/schedules/${encodeURIComponent(s.id)}`, { body: changed, query: { wait: "true" }, headers: { "If-Match": `"${s.version}"` } });
        toast(`Saved ${s.id}`);
      } else {
        const newId = form.id.value.trim();
        if (newId) body.id = newId;
        body.enabled = form.enabled.checked;
        const { doc } = await api("POST", "/schedules", { body, query: { wait: "true" } });
        toast(`Created ${doc.id || newId}`);
      }
      location.hash = "#/schedules";
    } catch (e) {
      put(formError, errorBox(e));
    } finally {
      button.disabled = false;
    }
  });
}

// ----------------------------------------------------------------------------- runs

const SEVERITY_ROWS = [
  { key: "critical", label: "new criticals", value: (r) => r.stats?.newCriticals || 0 },
  { key: "deltas", label: "images worse", value: (r) => r.stats?.deltas || 0 },
  { key: "failed", label: "failed images", value: (r) => r.stats?.failed || 0 },
];

function dayKey(d) {
  return `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, "0")}-${String(d.getDate()).padStart(2, "0")}`;
}

function heatMap(runs, days = 14) {
  const today = new Date();
  const cols = [];
  for (let i = days - 1; i >= 0; i--) {
    const d = new Date(today.getFullYear(), today.getMonth(), today.getDate() - i);
    cols.push({ key: dayKey(d), label: d.toLocaleDateString("en-GB", { day: "2-digit", month: "short" }) });
  }
  const sums = new Map(SEVERITY_ROWS.map((r) => [r.key, new Map()]));
  for (const run of runs) {
    const k = dayKey(new Date(run.requestedAt));
    for (const row of SEVERITY_ROWS) {
      const m = sums.get(row.key);
      m.set(k, (m.get(k) || 0) + row.value(run));
    }
  }
  const level = (v, max) => (v === 0 ? 0 : Math.min(4, 1 + Math.floor((3 * v) / Math.max(1, max))));
  return h(
    "div",
    { class: "heat-wrap" },
    h(
      "table",
      { class: "heat", id: "heatmap", "aria-label": "Deltas by day and severity" },
      h("thead", {}, h("tr", {}, h("th", {}, ""), cols.map((c) => h("th", { scope: "col" }, c.label)))),
      h(
        "tbody",
        {},
        SEVERITY_ROWS.map((row) => {
          const m = sums.get(row.key);
          const max = Math.max(0, ...cols.map((c) => m.get(c.key) || 0));
          return h(
            "tr",
            {},
            h("th", { scope: "row", class: `sev-${row.key}` }, row.label),
            cols.map((c) => {
              const v = m.get(c.key) || 0;
              return h("td", { class: `lvl lvl-${level(v, max)} sev-${row.key}`, title: `${c.key}: ${v} ${row.label}` }, v ? n(v) : "");
            }),
          );
        }),
      ),
    ),
  );
}

function runRow(run) {
  const st = run.stats || {};
  return h(
    "tr",
    { "data-id": run.id, "data-state": run.state },
    h("td", { "data-label": "Requested" }, fmtLocal(run.requestedAt)),
    h("td", { "data-label": "Run" }, h("a", { href: `#/runs/${encodeURIComponent(run.id)}`, class: "mono", title: run.id }, short(run.id, 14)), run.scheduleId ? h("div", { class: "muted" }, run.scheduleId) : null),
    h("td", { "data-label": "Trigger" }, run.trigger),
    h("td", { "data-label": "State" }, badge(run.state), run.cancelRequested && ACTIVE.has(run.state) ? h("span", { class: "muted" }, " cancelling") : null),
    h("td", { "data-label": "Duration", class: "num" }, fmtDuration(runDuration(run))),
    h("td", { "data-label": "Candidates", class: "num" }, n(st.candidates)),
    h("td", { "data-label": "Completed", class: "num" }, n(st.completed)),
    h("td", { "data-label": "Failed", class: "num" }, n(st.failed)),
    h("td", { "data-label": "Deltas", class: "num" }, n(st.deltas), st.newCriticals ? h("span", { class: "crit" }, ` (${n(st.newCriticals)} crit)`) : null),
  );
}

async function viewRuns(view, gen) {
  const rs = state.runs;
  let runs = [];
  let cursor = null;
  const heat = h("section", { class: "card" }, h("p", { class: "muted" }, "Loading…"));
  const table = h("div", { class: "table-wrap" });
  const more = h("div", { class: "pager" });
  const query = () => ({ limit: RUN_PAGE, state: rs.state, trigger: rs.trigger });
  const draw = () => {
    put(heat, 
      h("h2", {}, "Deltas by day × severity"),
      heatMap(runs),
      h("p", { class: "help" }, `From the ${n(runs.length)} most recent run${runs.length === 1 ? "" : "s"} loaded (request day, your time zone). Load more runs to widen it.`),
    );
    put(table, 
      runs.length
        ? h(
            "table",
            { class: "grid runs", id: "runs-table" },
            h("thead", {}, h("tr", {}, ["Requested", "Run", "Trigger", "State", "Duration", "Candidates", "Completed", "Failed", "Deltas"].map((t) => h("th", {}, t)))),
            h("tbody", {}, runs.map(runRow)),
          )
        : h("p", { class: "empty" }, "No runs yet."),
    );
    const wrap = heat.querySelector(".heat-wrap");
    if (wrap) wrap.scrollLeft = wrap.scrollWidth; // newest day in view on narrow windows
    put(more, 
      h("span", { class: "muted" }, `${n(runs.length)} loaded`),
      h("button", { type: "button", class: "ghost", id: "more-runs", disabled: !cursor, onclick: loadMore }, cursor ? "Load more" : "All loaded"),
    );
  };
  const loadMore = async () => {
    try {
      const { doc } = await api("GET", "/runs", { query: { ...query(), cursor } });
      if (gen !== state.generation) return;
      const seen = new Set(runs.map((r) => r.id));
      runs = runs.concat(doc.items.filter((r) => !seen.has(r.id)));
      cursor = doc.nextCursor;
      draw();
    } catch (e) {
      showBanner(describe(e));
    }
  };
  const refresh = async () => {
    try {
      const { doc } = await api("GET", "/runs", { query: query() });
      if (gen !== state.generation) return;
      if (runs.length <= RUN_PAGE) {
        runs = doc.items;
        cursor = doc.nextCursor;
      } else {
        const fresh = new Map(doc.items.map((r) => [r.id, r]));
        const known = new Set(runs.map((r) => r.id));
        runs = doc.items.filter((r) => !known.has(r.id)).concat(runs.map((r) => fresh.get(r.id) || r));
      }
      draw();
    } catch (e) {
      if (gen === state.generation) put(table, errorBox(e));
    }
  };
  const filter = (name, options) =>
    h("select", { "aria-label": name, onchange: (e) => { rs[name] = e.target.value; refresh(); } }, options.map(([v, label]) => h("option", { value: v, selected: rs[name] === v }, label)));
  put(view, 
    h(
      "div",
      { class: "toolbar" },
      h("h1", {}, "Runs"),
      h("span", { class: "spacer" }),
      filter("state", [["", "all states"], ["planning,queued,running", "active"], ["planning", "planning"], ["queued", "queued"], ["running", "running"], ["completed", "completed"], ["cancelled", "cancelled"], ["error", "error"]]),
      filter("trigger", [["", "all triggers"], ["cron", "cron"], ["feedser", "feedser"], ["vexer", "vexer"], ["manual", "manual"]]),
      h("label", { class: "check" }, h("input", { type: "checkbox", id: "auto-refresh", checked: rs.auto, onchange: (e) => (rs.auto = e.target.checked) }), "auto-refresh"),
      h("button", { type: "button", class: "ghost", onclick: refresh }, "Refresh"),
    ),
    heat,
    table,
    more,
  );
  await refresh();
  later(() => rs.auto && refresh(), 3000);
}

function segmentBar(seg) {
  const total = seg.total || 0;
  const parts = ["completed", "running", "enqueued", "planned", "failed"];
  const bar = h("div", { class: "segbar", role: "img", "aria-label": parts.map((p) => `${p} ${seg[p] || 0}`).join(", ") });
  for (const p of parts) {
    const v = seg[p] || 0;
    if (!v || !total) continue;
    const span = h("span", { class: `seg-${p}`, title: `${p}: ${v}` });
    span.style.flexGrow = String(v);
    bar.append(span);
  }
  return h(
    "div",
    { class: "segments" },
    bar,
    h("ul", { class: "legend" }, h("li", {}, h("b", {}, n(total)), " total"), parts.map((p) => h("li", { class: `seg-${p}` }, h("b", {}, n(seg[p] || 0)), ` ${p}`))),
  );
}

function coverageLine(run) {
  const c = run.coverage;
  if (!c) return h("p", { class: "coverage muted", id: "coverage" }, ACTIVE.has(run.state) ? "Coverage: reported when the run finishes." : "Coverage: not reported for this run.");
  const reasons = Object.entries(c.reasons || {});
  return h(
    "p",
    { class: "coverage", id: "coverage" },
    h("b", {}, "Coverage: "),
    `${n(c.evaluated)} re-evaluated`,
    c.notEvaluated ? `, ${n(c.notEvaluated)} not re-evaluated` : ", nothing skipped",
    reasons.length ? ` — ${reasons.map(([r, k]) => `${r}: ${n(k)}`).join(", ")}` : "",
    run.degraded ? h("span", { class: "bad" }, ` · degraded: ${run.degradedReason || "yes"}`) : null,
  );
}

function deltaRow(d) {
  return h(
    "tr",
    {},
    h("td", { "data-label": "Image", class: "mono", title: d.digest }, short(d.digest, 23)),
    h("td", { "data-label": "Segment", class: "mono muted", title: d.segmentId }, short(d.segmentId, 12)),
    h("td", { "data-label": "Status" }, badge(d.status === "ok" ? "ok" : "failed")),
    h("td", { "data-label": "New critical", class: "num crit" }, n(d.newCriticals)),
    h("td", { "data-label": "New high", class: "num" }, n(d.newHigh)),
    h("td", { "data-label": "KEV" }, d.kevHits.length ? d.kevHits.map((k) => badge(k, "kev")) : "—"),
    h(
      "td",
      { "data-label": "Top findings" },
      h("ul", { class: "findings" }, d.topFindings.slice(0, 3).map((f) => h("li", {}, badge(f.severity), " ", externalHref(f.link) ? h("a", { href: externalHref(f.link), rel: "noreferrer noopener", target: "_blank" }, f.vulnId) : f.vulnId, h("span", { class: "muted" }, ` ${short(f.purl, 40)}`)))),
    ),
    ackCell(d.acknowledgement),
  );
}

/** Who took charge of a delta (PUT …/acknowledgement): the ticket, by whom, the note on hover. */
function ackCell(ack) {
  if (!ack) return h("td", { "data-label": "Acknowledged", class: "ack muted" }, "—");
  return h(
    "td",
    { "data-label": "Acknowledged", class: "ack", title: ack.note || "" },
    ack.ticket ? h("span", { class: "mono" }, ack.ticket) : null,
    h("span", { class: "muted" }, `${ack.ticket ? " " : ""}by ${ack.acknowledgedBy || "?"}`),
  );
}

/** A run's exports: how many, the first few, and the rest a page at a time on request. */
function exportsFact(path, reason) {
  const list = h("ul", { class: "exports", id: "run-exports" }, reason.exports.map((x) => h("li", { class: "mono" }, x)));
  let cursor = null;
  let loaded = false;
  const more = h("button", { type: "button", class: "ghost", id: "more-exports" }, "List all");
  more.addEventListener("click", async () => {
    try {
      const { doc } = await api("GET", `${path}/exports`, { query: { limit: EXPORT_PAGE, cursor } });
      if (!loaded) list.replaceChildren();
      loaded = true;
      list.append(...doc.items.map((x) => h("li", { class: "mono", title: x.recordedAt || "" }, x.ref)));
      cursor = doc.nextCursor;
      if (cursor) more.textContent = "Load more";
      else more.remove();
    } catch (e) {
      showBanner(describe(e));
    }
  });
  const shown = reason.exports.length;
  return h("div", {}, `${n(reason.exportCount)} export${reason.exportCount === 1 ? "" : "s"}`, list, reason.exportCount > shown ? more : null);
}

async function viewRun(view, gen, id) {
  const path = `/runs/${encodeURIComponent(id)}`;
  let deltas = [];
  let deltaCursor = null;
  let paged = false;
  const head = h("div");
  const body = h("div");
  const images = h("section", { class: "card" });
  put(view, h("a", { href: "#/runs" }, "← Runs"), head, body, images);
  const drawDeltas = () => {
    put(images, 
      h("h2", {}, "Affected images"),
      deltas.length
        ? h("div", { class: "table-wrap" }, h("table", { class: "grid deltas", id: "deltas" }, h("thead", {}, h("tr", {}, ["Image", "Segment", "Status", "New critical", "New high", "KEV", "Top findings", "Acknowledged"].map((t) => h("th", {}, t)))), h("tbody", {}, deltas.map(deltaRow))))
        : h("p", { class: "empty" }, "No image got worse in this run."),
      deltaCursor ? h("button", { type: "button", class: "ghost", onclick: moreDeltas }, "Load more images") : null,
    );
  };
  const moreDeltas = async () => {
    try {
      const { doc } = await api("GET", `${path}/deltas`, { query: { limit: DELTA_PAGE, cursor: deltaCursor } });
      deltas = deltas.concat(doc.items);
      deltaCursor = doc.nextCursor;
      paged = true;
      drawDeltas();
    } catch (e) {
      showBanner(describe(e));
    }
  };
  const cancel = async (run) => {
    if (!(await confirmModal("Cancel run", `Cancel run ${run.id}? Segments already running finish; the rest are skipped.`, "Cancel run"))) return;
    try {
      await api("POST", `${path}/cancel`, { body: { reason: "cancelled from the console" }, query: { wait: "true" } });
      toast("Cancel requested");
    } catch (e) {
      showBanner(describe(e));
    }
    load();
  };
  const load = async () => {
    let run;
    let page;
    try {
      [run, page] = await Promise.all([
        api("GET", path).then((r) => r.doc),
        paged ? Promise.resolve(null) : api("GET", `${path}/deltas`, { query: { limit: DELTA_PAGE } }).then((r) => r.doc),
      ]);
    } catch (e) {
      if (gen === state.generation) put(body, errorBox(e));
      return;
    }
    if (gen !== state.generation) return;
    const st = run.stats || {};
    const reason = run.reason || {};
    put(head, 
      h(
        "div",
        { class: "toolbar" },
        h("h1", { class: "mono", title: run.id }, `Run ${short(run.id, 24)}`),
        badge(run.state),
        h("span", { class: "spacer" }),
        isAdmin() && ACTIVE.has(run.state) && !run.cancelRequested ? h("button", { type: "button", class: "danger", id: "cancel-run", onclick: () => cancel(run) }, "Cancel run") : null,
        run.cancelRequested && ACTIVE.has(run.state) ? h("span", { class: "muted" }, "cancel requested") : null,
      ),
    );
    const facts = [
      ["Trigger", run.trigger],
      ["Mode", run.mode],
      ["Schedules", [run.scheduleId, ...(run.scheduleIds || [])].filter((v, i, a) => v && a.indexOf(v) === i).join(", ") || "—"],
      ["Reason", [reason.text, reason.feedserExportId && `feedser export ${reason.feedserExportId}`, reason.vexerExportId && `vexer export ${reason.vexerExportId}`, reason.cursor && `cursor → ${reason.cursor}`, reason.scheduledFor && `scheduled for ${fmtLocal(reason.scheduledFor)}`].filter(Boolean).join(" · ") || "—"],
      ["Exports", reason.exportCount ? exportsFact(path, reason) : "—"],
      ["Requested by", run.requestedBy || "—"],
      ["Requested", fmtLocal(run.requestedAt)],
      ["Started", fmtLocal(run.startedAt)],
      ["Finished", fmtLocal(run.finishedAt)],
      ["Duration", fmtDuration(runDuration(run))],
    ];
    if (run.error) facts.push(["Error", run.error]);
    if (run.cancelReason) facts.push(["Cancel reason", run.cancelReason]);
    put(body, 
      h("section", { class: "card" }, h("dl", { class: "facts" }, facts.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]))),
      h(
        "section",
        { class: "card" },
        h("h2", {}, "Stats"),
        h("div", { class: "stats", id: "run-stats" }, ["candidates", "deduped", "queued", "spilled", "completed", "failed", "cancelled", "deltas", "newCriticals"].map((k) => h("div", { class: `stat stat-${k}` }, h("b", {}, n(st[k] || 0)), h("span", {}, k)))),
        h("h2", {}, "Segments"),
        segmentBar(run.segments || {}),
        coverageLine(run),
      ),
    );
    if (page) {
      deltas = page.items;
      deltaCursor = page.nextCursor;
      drawDeltas();
    }
    return run;
  };
  const run = await load();
  if (run && ACTIVE.has(run.state)) {
    later(async () => {
      const r = await load();
      if (r && !ACTIVE.has(r.state)) state.timers.forEach(clearInterval);
    }, 2000);
  }
}

// ----------------------------------------------------------------------------- images

function usageCell(img) {
  return img.usageKnown
    ? h("span", { class: "usage known", title: "usedPurls marked the purls in use" }, `known · ${n(img.usedPurlCount)} used`)
    : h("span", { class: "usage unknown muted", title: "no usage information in the SBOM (no usedPurls)" }, "unknown");
}

async function deleteImage(img, after = () => render()) {
  if (!(await confirmModal("Remove image", `Remove ${img.digest} (${img.repository}) from the index? Exports no longer re-evaluate it until its SBOM is indexed again.`, "Remove"))) return;
  let removed = false;
  try {
    await api("DELETE", `/images/${encodeURIComponent(img.digest)}`, { query: { wait: "true" } });
    toast(`Removed ${short(img.digest, 23)}`);
    removed = true;
  } catch (e) {
    showBanner(describe(e));
  }
  after(removed);
}

async function viewImages(view, gen) {
  const st = state.images;
  const table = h("div", { class: "table-wrap" }, h("p", { class: "muted" }, "Loading…"));
  const pager = h("div", { class: "pager" });
  const repo = h("input", { id: "images-repository", placeholder: "repository", value: st.repository, "aria-label": "Repository" });
  const ns = h("input", { id: "images-namespace", placeholder: "namespace", value: st.namespace, "aria-label": "Namespace" });
  const apply = (ev) => {
    ev.preventDefault();
    st.repository = repo.value.trim();
    st.namespace = ns.value.trim();
    st.cursors = [null];
    st.page = 0;
    render();
  };
  put(view,
    h(
      "form",
      { class: "toolbar", onsubmit: apply },
      h("h1", {}, "Images"),
      h("span", { class: "spacer" }),
      repo,
      ns,
      h("button", { type: "submit", class: "ghost", id: "images-filter" }, "Filter"),
      h("button", { type: "button", class: "ghost", onclick: () => render() }, "Refresh"),
    ),
    table,
    pager,
  );
  let page;
  try {
    ({ doc: page } = await api("GET", "/images", { query: { limit: IMAGE_PAGE, cursor: st.cursors[st.page], repository: st.repository, namespace: st.namespace } }));
  } catch (e) {
    if (gen === state.generation) put(table, errorBox(e));
    return;
  }
  if (gen !== state.generation) return;
  const writer = canWriteImages();
  if (!page.items.length) {
    put(table, h("p", { class: "empty" }, st.page ? "No more images." : "No images indexed yet: PUT an SBOM to /api/v1/scheduler/images/<digest> (docs/api.md)."));
  } else {
    const rows = page.items.map((img) =>
      h(
        "tr",
        { "data-digest": img.digest },
        h("td", { "data-label": "Image" }, h("a", { href: `#/images/${encodeURIComponent(img.digest)}`, class: "mono", title: img.digest }, short(img.digest, 23)), h("div", {}, `${img.registry}/${img.repository}`)),
        h("td", { "data-label": "Tags" }, img.tags.length ? img.tags.map((t) => badge(t, "tag")) : h("span", { class: "muted" }, "—")),
        h("td", { "data-label": "Namespace" }, img.namespace || h("span", { class: "muted" }, "—")),
        h("td", { "data-label": "Purls", class: "num purls" }, n(img.purlCount)),
        h("td", { "data-label": "Product keys", class: "num keys" }, n(img.productKeyCount)),
        h("td", { "data-label": "Usage" }, usageCell(img)),
        h("td", { "data-label": "Indexed" }, fmtLocal(img.indexedAt)),
        h("td", { class: "row-actions" }, writer && h("button", { type: "button", class: "ghost danger", "data-action": "remove", onclick: () => deleteImage(img) }, "Remove")),
      ),
    );
    put(table, h("table", { class: "grid images", id: "images-table" }, h("thead", {}, h("tr", {}, ["Image", "Tags", "Namespace", "Purls", "Product keys", "Usage", "Indexed", ""].map((t) => h("th", {}, t)))), h("tbody", {}, rows)));
  }
  put(pager,
    h("button", { type: "button", class: "ghost", disabled: st.page === 0, onclick: () => { st.page -= 1; render(); } }, "← Previous"),
    h("span", { class: "muted" }, `page ${st.page + 1} · ${page.items.length} shown`),
    h("button", { type: "button", class: "ghost", id: "images-next", disabled: !page.nextCursor, onclick: () => { st.cursors[st.page + 1] = page.nextCursor; st.page += 1; render(); } }, "Next →"),
  );
}

async function viewImage(view, gen, digest) {
  let img;
  try {
    ({ doc: img } = await api("GET", `/images/${encodeURIComponent(digest)}`));
  } catch (e) {
    if (gen === state.generation) put(view, h("a", { href: "#/images" }, "← Images"), errorBox(e));
    return;
  }
  if (gen !== state.generation) return;
  const labels = Object.entries(img.labels || {});
  const facts = [
    ["Digest", h("code", { class: "wrap" }, img.digest)],
    ["Repository", `${img.registry}/${img.repository}`],
    ["Namespace", img.namespace || "—"],
    ["Tags", img.tags.length ? img.tags.map((t) => badge(t, "tag")) : "—"],
    ["Labels", labels.length ? labels.map(([k, v]) => `${k}=${v}`).join(", ") : "—"],
    ["Purls", n(img.purlCount)],
    ["Product keys", n(img.productKeyCount)],
    ["Usage", usageCell(img)],
    ["Content", h("code", { class: "wrap", id: "image-content" }, img.contentDigest)],
    ["Indexed", `${fmtLocal(img.indexedAt)} · HLC ${img.indexedHlc}`],
    ["Event", h("code", { class: "wrap" }, `${img.eventId} (seq ${img.version})`)],
  ];
  put(view,
    h("a", { href: "#/images" }, "← Images"),
    h("div", { class: "toolbar" }, h("h1", { class: "mono", title: img.digest }, `Image ${short(img.digest, 23)}`), h("span", { class: "spacer" }), canWriteImages() ? h("button", { type: "button", class: "danger", id: "remove-image", onclick: () => deleteImage(img, (removed) => { if (removed) location.hash = "#/images"; }) }, "Remove") : null),
    h("section", { class: "card" }, h("dl", { class: "facts", id: "image-facts" }, facts.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]))),
  );
}

// ----------------------------------------------------------------------------- preview

async function estimateFromHistory() {
  const { doc } = await api("GET", "/runs", { query: { state: "completed", limit: 50 } });
  let candidates = 0;
  let segments = 0;
  let images = 0;
  let seconds = 0;
  for (const r of doc.items) {
    const d = runDuration(r);
    if (r.segments?.total) {
      candidates += r.stats?.candidates || 0;
      segments += r.segments.total;
    }
    if (d > 0 && r.stats?.completed) {
      images += r.stats.completed;
      seconds += d / 1000;
    }
  }
  return { perSegment: segments ? candidates / segments : null, perSecond: seconds ? images / seconds : null, runs: doc.items.length };
}

function previewSentence(doc, body) {
  const count = h("b", { id: "preview-count" }, n(doc.count));
  const images = ` image${doc.count === 1 ? "" : "s"}`;
  if (!doc.export) {
    return h("p", { class: "summary", id: "preview-sentence" }, body.productKeys?.length ? "These change keys touch ~" : "This selection covers ~", count, `${images}.`);
  }
  const kind = doc.export.kind === "vexer" ? "Vexer" : "Feedser";
  return h(
    "p",
    { class: "summary", id: "preview-sentence" },
    `This ${kind} export touches ~`,
    count,
    `${images}; projected deltas: ~`,
    h("b", { id: "preview-deltas" }, n(doc.projectedDeltas)),
    " (",
    h("b", { id: "preview-kev" }, n(doc.projectedKev)),
    " KEV, ",
    h("b", { id: "preview-high-epss" }, n(doc.projectedHighEpss)),
    " high EPSS).",
  );
}

function openPreview() {
  const exportId = h("input", { id: "preview-export", placeholder: "an exportId the tenant received", spellcheck: "false" });
  const source = h("input", { id: "preview-source", placeholder: "only if several sources sent it", spellcheck: "false" });
  const keys = h("textarea", { id: "preview-keys", rows: 4, spellcheck: "false", placeholder: "pkg:pypi/setuptools\npkg:deb/debian/glibc" });
  const ns = h("input", { id: "preview-ns", placeholder: "all namespaces" });
  const usage = h("input", { type: "checkbox", id: "preview-usage", checked: true });
  const size = h("input", { type: "number", id: "preview-size", min: 0, max: 100, value: 10 });
  const out = h("div", { id: "preview-result", "aria-live": "polite" });
  const run = async (ev) => {
    ev.preventDefault();
    const body = { usageOnly: usage.checked, sampleSize: Math.max(0, Math.min(100, Number(size.value) || 0)) };
    if (exportId.value.trim()) {
      body.exportId = exportId.value.trim();
      if (source.value.trim()) body.source = source.value.trim();
    } else {
      body.productKeys = splitList(keys.value);
    }
    const namespaces = splitList(ns.value);
    if (namespaces.length) body.selection = { scope: "by-namespace", namespaces };
    put(out, h("p", { class: "muted" }, "Previewing…"));
    try {
      const [{ doc }, hist] = await Promise.all([api("POST", "/preview/impact", { body }), estimateFromHistory().catch(() => null)]);
      const segs = hist?.perSegment ? Math.max(doc.count ? 1 : 0, Math.ceil(doc.count / hist.perSegment)) : null;
      const secs = hist?.perSecond ? doc.count / hist.perSecond : null;
      const sampled = doc.projectedFrom !== null && doc.projectedFrom !== undefined && doc.projectedFrom < doc.count;
      put(out,
        previewSentence(doc, body),
        doc.export
          ? h("p", { class: "help", id: "preview-basis" },
              `Export ${doc.export.exportId}${doc.export.source ? ` from ${doc.export.source}` : ""}${doc.export.revision ? `, revision ${doc.export.revision}` : ""}. `,
              "Projected from its advisories and KEV list against each image's last verdict",
              sampled ? ` (an even sample of ${n(doc.projectedFrom)} images, scaled up)` : "",
              doc.unassessed ? `; ${n(doc.unassessed)} image(s) it names no severity for are not counted.` : ".")
          : h("p", { class: "help" }, "Projected deltas need an export's advisories: preview an export by its id to see them."),
        h("p", { class: "help" }, "Segments ", h("b", {}, segs === null ? "—" : `~${n(segs)}`), ", duration ", h("b", {}, secs === null ? "—" : `~${fmtDuration(secs * 1000)}`),
          hist?.runs ? ` (estimated from the last ${hist.runs} completed runs).` : " (no completed runs yet to estimate them from)."),
        doc.unmatchedCount ? h("p", { class: "help" }, `${n(doc.unmatchedCount)} key(s) match no indexed image: ${doc.unmatched.slice(0, 10).join(", ")}${doc.unmatchedCount > 10 ? "…" : ""}`) : null,
        doc.sample.length ? [h("h3", {}, "Sample digests"), h("ul", { class: "digests", id: "preview-sample" }, doc.sample.map((d) => h("li", { class: "mono" }, d)))] : null,
      );
    } catch (e) {
      put(out, errorBox(e));
    }
  };
  openModal(
    "Preview impact",
    h(
      "form",
      { onsubmit: run, class: "preview" },
      h("div", { class: "row" }, field("Feedser or Vexer export (exportId)", exportId), field("Source", source)),
      field("… or change keys (product keys or purls, one per line)", keys),
      h("div", { class: "row" }, field("Namespaces", ns), field("Sample size", size), h("label", { class: "check" }, usage, "images that use the package")),
      h("div", { class: "actions" }, h("button", { type: "submit", id: "run-preview" }, "Preview")),
      out,
    ),
  );
  exportId.focus();
}

// ----------------------------------------------------------------------------- audit

function viewAudit(view, gen) {
  const tenant = state.claims?.tenant || "";
  const result = h("div", { id: "verify-result", "aria-live": "polite" }, h("p", { class: "muted" }, "The chain head and snapshot counts come from verification: press “Verify now”. Verification re-hashes the whole chain, so it can take a while on a long one."));
  const verify = async () => {
    const btn = $("#verify-now");
    btn.disabled = true;
    put(result, h("p", { class: "muted" }, "Verifying…"));
    const started = performance.now();
    try {
      const { doc } = await api("GET", "/chain/verify", { query: { tenantId: tenant } });
      if (gen !== state.generation) return;
      const ms = performance.now() - started;
      const rows = [
        ["Entries", n(doc.entries)],
        ["Chain head", h("code", { class: "wrap", id: "chain-head" }, doc.head_chain_link || "—")],
        ["Head HLC", doc.head_hlc || "—"],
        ["Snapshots verified", n(doc.snapshots)],
        ["Positions covered by snapshots", n(doc.snapshotted)],
      ];
      if (!doc.verified) {
        rows.push(["Broken at", `position ${doc.broken_position ?? "?"}${doc.field ? `, field ${doc.field}` : ""}`], ["Reason", doc.reason || "—"], ["Expected", doc.expected || "—"], ["Found", doc.found || "—"]);
      }
      put(result, 
        h("p", { class: doc.verified ? "verified good" : "verified bad", id: "verified" }, doc.verified ? "✓ Chain verified" : "✗ Chain broken", h("span", { class: "muted" }, ` · ${new Date().toLocaleTimeString()} · ${fmtDuration(ms)}`)),
        h("dl", { class: "facts" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
      );
    } catch (e) {
      if (gen === state.generation) {
        put(result, errorBox(e.status === 404 ? new ApiError(404, { detail: `no audit chain for tenant ${tenant} yet (nothing audited so far)` }) : e));
      }
    } finally {
      btn.disabled = false;
    }
  };
  put(view, 
    h("div", { class: "toolbar" }, h("h1", {}, "Audit"), h("span", { class: "spacer" }), h("button", { type: "button", id: "verify-now", onclick: verify }, "Verify now")),
    h("section", { class: "card" }, h("p", {}, "Tenant ", h("b", {}, tenant), "'s hash chain: every job-lifecycle and control-plane event, signed in snapshots."), result),
  );
}

// ----------------------------------------------------------------------------- routing

async function render() {
  state.generation += 1;
  const gen = state.generation;
  for (const id of state.timers) clearInterval(id);
  state.timers = [];
  const view = $("#view");
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  if (!state.token || !state.claims) {
    renderHeader();
    return viewSignIn(view);
  }
  if (parts[0] === "signin" || parts[0] === "") {
    location.hash = "#/schedules";
    return;
  }
  renderHeader();
  refreshBacklog();
  later(refreshBacklog, 15000);
  try {
    if (parts[0] === "schedules" && parts[1] === "new") await viewScheduleForm(view, gen, null);
    else if (parts[0] === "schedules" && parts[2] === "edit") await viewScheduleForm(view, gen, parts[1]);
    else if (parts[0] === "schedules") await viewSchedules(view, gen);
    else if (parts[0] === "runs" && parts[1]) await viewRun(view, gen, parts[1]);
    else if (parts[0] === "runs") await viewRuns(view, gen);
    else if (parts[0] === "images" && parts[1]) await viewImage(view, gen, parts[1]);
    else if (parts[0] === "images") await viewImages(view, gen);
    else if (parts[0] === "audit") viewAudit(view, gen);
    else put(view, h("h1", {}, "Not found"), h("p", {}, h("a", { href: "#/schedules" }, "Back to schedules")));
  } catch (e) {
    if (gen === state.generation) put(view, errorBox(e));
  }
}

function start() {
  if (state.token) {
    try {
      state.claims = decodeClaims(state.token);
    } catch {
      state.token = "";
      sessionStorage.removeItem(TOKEN_KEY);
    }
  }
  $("#open-preview").addEventListener("click", openPreview);
  window.addEventListener("hashchange", () => {
    clearBanner();
    render();
  });
  render();
}

start();
