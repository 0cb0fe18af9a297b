// tpuctl ui: the page. Read-only; every value from the server is written as text (textContent,
// setAttribute on attributes this file chooses), never parsed as HTML. No other origin is reached.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const REFRESH_MS = 5000;
const STATE_COLORS = { training: "#188038", making_data: "#a142f4", starting: "#9aa0a6", waiting: "#e37400", idle: "#d93025" };
// goodput and each badput cause (provision/runs/goodput.py), on the timeline's band and in the legend
const CAUSE_COLORS = { goodput: "#188038", provisioning: "#e37400", billed_no_job: "#d93025", host_bootstrap: "#5f6368",
  program_startup: "#a142f4", data_loading: "#1a73e8", checkpoint_save: "#12b5cb", wasted_progress: "#a50e0e",
  disruption: "#f9ab00", unattributed: "#bdc1c6" };
// a preemption's phases, in order (provision/runs/goodput.py _preemption, _restart_phases): a shade each
const PHASES = ["notice to job exit", "last step to job exit", "job exit to preemption seen", "seen to recreate started",
  "of which failed recreates (capacity, quota)", "recreate", "recreated to attempt started", "host bootstrap",
  "program start and restore to first step"];
const PHASE_COLORS = ["#fbbc04", "#12b5cb", "#f28b82", "#fdd663", "#d93025", "#e37400", "#fcad70", "#5f6368", "#a142f4"];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined) node.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
  }
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = String(text);
  return node;
}

function link(hash, text) { return el("a", { href: hash }, text); }
function runLink(id) { return link("#/run/" + encodeURIComponent(id), id); }
function sweepLink(id) { return link("#/sweep/" + encodeURIComponent(id), id); }
function state(s) { return s ? el("span", { class: "state " + String(s).replace(/[^A-Za-z_]/g, "") }, s) : "-"; }
// The one number format of the page (cards, tables, chart labels): `digits` decimals where they
// show at least 3 significant digits (a loss 0.2345, a step 1200), otherwise 3 significant digits
// in exponent form (7.0e-13, 1.8e+9), so a non-zero value never reads 0.0000 and a large one
// never runs to a dozen digits.
function fmt(v, digits) {
  if (typeof v !== "number" || !Number.isFinite(v)) return "-";
  if (v === 0) return "0";
  const d = digits === undefined ? 4 : digits;
  const a = Math.abs(v);
  if (Number.isInteger(v) && a < 1e15) return String(v);
  const mag = Math.floor(Math.log10(a));
  if (mag < 2 - d || mag >= 6) {
    const [m, e] = v.toExponential(2).split("e");
    return m.replace(/0+$/, "").replace(/\.$/, ".0") + "e" + e;
  }
  return v.toFixed(Math.max(0, Math.min(d, 5 - mag)));
}
// dollars: cents from a dime up ($1.23), two significant digits below ($0.012), never $0.00 for a cost
function money(v) {
  if (typeof v !== "number" || !Number.isFinite(v)) return "-";
  const a = Math.abs(v);
  if (a === 0 || a >= 0.1) return "$" + v.toFixed(2);
  return a < 1e-4 ? (v < 0 ? "-" : "") + "<$0.0001" : "$" + String(Number(v.toPrecision(2)));
}
// a share in percent, one decimal (0.4%, 51.5%, 100.0%), never 0.0% for a share that is not zero
function pct(v) {
  if (typeof v !== "number" || !Number.isFinite(v)) return "-";
  return v > 0 && v < 0.05 ? "<0.1%" : v.toFixed(1) + "%";
}
function when(t) { return typeof t === "number" ? new Date(t * 1000).toLocaleString() : "-"; }
// a duration in its two largest units, the second padded: 45s, 5m07s, 1h02m, 2d03h
function dur(s) {
  if (typeof s !== "number" || !Number.isFinite(s)) return "-";
  s = Math.max(0, Math.round(s));
  if (s < 60) return s + "s";
  const units = [["d", 86400], ["h", 3600], ["m", 60], ["s", 1]];
  const i = units.findIndex(([, n]) => s >= n);
  const [u1, n1] = units[i], [u2, n2] = units[i + 1];
  const first = Math.floor(s / n1), second = Math.floor((s % n1) / n2);
  return first + u1 + String(second).padStart(2, "0") + u2;
}
function card(k, v, ...notes) {
  return el("div", { class: "card" }, el("div", { class: "k" }, k), el("div", { class: "v" }, v),
    notes.filter((n) => n).map((n) => el("div", { class: "note" }, n)));
}

