// The openclaw-rl dashboard (served at /dashboard by `openclaw-rl serve`; serve/dashboard.py
// has the decisions). Preact components written with htm's tagged templates, so there is no
// build step; every value reaches the DOM as a text node or an attribute, never as markup.
// It reads the same /v1 routes as any client, with the key kept in sessionStorage.
"use strict";
(() => {
  const { html, render, useState, useEffect, useRef } = window.htmPreact;
  const KEY = "openclaw-rl.key";
  const POLL_MS = Number(new URLSearchParams(location.search).get("poll_ms")) || 2000;
  const WINDOW_S = 30;  // request rate and latency are means over this window
  const VIEWS = ["now", "sessions", "versions", "adapters", "learning", "experience", "quarantine", "mydata"];
  const TITLES = { now: "Now", sessions: "Sessions", versions: "Versions", adapters: "My adapter", learning: "Learning",
                   experience: "Experience", quarantine: "Quarantine", mydata: "My data" };

  class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  async function api(path, { method = "GET", body } = {}) {
    const headers = {};
    const key = sessionStorage.getItem(KEY);
    if (key) headers.Authorization = `Bearer ${key}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await response.text();
    let data = null;
    try { data = JSON.parse(text); } catch (_) { /* not JSON: reported below */ }
    if (!response.ok) {
      const message = (data && data.error && data.error.message) || `${response.status}: ${text.slice(0, 200)}`;
      throw new ApiError(response.status, message);
    }
    return data;
  }

  // Re-read `path` on every tick; {data, error}. A 401 asks the app for a key.
  function usePolled(path, tick, onUnauthorized) {
    const [state, setState] = useState({ data: null, error: null });
    useEffect(() => {
      if (!path) return undefined;
      let live = true;
      api(path).then((data) => live && setState({ data, error: null }), (error) => {
        if (!live) return;
        if (error.status === 401 && onUnauthorized) onUnauthorized();
        setState((old) => ({ data: old.data, error }));
      });
      return () => { live = false; };
    }, [path, tick]);
    return state;
  }

  const fmt = {
    time: (s) => (s ? new Date(s * 1000).toLocaleTimeString() : "–"),
    datetime: (s) => (s ? new Date(s * 1000).toLocaleString() : "–"),
    num: (x, digits = 3) => (x === null || x === undefined || Number.isNaN(x) ? "–" : Number(x).toFixed(digits)),
    ago: (s) => {
      if (!s) return "never";
      const d = Math.max(0, Date.now() / 1000 - s);
      return d < 90 ? `${d.toFixed(0)} s ago` : d < 5400 ? `${(d / 60).toFixed(0)} min ago` : `${(d / 3600).toFixed(1)} h ago`;
    },
  };

  function messageText(content) {
    if (typeof content === "string") return content;
    if (Array.isArray(content)) return content.map((p) => (p && typeof p.text === "string" ? p.text : "")).join("");
    return content === null || content === undefined ? "" : JSON.stringify(content);
  }

  function lastUserMessage(messages) {
    for (let i = (messages || []).length - 1; i >= 0; i -= 1) {
      if (messages[i].role === "user") return messageText(messages[i].content);
    }
    return messages && messages.length ? messageText(messages[messages.length - 1].content) : "";
  }

  const Badge = ({ kind, children }) => html`<span class=${`badge ${kind || ""}`}>${children}</span>`;
  const Card = ({ label, value, detail, id }) => html`
    <div class="card"><div class="label">${label}</div><div class="value" id=${id}>${value}</div>
      ${detail ? html`<div class="detail">${detail}</div>` : null}</div>`;

  function gateBadge(gate) {
    const kind = { accepted: "good", rejected: "bad", rollback: "warn", base: "accent" }[gate] || "";
    return html`<${Badge} kind=${kind}>${gate}<//>`;
  }

  function sampleBadge(sample) {
    if (!sample) return html`<span class="muted">no sample yet</span>`;
    const kind = { used: "good", ready: "accent", dropped: "warn", rejected: "bad" }[sample.status] || "";
    const label = { used: "trained", ready: "waiting", dropped: "dropped", rejected: "rejected" }[sample.status];
    return html`<${Badge} kind=${kind}>${label || sample.status}<//>
      ${sample.train_step ? html` <span class="muted">step ${sample.train_step}</span>` : null}
      ${sample.reason ? html` <span class="muted">${sample.reason}</span>` : null}`;
  }

  // -- charts (uPlot) -----------------------------------------------------------------

  const COLORS = ["#2f6fde", "#c23b32", "#1a8a4a", "#b7791f", "#7a4cc2"];

  // `extent`: the least y range shown ([0, 1] keeps a flat count at 0 from spanning 0..100)
  function Chart({ title, x, series, time = false, empty = "no data yet", id, extent = null }) {
    const box = useRef(null);
    const plot = useRef(null);
    const usable = x && x.length > 0;
    const shape = `${series.map((s) => s.label).join("|")}|${time}`;
    useEffect(() => {
      if (!usable || !box.current) return undefined;
      const data = [x, ...series.map((s) => s.values.map((v) => (v === null || v === undefined ? null : v)))];
      if (plot.current && plot.current._shape === shape) {
        plot.current.setData(data);
        return undefined;
      }
      if (plot.current) plot.current.destroy();
      const opts = {
        width: Math.max(320, box.current.clientWidth || 420), height: 200,
        scales: { x: { time }, y: extent ? { range: (u, lo, hi) => [Math.min(extent[0], lo === null ? extent[0] : lo),
                                                                     Math.max(extent[1], hi === null ? extent[1] : hi)] } : {} },
        series: [{ label: time ? "time" : "x" },
                 ...series.map((s, i) => ({ label: s.label, stroke: s.color || COLORS[i % COLORS.length], width: 2,
                                            points: { show: x.length < 60 }, spanGaps: true }))],
        axes: [{}, { size: 64 }],
      };
      plot.current = new window.uPlot(opts, data, box.current);
      plot.current._shape = shape;
      return undefined;
    });
    useEffect(() => () => { if (plot.current) plot.current.destroy(); plot.current = null; }, []);
    return html`<div class="chart" id=${id}><div class="title">${title}</div>
      ${usable ? html`<div ref=${box}></div>` : html`<p class="muted">${empty}</p>`}</div>`;
  }

  // -- views ----------------------------------------------------------------------------

  function NowView({ now, history }) {
    if (!now) return html`<p class="muted">Waiting for the server…</p>`;
    const s = now.samples || {};
    const e = now.engine || {};
    const last = history.length ? history[history.length - 1] : null;
    const train = now.last_train || {};
    return html`
      <h2>Now</h2>
      <div class="cards">
        <${Card} label="policy version served" value=${`v${now.policy_version}`} id="served-version"
                 detail=${`${now.train_steps} train steps, last update ${fmt.ago(now.last_update_at)}`} />
        <${Card} label="candidate under evaluation" id="candidate"
                 value=${now.candidate === null || now.candidate === undefined ? "none" : `v${now.candidate}`}
                 detail="the update gate is deciding on it" />
        <${Card} label="samples waiting" value=${s.ready} id="samples-ready"
                 detail=${`used ${s.used}, dropped ${s.dropped}, rejected ${s.rejected}`} />
        <${Card} label="judge queue" value=${now.queues.judge} detail="paired turns not judged yet" />
        <${Card} label="trainer queue" value=${now.queues.train} detail="samples ready for a step" />
        <${Card} label=${`requests / s (last ${WINDOW_S} s)`} value=${last ? fmt.num(last.rate, 2) : "–"}
                 detail=${`${now.requests.requests} generation requests in all`} />
        <${Card} label="mean latency" value=${last && last.latency_ms !== null ? `${fmt.num(last.latency_ms, 0)} ms` : "–"}
                 detail=${`of generation requests, last ${WINDOW_S} s`} />
        <${Card} label="engine batch" value=${e.active_rows !== undefined ? e.active_rows : "–"}
                 detail=${e.waiting_requests !== undefined ? `${e.waiting_requests} requests waiting` : ""} />
        <${Card} label="sessions / turns" value=${`${now.sessions} / ${now.turns}`}
                 detail=${`${now.paired_turns} turns have a next state`} />
        <${Card} label="last step" value=${train.loss !== undefined ? `loss ${fmt.num(train.loss)}` : "–"}
                 detail=${train.kl !== undefined ? `KL ${fmt.num(train.kl, 4)}, reward ${fmt.num(train.mean_reward, 2)}` : ""} />
      </div>
      <div class="charts" style=${{ marginTop: "16px" }}>
        <${Chart} title=${`requests / s (over ${WINDOW_S} s) and engine batch`} time=${true} id="chart-rate" extent=${[0, 1]}
                  x=${history.map((h) => h.t)}
                  series=${[{ label: "requests/s", values: history.map((h) => h.rate) },
                            { label: "batch", values: history.map((h) => h.batch) }]} />
        <${Chart} title=${`mean latency of generation requests, ms (over ${WINDOW_S} s)`} time=${true} id="chart-latency" x=${history.map((h) => h.t)}
                  series=${[{ label: "latency ms", values: history.map((h) => h.latency_ms) }]} />
      </div>`;
  }

  function TurnView({ turn }) {
    const v = turn.verdict;
    const ns = turn.next_state;
    return html`
      <div class="turn" data-turn=${turn.index}>
        <div class="meta">turn ${turn.index} · ${turn.kind} · answered by <b>v${turn.policy_version}</b> ·
          ${turn.response_token_count} tokens · ${fmt.datetime(turn.created_at)}</div>
        <dl>
          <dt>prompt</dt><dd class="prompt">${lastUserMessage(turn.prompt_messages)}</dd>
          <dt>response</dt><dd class="response">${turn.response_text}</dd>
          <dt>next state</dt>
          <dd class="next-state">${ns ? html`<span class="muted">${ns.role}: </span>${messageText(ns.content)}`
                                      : html`<span class="muted">none yet</span>`}</dd>
          <dt>verdict</dt>
          <dd>${v ? html`${v.status === "ok" ? html`reward <b>${v.reward}</b>` : html`<${Badge} kind="warn">no verdict<//>`}
                  <span class="muted"> votes [${(v.votes || []).join(", ")}] · ${v.judge}</span>
                  ${v.reason ? html` <span class="muted">${v.reason}</span>` : null}`
                 : html`<span class="muted">not judged yet</span>`}</dd>
          <dt>hints</dt>
          <dd>${v && v.hints && v.hints.length
                ? v.hints.map((h) => html`<div class=${`hint ${h === v.selected_hint ? "selected" : ""}`}>
                    ${h === v.selected_hint ? "✔ " : "· "}${h}</div>`)
                : html`<span class="muted">none</span>`}</dd>
          <dt>quarantine</dt>
          <dd>${turn.quarantine && turn.quarantine.length
                ? turn.quarantine.map((q) => html`<div class="quarantined"><${Badge} kind=${q.status === "held" ? "warn" : ""}>${q.status}<//>
                    ${" "}${q.hint} <span class="muted">(${q.reason})</span></div>`)
                : html`<span class="muted">nothing held</span>`}</dd>
          <dt>sample</dt><dd class="sample">${sampleBadge(turn.sample)}</dd>
        </dl>
      </div>`;
  }

  function SessionDetail({ id, tick, onUnauthorized }) {
    const { data, error } = usePolled(`/v1/sessions/${encodeURIComponent(id)}`, tick, onUnauthorized);
    if (error && !data) return html`<div class="notice error">${error.message}</div>`;
    if (!data) return html`<p class="muted">Loading…</p>`;
    return html`<div id="session-detail">
      <h3>Session <span class="session-id">${data.id}</span></h3>
      <p class="muted">owner ${data.owner} · ${data.source} · started ${fmt.datetime(data.created_at)}
        ${data.closed_at ? ` · closed ${fmt.datetime(data.closed_at)}` : ""}</p>
      ${data.turns.length ? data.turns.map((t) => html`<${TurnView} turn=${t} key=${t.index} />`)
                          : html`<p class="muted">no turns</p>`}</div>`;
  }

  function SessionsView({ tick, onUnauthorized }) {
    const [selected, setSelected] = useState(null);
    const { data, error } = usePolled("/v1/sessions?limit=200", tick, onUnauthorized);
    const sessions = data ? data.data : [];
    return html`
      <h2>Sessions</h2>
      ${error ? html`<div class="notice error">${error.message}</div>` : null}
      <div class="split">
        <div><table id="sessions-table"><thead><tr><th>session</th><th>owner</th><th>turns</th><th>started</th></tr></thead>
          <tbody>${sessions.map((s) => html`
            <tr class=${`clickable session-row ${s.id === selected ? "selected" : ""}`} data-session=${s.id}
                onClick=${() => setSelected(s.id)} key=${s.id}>
              <td class="text session-id">${s.id}</td><td>${s.owner}</td><td>${s.turns}</td>
              <td>${fmt.time(s.created_at)}${s.closed_at ? html` <${Badge}>closed<//>` : null}</td></tr>`)}
          </tbody></table>
          ${data && !sessions.length ? html`<p class="muted">No sessions yet.</p>` : null}</div>
        <div>${selected ? html`<${SessionDetail} id=${selected} tick=${tick} onUnauthorized=${onUnauthorized} />`
                        : html`<p class="muted">Pick a session to see its turns.</p>`}</div>
      </div>`;
  }

  function checksText(record) {
    const c = record.checks;
    if (!c) return "";
    const parts = [];
    if (c.kl_per_token !== undefined && c.kl_per_token !== null) parts.push(`KL/token ${fmt.num(c.kl_per_token, 4)}`);
    if (c.score_delta !== undefined && c.score_delta !== null) parts.push(`probe score ${c.score_delta >= 0 ? "+" : ""}${fmt.num(c.score_delta, 3)}`);
    if (c.candidate && c.served) {
      parts.push(`tokens ${fmt.num(c.served.mean_tokens, 1)}→${fmt.num(c.candidate.mean_tokens, 1)}`);
      parts.push(`repetition ${fmt.num(c.served.repetition, 2)}→${fmt.num(c.candidate.repetition, 2)}`);
      parts.push(`non-answers ${fmt.num(c.served.non_answers, 2)}→${fmt.num(c.candidate.non_answers, 2)}`);
    }
    if (c.probes !== undefined) parts.push(`${c.probes} probes`);
    return parts.join(" · ");
  }

  // The collapse detectors (train/collapse.py on the gate's probe answers, serve/collapse.py on served
  // traffic) alarm on CLaaS's thresholds, not calibrated here: an alarm is shown, it rejects nothing.
  const alarmBadge = (alarms) => (alarms && alarms.length ? html`<${Badge} kind="warn">alarm<//>`
                                                          : html`<${Badge} kind="good">no alarm<//>`);
  const alarmLines = (alarms) => (alarms || []).map((a) => html`<div class="alarm" key=${a}>${a}</div>`);

  function collapseCell(record) {
    const c = record.checks && record.checks.collapse;
    if (!c) return html`<span class="muted">–</span>`;
    return html`${alarmBadge(c.alarms)}
      <div class="muted">${`entropy ratio ${fmt.num(c.entropy_ratio, 2)} · self-ROUGE-L ${fmt.num(c.self_rouge_l, 2)}`
        + ` · drift ${fmt.num(c.logprob_drift_nats, 2)} nats`}</div>${alarmLines(c.alarms)}`;
  }

  // The served-traffic detectors (GET /v1/collapse): the caller's own answers, an admin's everyone's.
  function ServedCollapse({ tick, admin, onUnauthorized }) {
    const { data: c, error } = usePolled("/v1/collapse", tick, onUnauthorized);
    if (error && !c) return html`<div class="notice error">${error.message}</div>`;
    if (!c) return null;
    const b = c.base || {};
    const t = c.thresholds;
    const versions = c.versions.length ? c.versions.map((v) => `v${v}`).join(", ") : "none";
    return html`<section class="served-collapse" id="served-collapse">
      <h3>Collapse on served traffic ${alarmBadge(c.alarms)}
        <span class="muted">${` ${admin ? "everyone's" : "your"} newest ${c.turns} answers (window ${c.window}), `
                             + `answered by ${versions}`}</span></h3>
      <div class="cards">
        <${Card} label="entropy ratio" id="served-entropy-ratio" value=${fmt.num(c.entropy_ratio, 2)}
                 detail=${`${fmt.num(c.entropy_nats, 2)} over ${fmt.num(b.entropy_nats, 2)} nats/token (earliest ${c.window}); alarm below ${t.min_entropy_ratio}`} />
        <${Card} label="self-ROUGE-L" id="served-self-rouge" value=${fmt.num(c.self_rouge_l, 2)}
                 detail=${`earliest ${fmt.num(b.self_rouge_l, 2)}; alarm above ${t.max_self_rouge_l} (or the earliest's)`} />
        <${Card} label="mean answer length" id="served-mean-tokens" value=${fmt.num(c.mean_tokens, 1)}
                 detail=${`tokens; earliest ${fmt.num(b.mean_tokens, 1)}`} />
      </div>
      ${alarmLines(c.alarms)}
      <p class="muted">${c.base ? "" : `No ratio until ${2 * c.window} answers are stored. `}${"Thresholds are "
        + `CLaaS's, ${c.calibrated ? "calibrated" : "not calibrated here"}: an alarm says look, it changes nothing.`}</p>
    </section>`;
  }

  function VersionsView({ tick, admin, onUnauthorized, onAction }) {
    const { data, error } = usePolled("/v1/policy/versions?limit=200", tick, onUnauthorized);
    const [busy, setBusy] = useState(null);
    const act = async (label, path, body) => {
      if (!window.confirm(`${label}?`)) return;
      setBusy(label);
      try {
        const result = await api(path, { method: "POST", body });
        onAction(result.object === "policy.rollback" ? `rolled back: v${result.version} serves the weights of v${result.weights_of}`
                                                      : `v${result.version} ${result.pinned ? "pinned" : "unpinned"}`);
      } catch (e) { onAction(e.message, true); }
      setBusy(null);
    };
    const versions = data ? data.data : [];
    return html`
      <h2>Versions</h2>
      ${error ? html`<div class="notice error">${error.message}</div>` : null}
      ${busy ? html`<div class="notice">${busy}…</div>` : null}
      <table id="versions-table"><thead><tr><th>version</th><th>parent</th><th>made</th><th>gate</th><th>checks</th>
        <th title="the gate's collapse detectors on its probe answers (alarms only: they do not reject)">collapse</th>
        <th>samples</th><th>KL</th><th>weights</th>${admin ? html`<th></th>` : null}</tr></thead>
      <tbody>${versions.map((v) => html`
        <tr data-version=${v.version} key=${v.version}>
          <td><b>v${v.version}</b> ${v.serving ? html`<${Badge} kind="good">serving<//>` : null}
              ${v.pinned ? html` <${Badge} kind="accent">pinned<//>` : null}</td>
          <td>${v.parent === null ? "–" : `v${v.parent}`}</td>
          <td>${fmt.datetime(v.created_at)}${v.train_step ? html`<div class="muted">step ${v.train_step}</div>` : null}</td>
          <td>${gateBadge(v.gate)}${v.reason ? html`<div class="muted">${v.reason}</div>` : null}</td>
          <td class="text muted">${checksText(v)}</td>
          <td class="collapse">${collapseCell(v)}</td>
          <td>${v.samples ? v.samples.count : 0}
              ${v.samples && v.samples.by_user ? html`<div class="muted users">${Object.entries(v.samples.by_user)
                  .map(([u, n]) => `${u} ${n}`).join(", ")}</div>` : null}</td>
          <td>${v.stats && v.stats.kl !== undefined ? fmt.num(v.stats.kl, 4) : "–"}</td>
          <td>${v.weights ? "kept" : html`<span class="muted">pruned</span>`}</td>
          ${admin ? html`<td>
            <button class="action" data-action="rollback" disabled=${!v.weights || v.serving || !!busy}
                    onClick=${() => act(`Roll back to v${v.version}`, "/v1/policy/rollback", { to: v.version })}>roll back</button>
            <button class="action" data-action="pin" disabled=${!!busy}
                    onClick=${() => act(`${v.pinned ? "Unpin" : "Pin"} v${v.version}`, "/v1/policy/pin",
                                        { version: v.version, pinned: !v.pinned })}>${v.pinned ? "unpin" : "pin"}</button>
          </td>` : null}
        </tr>`)}</tbody></table>
      ${data && !versions.length ? html`<p class="muted">No versions yet: the trainer records one per update.</p>` : null}`;
  }

  // The user's lessons measured absorbed under one adapter version (POST /v1/experience/absorption).
  function adapterLessonsCell(lessons) {
    if (!lessons) return html`<span class="muted">not measured</span>`;
    return html`${lessons.absorbed.map((l) => html`
        <div class="lesson" data-lesson=${l.id} key=${l.id}>${l.text}</div>`)}
      <span class="muted">${lessons.absorbed.length || "none"} of ${lessons.measured} measured</span>`;
  }

  // Each user's personal adapter (docs/personal-adapters.md): its versions, how the gate decided,
  // the lessons absorbed at each, pin and roll back; a user sees their own, an admin everyone's.
  function AdaptersView({ tick, admin, onUnauthorized, onAction }) {
    const { data, error } = usePolled("/v1/adapters", tick, onUnauthorized);
    const act = async (label, path, body) => {
      if (!window.confirm(`${label}?`)) return;
      try {
        const r = await api(path, { method: "POST", body });
        onAction(r.object === "adapter.rollback" ? `${r.user}'s adapter v${r.version} serves the weights of v${r.weights_of}`
                 : r.object === "adapter.switch" ? `${r.user}'s adapter turned ${r.on ? "on" : "off"}`
                 : `${r.user}'s adapter v${r.version} ${r.pinned ? "pinned" : "unpinned"}`);
      } catch (e) { onAction(e.message, true); }
    };
    const users = data ? data.data : [];
    return html`
      <h2>${admin ? "Personal adapters" : "My adapter"}</h2>
      ${error ? html`<div class="notice error">${error.message}</div>` : null}
      ${data && data.personal_adapters !== "on" ? html`<p class="muted">Personal adapters are off on this server
        (serve --personal-adapters on): everyone is served the shared model.</p>` : null}
      ${users.map((a) => html`<section key=${a.user}>
        <h3>${a.user} <span class="muted">${a.on === false ? "turned off by an admin: served the shared model"
                                          : a.serving === null ? "served the base model" : `serving v${a.serving}`}</span>
          ${admin && data.personal_adapters === "on" ? html` <button class="action" data-action="switch"
              onClick=${() => act(`Turn ${a.user}'s adapter ${a.on === false ? "on" : "off"}`,
                                  `/v1/adapters/${a.on === false ? "on" : "off"}?user=${encodeURIComponent(a.user)}`)}>
              turn ${a.on === false ? "on" : "off"}</button>` : null}</h3>
        <table class="adapters-table" data-user=${a.user}><thead><tr><th>version</th><th>parent</th><th>made</th>
          <th>gate</th><th>samples</th><th title="the user's lessons measured absorbed under this version
(measure absorption in the Experience view)">lessons absorbed</th><th>weights</th><th></th></tr></thead>
        <tbody>${a.versions.map((v) => {
          const q = `?user=${encodeURIComponent(a.user)}`;
          return html`<tr data-version=${v.version} key=${v.version}>
            <td><b>v${v.version}</b> ${v.serving ? html`<${Badge} kind="good">serving<//>` : null}
                ${v.pinned ? html` <${Badge} kind="accent">pinned<//>` : null}</td>
            <td>${v.parent === null ? "base" : `v${v.parent}`}</td>
            <td>${fmt.datetime(v.created_at)}</td>
            <td>${gateBadge(v.gate)}${v.reason ? html`<div class="muted">${v.reason}</div>` : null}</td>
            <td>${v.samples.length}</td>
            <td class="absorbed">${adapterLessonsCell(v.lessons)}</td>
            <td>${v.kept ? "kept" : html`<span class="muted">${v.gate === "rejected" ? "never served" : "pruned"}</span>`}</td>
            <td><button class="action" data-action="rollback" disabled=${!v.kept || v.serving}
                        onClick=${() => act(`Roll ${a.user}'s adapter back to v${v.version}`, `/v1/adapters/rollback${q}`,
                                            { to: v.version })}>roll back</button>
                <button class="action" data-action="pin" disabled=${!v.kept && !v.pinned}
                        onClick=${() => act(`${v.pinned ? "Unpin" : "Pin"} v${v.version}`, `/v1/adapters/pin${q}`,
                                            { version: v.version, pinned: !v.pinned })}>${v.pinned ? "unpin" : "pin"}</button></td>
          </tr>`; })}</tbody></table>
        ${a.versions.length ? null : html`<p class="muted">No adapter yet: enough feedback trains one.</p>`}
      </section>`)}`;
  }

  function LearningView({ tick, admin, onUnauthorized }) {
    const { data, error } = usePolled("/v1/dashboard/learning", tick, onUnauthorized);
    if (error && !data) return html`<div class="notice error">${error.message}</div>`;
    if (!data) return html`<p class="muted">Loading…</p>`;
    const t = data.turns, s = data.sessions, v = data.versions, run = data.run;
    const index = (values) => values.map((_, i) => i + 1);
    const hasScore = v.score_delta.some((x) => x !== null && x !== undefined);
    const collapse = v.collapse.map((c) => c || {});
    const hasCollapse = v.collapse.some((c) => c);
    return html`
      <h2>Learning</h2>
      <${ServedCollapse} tick=${tick} admin=${admin} onUnauthorized=${onUnauthorized} />
      <div class="charts">
        <${Chart} title="mean reward over time (last 20 judged turns)" time=${true} id="chart-reward" x=${t.at} extent=${[-1, 1]}
                  series=${[{ label: "mean reward", values: t.mean }]} empty="no judged turns yet" />
        <${Chart} title="over sessions: mean reward, accepted (first answer approved, last 20)" id="chart-sessions" extent=${[-1, 1]}
                  x=${index(s.id)} empty="no judged sessions yet"
                  series=${[{ label: "mean reward", values: s.mean_reward },
                            { label: "accepted rate", values: s.accepted_rate }]} />
        <${Chart} title="KL per step" id="chart-kl" x=${v.train_step} empty="no training steps yet"
                  series=${[{ label: "KL", values: v.kl }]} />
        <${Chart} title="gate rejections (cumulative, by version)" id="chart-gate" x=${v.version} extent=${[0, 1]}
                  empty="no gated versions yet" series=${[{ label: "rejected", values: v.rejections }]} />
        ${hasCollapse ? html`<${Chart} title="collapse detectors of the gate's decisions" id="chart-collapse"
                  x=${v.version} extent=${[0, 1]}
                  series=${[{ label: "entropy ratio", values: collapse.map((c) => c.entropy_ratio) },
                            { label: "self-ROUGE-L", values: collapse.map((c) => c.self_rouge_l) }]} />` : null}
        ${hasScore ? html`<${Chart} title="probe score change (candidate − served)" id="chart-probe" x=${v.version}
                  series=${[{ label: "score Δ", values: v.score_delta }]} />` : null}
        ${run ? html`<${Chart} title=${`this ${run.kind} run (${run.method}): ${run.y_label}`} id="chart-run" x=${run.x}
                  series=${[{ label: run.y_label, values: run.y }]} empty="no evaluation yet" />` : null}
      </div>
      ${!hasScore ? html`<p class="muted">The probe score appears when the gate has a scorer (simulate --gate on).</p>` : null}`;
  }

  function QuarantineView({ tick, admin, onUnauthorized, onAction }) {
    const { data, error } = usePolled(admin ? "/v1/quarantine?status=all&limit=500" : null, tick, onUnauthorized);
    if (!admin) return html`<h2>Quarantine</h2><p class="muted">Only an admin sees the quarantine.</p>`;
    const decide = async (q, decision) => {
      if (!window.confirm(`${decision === "drop" ? "Drop" : "Release"} hint ${q.id}?`)) return;
      try {
        const result = await api(`/v1/quarantine/${q.id}/${decision}`, { method: "POST" });
        onAction(`hint ${result.id} ${result.status}`);
      } catch (e) { onAction(e.message, true); }
    };
    const held = data ? data.data : [];
    return html`
      <h2>Quarantine</h2>
      ${error ? html`<div class="notice error">${error.message}</div>` : null}
      <table id="quarantine-table"><thead><tr><th>id</th><th>session</th><th>owner</th><th>hint</th><th>why held</th>
        <th>status</th><th></th></tr></thead>
      <tbody>${held.map((q) => html`
        <tr data-quarantine=${q.id} key=${q.id}>
          <td>${q.id}</td><td class="text session-id">${q.session_id}</td><td>${q.owner}</td>
          <td class="text hint">${q.hint}</td><td class="text muted">${q.reason}</td>
          <td><${Badge} kind=${q.status === "held" ? "warn" : ""}>${q.status}<//>
              ${q.decided_by ? html`<div class="muted">by ${q.decided_by}</div>` : null}</td>
          <td>${q.status === "held" ? html`
            <button class="action" data-action="release" onClick=${() => decide(q, "release")}>release</button>
            <button class="action danger" data-action="drop" onClick=${() => decide(q, "drop")}>drop</button>` : null}</td>
        </tr>`)}</tbody></table>
      ${data && !held.length ? html`<p class="muted">Nothing in quarantine.</p>` : null}`;
  }

  // The lessons learned from a user's corrections (docs/experience.md): where each came from, and
  // every change, each undoable. An admin picks any user with lessons.
  // The weights a measurement ran on: the shared version, or the user's adapter version.
  const weights = (m) => (m.adapter_version === null || m.adapter_version === undefined
    ? `v${m.policy_version}` : `adapter v${m.adapter_version}`);

  // The latest absorption measurement of a lesson along the line of weights the rule compares
  // (the user's adapter versions, or the shared model's): yes / no, its gap and the weights measured.
  function absorbedCell(lesson) {
    const all = lesson.absorption_line || lesson.absorption || [];
    if (!all.length) return html`<span class="muted">not measured</span>`;
    const last = all[all.length - 1];
    const trend = all.length > 1 ? ` (from ${all[0].gap.toFixed(3)} at ${weights(all[0])})` : "";
    const state = lesson.absorbed === null ? "cannot tell" : lesson.absorbed ? "yes" : "no";
    return html`<${Badge}>${state}<//>
      <span class="muted">${last.gap.toFixed(3)} at ${weights(last)}${trend}</span>`;
  }

  function ExperienceView({ tick, admin, user, onUnauthorized, onAction }) {
    const [who, setWho] = useState("");
    const query = who ? `?user=${encodeURIComponent(who)}` : "";
    const { data, error } = usePolled(user ? `/v1/experience${query || "?"}${query ? "&" : ""}limit=50` : null, tick,
                                      onUnauthorized);
    if (!user) return html`<p class="muted">Loading…</p>`;
    const act = async (path, options) => {
      try {
        const result = await api(path + query, options);
        const made = result.changes_made.map((c) => `${c.kind} (v${c.version})`).join(", ");
        onAction(made ? `experience of ${result.user}: ${made}` : "nothing to change");
      } catch (e) { onAction(e.message, true); }
    };
    const edit = (lesson) => {
      const text = window.prompt(`Rewrite lesson ${lesson.id}:`, lesson.text);
      if (text !== null && text.trim() && text !== lesson.text) {
        act(`/v1/experience/lessons/${lesson.id}`, { method: "PUT", body: { text } });
      }
    };
    const remove = (lesson) => {
      if (window.confirm(`Delete lesson ${lesson.id}? (undo brings it back)`)) {
        act(`/v1/experience/lessons/${lesson.id}`, { method: "DELETE" });
      }
    };
    const lessons = data ? data.lessons : [];
    const changes = data ? data.changes : [];
    const others = data && data.users ? data.users.filter((u) => u !== user.name) : [];
    return html`
      <h2>Experience <span class="muted">(${data ? data.user : user.name}, version ${data ? data.version : "–"})</span></h2>
      <p class="muted">Rules learned from the corrections of this user; every request of theirs is answered with them
        in its context. Every change is kept and can be undone.</p>
      ${error ? html`<div class="notice error">${error.message}</div>` : null}
      <p>${admin ? html`<label>user <select id="experience-user" value=${who} onChange=${(e) => setWho(e.target.value)}>
            <option value="">${user.name} (you)</option>
            ${[...new Set([...others, ...(who ? [who] : [])])].map((u) => html`<option value=${u} key=${u}>${u}</option>`)}
          </select></label> ` : null}
        <button class="action" id="experience-undo" disabled=${!changes.length}
                onClick=${() => act("/v1/experience/undo", { method: "POST" })}>undo the latest change</button>
        <button class="action danger" id="experience-clear" disabled=${!lessons.length}
                onClick=${() => window.confirm("Delete every lesson? (undo brings them back)")
                  && act("/v1/experience", { method: "DELETE" })}>delete all lessons</button>
        <button class="action" id="experience-absorption" disabled=${!lessons.length}
                title="score each lesson with and without it on the turns served with it, on the policy served now"
                onClick=${() => act("/v1/experience/absorption", { method: "POST" })}>measure absorption</button></p>
      <table id="lessons-table"><thead><tr><th>id</th><th>lesson</th><th>support</th><th>came from</th>
        <th>last backed</th><th title="has the policy absorbed it? the gap (nats per token) it still makes,
on the turns served with it; absorbed when it fell to a quarter of its first gap, which must be at least
${data ? data.absorbed_rule.measurable_first_gap : "–"} to tell">absorbed</th><th></th></tr></thead>
      <tbody>${lessons.map((l) => html`
        <tr data-lesson=${l.id} key=${l.id}><td>${l.id}</td><td class="text lesson">${l.text}</td>
          <td>${l.support}</td>
          <td class="text sources">${l.from.map((f) => html`<div class="session-id">${f.session_id} #${f.index}</div>`)}
            ${l.sources.length > l.from.length
              ? html`<div class="muted">${l.sources.length - l.from.length} turn(s) no longer stored</div>` : null}</td>
          <td>${fmt.ago(l.updated_at)}</td>
          <td class="absorbed">${absorbedCell(l)}</td>
          <td><button class="action" data-action="edit" onClick=${() => edit(l)}>edit</button>
              <button class="action danger" data-action="delete" onClick=${() => remove(l)}>delete</button></td>
        </tr>`)}</tbody></table>
      ${data && !lessons.length ? html`<p class="muted">No lessons yet: they come from corrections the judge
        accepts (a reply that corrects the agent, or feedback).</p>` : null}
      <h3>Changes</h3>
      <table id="changes-table"><thead><tr><th>version</th><th>change</th><th>before</th><th>after</th><th>why</th></tr></thead>
      <tbody>${changes.map((c) => html`
        <tr data-change=${c.version} key=${c.version}><td>v${c.version}</td><td><${Badge}>${c.kind}<//>
          ${c.gate ? html` <span title=${c.gate.reason}><${Badge} kind=${c.gate.outcome === "rejected" ? "bad" : "good"}>gate ${c.gate.outcome}<//></span>` : null}</td>
          <td class="text before">${c.before.join("\n")}</td><td class="text after">${c.after.join("\n")}</td>
          <td class="text muted">${c.reason}</td></tr>`)}</tbody></table>`;
  }

  function MyDataView({ tick, user, onUnauthorized, onAction }) {
    const { data, error } = usePolled("/v1/sessions?limit=1000", tick, onUnauthorized);
    if (!user) return html`<p class="muted">Loading…</p>`;
    const mine = data ? data.data.filter((s) => s.owner === user.name) : [];
    const forget = async (label, path) => {
      if (!window.confirm(`${label}? This cannot be undone.`)) return;
      try {
        const result = await api(path, { method: "DELETE" });
        const trained = result.trained && result.trained.samples
          ? `; ${result.trained.samples} samples were already trained into ${result.trained.first_versions.map((x) => `v${x}`).join(", ") || "an unpublished step"}`
          : "";
        onAction(`deleted ${result.sessions !== undefined ? result.sessions : 1} session(s), ${result.turns} turns${trained}`);
      } catch (e) { onAction(e.message, true); }
    };
    return html`
      <h2>My data <span class="muted">(${user.name})</span></h2>
      ${error ? html`<div class="notice error">${error.message}</div>` : null}
      <p><button class="action danger" id="delete-all" disabled=${!mine.length}
          onClick=${() => forget(`Delete all ${mine.length} sessions of ${user.name} and the lessons learned from them`,
                                 `/v1/users/${encodeURIComponent(user.name)}/data`)}>delete all my data</button></p>
      <table id="mydata-table"><thead><tr><th>session</th><th>turns</th><th>started</th><th></th></tr></thead>
      <tbody>${mine.map((s) => html`
        <tr data-session=${s.id} key=${s.id}><td class="text session-id">${s.id}</td><td>${s.turns}</td>
          <td>${fmt.datetime(s.created_at)}</td>
          <td><button class="action danger" data-action="delete"
                      onClick=${() => forget(`Delete session ${s.id}`, `/v1/sessions/${encodeURIComponent(s.id)}`)}>delete</button></td>
        </tr>`)}</tbody></table>
      ${data && !mine.length ? html`<p class="muted">You have no sessions.</p>` : null}`;
  }

  function KeyForm({ onKey, wrong }) {
    const [value, setValue] = useState("");
    const submit = (event) => {
      event.preventDefault();
      if (value.trim()) onKey(value.trim());
    };
    return html`<form class="key" id="key-form" onSubmit=${submit}>
      <span>${wrong ? "This server needs an API key (or the one given is wrong):" : "API key:"}</span>
      <input type="password" name="key" autocomplete="off" placeholder="the key openclaw-rl users add printed"
             value=${value} onInput=${(e) => setValue(e.target.value)} />
      <button class="action" type="submit">use this key</button>
      <span class="muted">kept in this tab only (sessionStorage), sent as Authorization: Bearer</span></form>`;
  }

  function App() {
    const initial = VIEWS.includes(location.hash.slice(1)) ? location.hash.slice(1) : "now";
    const [view, setView] = useState(initial);
    const [tick, setTick] = useState(0);
    const [needKey, setNeedKey] = useState(false);
    const [notice, setNotice] = useState(null);
    const [history, setHistory] = useState([]);
    const previous = useRef([]);
    const unauthorized = () => setNeedKey(true);
    const { data: now } = usePolled(needKey ? null : "/v1/dashboard/now", tick, unauthorized);

    useEffect(() => {
      const timer = setInterval(() => setTick((t) => t + 1), POLL_MS);
      const onHash = () => VIEWS.includes(location.hash.slice(1)) && setView(location.hash.slice(1));
      window.addEventListener("hashchange", onHash);
      return () => { clearInterval(timer); window.removeEventListener("hashchange", onHash); };
    }, []);

    useEffect(() => {  // request rate and mean latency over the last WINDOW_S, from readings of the totals
      if (!now) return;
      const readings = [...previous.current.filter((r) => r.at >= now.at - WINDOW_S), now];
      previous.current = readings;
      const before = readings[0];
      if (now.at <= before.at) return;
      const requests = now.requests.requests - before.requests.requests;
      const point = { t: now.at, rate: requests / (now.at - before.at),
                      latency_ms: requests > 0 ? (1000 * (now.requests.latency_s - before.requests.latency_s)) / requests : null,
                      batch: now.engine.active_rows !== undefined ? now.engine.active_rows : null };
      setHistory((h) => [...h.slice(-299), point]);
    }, [now]);

    const useKey = (key) => {
      sessionStorage.setItem(KEY, key);
      setNeedKey(false);
      previous.current = [];
      setTick((t) => t + 1);
    };
    const forgetKey = () => { sessionStorage.removeItem(KEY); setNeedKey(true); };
    const onAction = (text, failed = false) => { setNotice({ text, failed }); setTick((t) => t + 1); };
    const go = (v) => { location.hash = v; setView(v); setNotice(null); };
    const user = now ? now.user : null;
    const admin = !!(user && user.admin);
    const props = { tick, admin, user, onUnauthorized: unauthorized, onAction };
    const body = { now: html`<${NowView} now=${now} history=${history} />`,
                   sessions: html`<${SessionsView} ...${props} />`, versions: html`<${VersionsView} ...${props} />`,
                   adapters: html`<${AdaptersView} ...${props} />`,
                   learning: html`<${LearningView} ...${props} />`, quarantine: html`<${QuarantineView} ...${props} />`,
                   experience: html`<${ExperienceView} ...${props} />`,
                   mydata: html`<${MyDataView} ...${props} />` }[view];
    return html`
      <header><h1>openclaw-rl</h1>
        ${now ? html`<span>${now.model}</span><span>serving <b id="header-version">v${now.policy_version}</b></span>` : null}
        <span class="who">${user ? html`${user.name}${admin ? " (admin)" : ""} · ` : null}
          ${sessionStorage.getItem(KEY) ? html`<a href="#" onClick=${(e) => { e.preventDefault(); forgetKey(); }}>forget key</a>`
                                        : html`<a href="#" onClick=${(e) => { e.preventDefault(); setNeedKey(true); }}>use a key</a>`}</span>
      </header>
      <nav>${VIEWS.map((v) => html`<button class=${v === view ? "active" : ""} data-view=${v} onClick=${() => go(v)}>
        ${TITLES[v]}</button>`)}</nav>
      <main>
        ${needKey ? html`<div class="notice"><${KeyForm} onKey=${useKey} wrong=${!!sessionStorage.getItem(KEY)} /></div>` : null}
        ${notice ? html`<div class=${`notice ${notice.failed ? "error" : ""}`} id="notice">${notice.text}</div>` : null}
        ${needKey ? null : body}
      </main>`;
  }

  const root = document.getElementById("app");
  root.textContent = "";  // the "Loading" placeholder
  render(html`<${App} />`, root);
})();