function table(headers, rows, rowClass) {
  const head = el("tr", {}, headers.map((h) => el("th", { class: h.num ? "num" : null }, h.label || h)));
  const body = rows.map((r, i) => el("tr", { class: rowClass ? rowClass(i) : null },
    r.map((c, j) => el("td", { class: headers[j].num ? "num" : null }, c === null || c === undefined ? "-" : c))));
  return el("table", {}, el("thead", {}, head), el("tbody", {}, body));
}

async function getJSON(path) {
  const resp = await fetch(path, { headers: { Accept: "application/json" }, cache: "no-store" });
  if (!resp.ok) throw new Error(path + ": HTTP " + resp.status);
  return resp.json();
}

// ---- charts ------------------------------------------------------------------------------------

// a linear map of [d0, d1] onto [r0, r1]; a domain of one value goes to the middle, where a lone
// point is seen
function scale(d0, d1, r0, r1, pad) {
  if (d1 === d0) return () => (r0 + r1) / 2;
  const p = pad === undefined ? 0 : pad;
  const a = r0 + (r1 - r0) * p, b = r1 - (r1 - r0) * p;
  return (v) => a + ((v - d0) / (d1 - d0)) * (b - a);
}

function lineChart(points, series, opts) {
  const W = 560, H = 220, L = 52, R = 10, T = 10, B = 28;
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "chart", "data-series": series.map((s) => s.name).join(",") });
  const xs = points.map((p) => p.step);
  const ys = series.flatMap((s) => points.map(s.get).filter((v) => typeof v === "number"));
  if (!xs.length || !ys.length) { root.appendChild(svg("text", { x: L, y: H / 2 }, "no points yet")); return root; }
  const x = scale(Math.min(...xs), Math.max(...xs), L, W - R);
  const y = scale(Math.min(...ys), Math.max(...ys), H - B, T);
  root.appendChild(svg("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }));
  root.appendChild(svg("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }));
  // the axes' labels: right-aligned to the y axis, and inside the x axis's ends, so none is cut off
  for (const v of new Set([Math.min(...ys), Math.max(...ys)])) root.appendChild(svg("text", { x: L - 4, y: y(v) + 4, "text-anchor": "end" }, fmt(v)));
  const x0 = Math.min(...xs), x1 = Math.max(...xs), xlabel = opts && opts.xlabel ? opts.xlabel : "step";
  if (x0 === x1) {
    root.appendChild(svg("text", { x: x(x0), y: H - 8, "text-anchor": "middle" }, `${xlabel} ${fmt(x0, 0)}`));
  } else {
    root.appendChild(svg("text", { x: x(x0), y: H - 8, "text-anchor": "start" }, fmt(x0, 0)));
    root.appendChild(svg("text", { x: x(x1), y: H - 8, "text-anchor": "end" }, fmt(x1, 0)));
    root.appendChild(svg("text", { x: (L + W - R) / 2, y: H - 8, "text-anchor": "middle" }, xlabel));
  }
  series.forEach((s, i) => {
    const have = points.filter((p) => typeof s.get(p) === "number");
    if (have.length > 1) {
      const pts = have.map((p) => `${x(p.step).toFixed(1)},${y(s.get(p)).toFixed(1)}`);
      root.appendChild(svg("polyline", { class: "line m" + i, points: pts.join(" "), "data-name": s.name }));
    } else if (have.length === 1) {
      // one look so far (an evaluation made once, a run just started): its dot and its value, not a blank chart
      const p = have[0], cx = x(p.step), cy = y(s.get(p)), right = cx > W - 160;
      const dot = svg("circle", { class: "point m" + i, cx: cx, cy: cy, r: 4, "data-name": s.name });
      dot.appendChild(svg("title", {}, `${s.name} ${fmt(s.get(p))} at step ${fmt(p.step, 0)}`));
      root.appendChild(dot);
      root.appendChild(svg("text", { class: "value", x: right ? cx - 8 : cx + 8, y: cy - 8 + 14 * i, "text-anchor": right ? "end" : "start",
        "data-name": s.name }, `${s.name} ${fmt(s.get(p))} at step ${fmt(p.step, 0)}`));
    }
  });
  return root;
}

function swatch(color) {
  const root = svg("svg", { width: 10, height: 10, class: "swatch" });
  root.appendChild(svg("rect", { x: 0, y: 0, width: 10, height: 10, rx: 2, fill: color }));
  return root;
}

// The timeline: events as ticks, each preemption's lost time shaded, and under the axis two lanes: the
// run's wall time by cause (goodput and each badput cause, provision/runs/goodput.py) and each
// preemption's phases (notice, exit, recreate, bootstrap, restore to first step), each with its title.
function timeline(doc) {
  const W = 1100, H = 156, L = 10, R = 10;
  const evs = doc.events;
  const t0 = doc.created_at || (evs[0] && evs[0].time) || 0;
  const t1 = doc.ended_at || Date.now() / 1000;
  const x = scale(t0, Math.max(t1, t0 + 1), L, W - R);
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "timeline" });
  root.appendChild(svg("line", { class: "axis", x1: L, y1: 70, x2: W - R, y2: 70 }));
  for (const o of doc.outages) {
    const end = o.end === null || o.end === undefined ? t1 : o.end;
    const rect = svg("rect", { class: "lost", x: x(o.start), y: 8, width: Math.max(2, x(end) - x(o.start)), height: 80 });
    rect.appendChild(svg("title", {}, "lost to preemption: " + dur(end - o.start)));
    root.appendChild(rect);
  }
  const known = ["preempted", "recreated", "resumed", "attempt_started", "finished"];
  let row = 0;
  for (const e of evs) {
    if (e.event.startsWith("notify_")) continue;
    const cls = known.includes(e.event) ? e.event : "other";
    const xi = x(e.time);
    const mark = svg("line", { class: "ev " + cls, x1: xi, y1: 56, x2: xi, y2: 84, "data-event": e.event });
    mark.appendChild(svg("title", {}, e.event + " " + when(e.time)));
    root.appendChild(mark);
    if (cls !== "other") {
      const right = xi > W - 120;
      root.appendChild(svg("text", { x: right ? xi - 3 : xi + 3, y: 20 + 14 * (row % 3), "text-anchor": right ? "end" : "start" }, e.event));
      row += 1;
    }
  }
  const g = doc.goodput;
  if (g) {
    for (const [a, b, cat] of g.segments) {
      const seg = svg("rect", { class: "seg", x: x(a), y: 96, width: Math.max(1, x(b) - x(a)), height: 12,
        fill: CAUSE_COLORS[cat] || "#bdc1c6", "data-category": cat });
      seg.appendChild(svg("title", {}, `${cat}: ${dur(b - a)}`));
      root.appendChild(seg);
    }
    g.preemptions.forEach((p, n) => {
      for (const ph of p.phases) {
        if (!ph.recorded || ph.from === null || ph.to === null) continue;
        const i = PHASES.indexOf(ph.phase);
        const failed = ph.phase.startsWith("of which");
        const rect = svg("rect", { class: "phase", x: x(ph.from), y: failed ? 126 : 112, width: Math.max(2, x(ph.to) - x(ph.from)),
          height: failed ? 4 : 12, fill: PHASE_COLORS[i] || "#9aa0a6", "data-phase": ph.phase, "data-preemption": n + 1 });
        rect.appendChild(svg("title", {}, `preemption ${p.preemptions.join(",") || n + 1}: ${ph.phase} ${dur(ph.seconds)}`));
        root.appendChild(rect);
      }
    });
  }
  root.appendChild(svg("text", { x: L, y: H - 8 }, when(t0)));
  root.appendChild(svg("text", { x: W - R - 140, y: H - 8 }, doc.ended_at ? when(t1) : "now"));
  return root;
}

// A preemption in words, as tpuctl status and cost say it: the notice, the save, the steps redone
function preemptionLabel(p, n) {
  const said = p.checkpointed_in_notice ? "notice, checkpointed in it" : p.notice ? "notice"
    : p.notice === false ? "no notice seen" : "notice unknown";
  const redone = p.steps_redone === null ? "steps redone unknown" : `${fmt(p.steps_redone, 0)} steps redone`;
  return `preemption ${p.preemptions.join(",") || n + 1} (${said}; ${redone})`;
}

// Goodput: the share of the run's wall time spent on steps that were kept, and the rest by cause, in
// seconds and dollars at the run's prices; then each preemption by phase.
function goodputSection(g) {
  if (!g) return [el("h2", {}, "goodput"), el("p", { class: "muted" }, "not computed: the run's records could not be read")];
  const bad = g.categories.filter((c) => c.key !== "goodput" && c.seconds > 0).sort((a, b) => b.seconds - a.seconds);
  const rows = bad.map((c) => [el("span", { class: "nowrap" }, swatch(CAUSE_COLORS[c.key]), " " + c.key), c.google, dur(c.seconds),
    c.usd === null ? "-" : money(c.usd), g.wall_s ? pct((100 * c.seconds) / g.wall_s) : "-"]);
  const phaseRows = g.preemptions.flatMap((p, n) => p.phases.filter((ph) => ph.recorded)
    .map((ph, j) => [j === 0 ? preemptionLabel(p, n) : "", el("span", {}, swatch(PHASE_COLORS[PHASES.indexOf(ph.phase)] || "#9aa0a6"), " " + ph.phase),
      dur(ph.seconds)]));
  return [
    el("h2", {}, "goodput"),
    el("div", { class: "cards goodput" },
      card("goodput", pct(g.pct), `${dur(g.goodput_s)} of ${dur(g.wall_s)} on steps that were kept`),
      card("badput", dur(g.badput_s), g.no_tpu_recorded ? "no TPU of its cluster in the cost ledgers read here: dollars unknown"
        : g.badput_usd === null ? "no price known" : `${money(g.badput_usd)} at the run's prices`),
      g.preemptions.some((p) => p.recovery_s !== null) ? card("recovery", g.preemptions.map((p) => dur(p.recovery_s)).join(", "),
        "each preemption, seen to its first new step") : null),
    el("p", { class: "legend" }, g.categories.filter((c) => c.seconds > 0).map((c) => el("span", {}, swatch(CAUSE_COLORS[c.key]), " " + c.key))),
    rows.length ? table(["badput by cause", "Google's term", { label: "time", num: true }, { label: "$", num: true },
      { label: "of the wall time", num: true }], rows) : el("p", { class: "muted" }, "no badput"),
    phaseRows.length ? el("h2", {}, "preemptions by phase") : null,
    phaseRows.length ? table(["preemption", "phase", { label: "time", num: true }], phaseRows) : null,
  ];
}

function spendBar(spend) {
  const W = 560, H = 28;
  const rows = spend.by_state.filter((r) => r.seconds > 0);
  const total = rows.reduce((a, r) => a + r.seconds, 0) || 1;
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "spendbar" });
  let at = 0;
  for (const r of rows) {
    const w = (r.seconds / total) * W;
    const bar = svg("rect", { class: "bar", x: at, y: 0, width: w, height: H, fill: STATE_COLORS[r.state] || "#9aa0a6" });
    bar.appendChild(svg("title", {}, r.state + ": " + dur(r.seconds)));
    root.appendChild(bar);
    at += w;
  }
  return root;
}

function scatter(trials, param, metric) {
  const W = 270, H = 190, L = 44, R = 8, T = 8, B = 30;
  const pts = trials.filter((t) => typeof t.params[param] === "number" && typeof t.metric === "number");
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "scatter", "data-param": param });
  if (!pts.length) { root.appendChild(svg("text", { x: L, y: H / 2 }, param + ": no scored trial")); return root; }
  const vs = pts.map((t) => t.params[param]);
  const logx = Math.min(...vs) > 0 && Math.max(...vs) / Math.min(...vs) > 30;
  const fx = logx ? Math.log10 : (v) => v;
  const x = scale(Math.min(...vs.map(fx)), Math.max(...vs.map(fx)), L, W - R, 0.06);
  const ms = pts.map((t) => t.metric);
  const y = scale(Math.min(...ms), Math.max(...ms), H - B, T, 0.06);
  root.appendChild(svg("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }));
  root.appendChild(svg("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }));
  root.appendChild(svg("text", { x: L, y: H - 10 }, param + (logx ? " (log)" : "")));
  root.appendChild(svg("text", { x: 2, y: T + 10 }, fmt(Math.max(...ms))));
  if (Math.min(...ms) !== Math.max(...ms)) root.appendChild(svg("text", { x: 2, y: H - B }, fmt(Math.min(...ms))));
  for (const t of pts) {
    const dot = svg("circle", { class: "dot" + (t.best ? " best" : ""), cx: x(fx(t.params[param])), cy: y(t.metric), r: t.best ? 6 : 4 });
    dot.appendChild(svg("title", {}, `trial ${t.trial}: ${param}=${fmt(t.params[param])}, ${metric}=${fmt(t.metric)}`));
    root.appendChild(dot);
  }
  return root;
}

// ---- views -------------------------------------------------------------------------------------

function overview(doc) {
  const c = doc.clusters;
  const clusterRows = c.items.map((k) => [k.name, state(k.state), k.accelerator_type || "-", k.zone || "-",
    money(k.hourly_usd), dur(k.uptime_seconds),
    k.hosts.length ? k.hosts.map((h) => `worker ${h.worker}: ${h.ip}`).join(", ") : (k.host_count ? k.host_count + " host(s)" : "-"),
    k.run ? runLink(k.run) : "-"]);
  const runRows = doc.runs.map((r) => [runLink(r.run_id), r.cluster, r.job, state(r.status),
    `${fmt(r.step, 0)}/${fmt(r.num_train_steps, 0)}`, fmt(r.loss), fmt(r.preemptions, 0), when(r.created_at)]);
  const sweepRows = doc.sweeps.map((s) => [sweepLink(s.sweep_id), state(s.state), s.metric,
    s.best_trial === null ? "-" : `trial ${s.best_trial}: ${fmt(s.best_metric)}`, fmt(s.max_trials, 0), when(s.created_at)]);
  return [
    el("h1", {}, "Clusters"),
    c.error ? el("p", { class: "err" }, c.error) : null,
    clusterRows.length ? table(["cluster", "state", "type", "zone", { label: "$/hour", num: true }, "uptime", "slice hosts", "run"], clusterRows)
      : el("p", { class: "muted" }, "no cluster"),
    el("h2", {}, "Runs"),
    runRows.length ? table(["run", "cluster", "job", "status", "step", { label: "loss", num: true }, { label: "preemptions", num: true }, "started"], runRows)
      : el("p", { class: "muted" }, "no run known on this machine"),
    el("h2", {}, "Sweeps"),
    sweepRows.length ? table(["sweep", "state", "metric", "best", { label: "trials", num: true }, "started"], sweepRows)
      : el("p", { class: "muted" }, "no sweep known on this machine"),
  ];
}

// The estimate the run started with, as tpuctl train printed it: time and dollars first, then the
// TPU and tier it priced, where its speed came from, and when it was made. Only the fields named
// here are shown, each formatted; the basis lines go under the cards (estimateBasis).
function estimateCard(e) {
  if (!e) return null;
  const made = e.at === null ? null : "made " + when(e.at);
  if (!e.made) return card("estimate", "none", e.why, made);
  const value = e.finishes ? `${dur(e.total_s)}, ${money(e.total_usd)}` : "never finishes";
  const on = [e.accelerator_type, e.tier].filter((x) => x).join(" ") + (e.zone ? " in " + e.zone : "");
  const speed = e.speed_source ? `${e.speed_source} speed` + (e.steps_per_sec === null ? "" : `, ${fmt(e.steps_per_sec)} steps/s`) : null;
  const steps = e.steps === null ? null : `${fmt(e.steps, 0)} steps`
    + (e.interruptions ? `, ${fmt(e.interruptions)} interruptions expected (+${dur(e.overhead_s)})` : "");
  return card("estimate", value, e.finishes ? null : "interrupted faster than it recovers", on || null, speed, steps, made);
}

function estimateBasis(e) {
  if (!e || !e.made || !(e.basis.length || e.input_note)) return null;
  return el("div", { class: "basis" }, el("h2", {}, "the estimate's basis"),
    el("ul", { class: "muted" }, [...e.basis, e.input_note].filter((b) => b).map((b) => el("li", {}, b))));
}

// the live projection and the hard caps, as tpuctl status shows them
function paceCards(p) {
  if (!p) return [];
  return [
    p.eta === null ? null : card("ETA", when(p.eta), p.projected_usd === null ? null : `${money(p.projected_usd)} at the end`),
    p.budget_usd === null ? null : card("budget", money(p.budget_usd), p.stopped_by === "budget" ? "stopped the run" : null),
    p.deadline === null ? null : card("deadline", when(p.deadline), p.stopped_by === "deadline" ? "stopped the run" : null),
  ];
}

function runView(doc) {
  const cards = el("div", { class: "cards" },
    card("status", state(doc.status)),
    card("step", `${fmt(doc.step, 0)} / ${fmt(doc.num_train_steps, 0)}`),
    card("loss", fmt(doc.loss)),
    card("preemptions", fmt(doc.preemptions, 0)),
    card("lost to preemptions", `${fmt(doc.steps_lost, 0)} steps, ${dur(doc.seconds_lost)}`),
    card("spend", money(doc.spend.total_usd)),
    estimateCard(doc.estimate), ...paceCards(doc.pace));
  const metricNames = [...new Set(doc.curve.flatMap((p) => Object.keys(p.m || {})))].slice(0, 3);
  const charts = el("div", { class: "grid charts" },
    el("div", {}, el("h2", {}, "loss"), lineChart(doc.curve, [{ name: "loss", get: (p) => p.loss }])),
    metricNames.length ? el("div", {}, el("h2", {}, metricNames.join(", ")),
      lineChart(doc.curve, metricNames.map((n) => ({ name: n, get: (p) => (p.m || {})[n] })))) : null);
  const spendRows = doc.spend.by_state.map((r) => [r.state, dur(r.seconds), money(r.usd)]);
  const evRows = doc.events.filter((e) => !e.event.startsWith("notify_") || doc.events.length < 200).slice(-200).reverse()
    .map((e) => [when(e.time), e.event, Object.entries(e.fields).map(([k, v]) => `${k}=${typeof v === "number" ? fmt(v) : v}`).join(" ")]);
  return [
    el("h1", {}, "run ", doc.run_id),
    el("p", { class: "muted" }, `${doc.job || "?"} on ${doc.cluster || "?"} (${doc.accelerator_type || "?"} in ${doc.zone || "?"})`,
      doc.reason ? " - " + doc.reason : ""),
    cards, estimateBasis(doc.estimate), charts,
    el("h2", {}, "timeline"),
    el("p", { class: "muted legend" }, el("span", {}, "shaded: time lost to preemptions, from the preemption to the first new step"),
      doc.goodput ? el("span", {}, "under the axis: the wall time by cause, then each preemption's phases") : null),
    timeline(doc),
    goodputSection(doc.goodput),
    el("h2", {}, "spend by state"),
    doc.spend.hourly_usd === null ? el("p", { class: "muted" }, "no list price for this TPU type") : null,
    spendBar(doc.spend),
    el("p", { class: "legend" }, doc.spend.by_state.map((r) => el("span", {}, el("i", { class: "sw-" + r.state }), r.state))),
    table(["state", { label: "time", num: true }, { label: "at list price", num: true }], spendRows),
    el("h2", {}, "TensorBoard"),
    el("p", {}, "every step's scalars: ", el("code", {}, "tensorboard --logdir " + (doc.logdir || "?"))),
    el("h2", {}, "events"),
    table(["time", "event", "details"], evRows),
  ];
}

function sweepView(doc) {
  const keys = doc.params;
  const rows = doc.trials.map((t) => [t.best ? "\u2605 " + t.trial : String(t.trial), state(t.state), fmt(t.metric),
    ...keys.map((k) => (t.params[k] === undefined ? "-" : String(t.params[k]))), fmt(t.steps, 0), fmt(t.preemptions, 0), money(t.cost_usd),
    t.run ? runLink(t.run) : "-"]);
  const numeric = keys.filter((k) => doc.trials.some((t) => typeof t.params[k] === "number"));
  return [
    el("h1", {}, "sweep ", doc.sweep_id),
    el("p", { class: "muted" }, `${doc.method || "?"}, ${doc.goal} ${doc.metric || "?"}; spent ${money(doc.cost_usd)}`,
      doc.budget_usd ? ` of ${money(doc.budget_usd)}` : "", doc.reason ? " - " + doc.reason : ""),
    el("div", { class: "cards" }, card("state", state(doc.state)), card("trials", `${doc.trials.length} / ${fmt(doc.max_trials, 0)}`),
      card("best", doc.best === null ? "-" : `trial ${doc.best}`)),
    el("h2", {}, `${doc.metric || "metric"} by hyperparameter`),
    el("div", { class: "grid" }, numeric.map((k) => scatter(doc.trials, k, doc.metric))),
    el("h2", {}, "trials"),
    table(["trial", "state", { label: doc.metric || "metric", num: true }, ...keys, { label: "steps", num: true },
      { label: "preemptions", num: true }, { label: "cost", num: true }, "run"], rows, (i) => (doc.trials[i].best ? "best" : null)),
  ];
}

// ---- routing and refresh -----------------------------------------------------------------------

async function render() {
  const main = document.getElementById("main");
  const hash = location.hash || "#/";
  let nodes;
  try {
    const m = hash.match(/^#\/(run|sweep)\/([a-z0-9-]+)$/);
    if (m) {
      const doc = await getJSON(`/api/${m[1]}s/${m[2]}`);
      nodes = m[1] === "run" ? runView(doc) : sweepView(doc);
    } else {
      const doc = await getJSON("/api/overview");
      document.getElementById("where").textContent = `provider ${doc.provider}` + (doc.project ? `, project ${doc.project}` : "");
      nodes = overview(doc);
    }
  } catch (err) {
    nodes = [el("p", { class: "err" }, String(err.message || err))];
  }
  main.replaceChildren(...nodes.flat().filter((n) => n !== null && n !== undefined));
  document.getElementById("refreshed").textContent = "refreshed " + new Date().toLocaleTimeString();
  document.body.setAttribute("data-rendered", hash);
}

window.addEventListener("hashchange", render);
window.addEventListener("DOMContentLoaded", () => { render(); setInterval(render, REFRESH_MS); });
