// agentprm's run viewer: draws the record agentprm/view/collect.py embeds in the page (#run-data). No network,
// no server: everything it needs is in this file.
"use strict";
const DATA = JSON.parse(document.getElementById("run-data").textContent);
const COLORS = ["#3465a4", "#cc0000", "#4e9a06", "#f57900", "#75507b", "#c4a000", "#06989a", "#555753"];
const charts = {};

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}
const pct = (x) => (100 * x).toFixed(1);
const ci = (pair) => `[${pct(pair[0])}, ${pct(pair[1])}]`;
const signed = (x) => (x > 0 ? "+" : "") + pct(x);
const outcome = (e) => (e.error ? "error" : e.won ? "won" : "lost");

// Chart.js has no error bars of its own: a dataset's `ci` ([low, high] per point, in its y units) is drawn here.
const errorBars = {
  id: "errorBars",
  afterDatasetsDraw(chart) {
    const { ctx, scales } = chart;
    chart.data.datasets.forEach((ds, i) => {
      if (!ds.ci || chart.getDatasetMeta(i).hidden) return;
      ctx.save();
      ctx.strokeStyle = ds.borderColor;
      ds.data.forEach((p, k) => {
        if (!ds.ci[k]) return;
        const x = scales.x.getPixelForValue(p.x);
        const [lo, hi] = ds.ci[k].map((v) => scales.y.getPixelForValue(v));
        ctx.beginPath();
        ctx.moveTo(x, lo); ctx.lineTo(x, hi);
        ctx.moveTo(x - 4, lo); ctx.lineTo(x + 4, lo);
        ctx.moveTo(x - 4, hi); ctx.lineTo(x + 4, hi);
        ctx.stroke();
      });
      ctx.restore();
    });
  },
};

function lineChart(id, datasets, xTitle, yTitle, extra = {}) {
  if (charts[id]) charts[id].destroy();
  const canvas = document.getElementById(id);
  datasets.forEach((d, i) => {
    d.borderColor = d.borderColor || COLORS[i % COLORS.length];
    d.backgroundColor = d.borderColor;
  });
  charts[id] = new Chart(canvas, {
    type: "line",
    data: { datasets },
    options: {
      animation: false, parsing: false, responsive: true,
      scales: { x: { type: "linear", title: { display: true, text: xTitle }, ticks: { precision: 0 } },
                y: { title: { display: true, text: yTitle }, ...(extra.y || {}) } },
      plugins: { legend: { labels: { boxWidth: 10, font: { size: 11 } } } },
    },
    plugins: [errorBars],
  });
  return charts[id];
}

function header() {
  const r = DATA.run;
  document.getElementById("run-title").textContent = `agentprm run ${r.dir}`;
  const versions = Object.entries(r.versions).map(([k, v]) => `${k} ${v}`).join(", ");
  document.getElementById("run-meta").textContent =
    `algorithm ${r.algo}, seed ${r.seed}, ${r.iterations} iteration(s), γ = ${r.gamma}; ` +
    `wall time ${Math.round(r.wall_seconds || 0)} s; revision ${r.git_revision || "unknown"}. ${versions}`;
}

function resultsTables() {
  const body = document.querySelector("#results tbody");
  const saved = {};
  for (const e of DATA.episodes) saved[e.row] = (saved[e.row] || 0) + 1;
  for (const r of DATA.rows) {
    body.append(el("tr", {}, el("td", { text: r.name }), el("td", { class: "num", text: r.iteration }),
      el("td", { text: r.acts_by }), el("td", { class: "num", text: pct(r.success_rate) }),
      el("td", { class: "num", text: ci(r.ci95) }), el("td", { class: "num", text: r.episodes }),
      el("td", { class: "num", text: saved[r.name] || 0 })));
  }
  const comp = document.querySelector("#comparisons tbody");
  for (const c of DATA.comparisons) {
    const resolved = c.ci95[0] > 0 || c.ci95[1] < 0;
    const cls = resolved ? (c.delta > 0 ? "up" : "down") : "";
    comp.append(el("tr", { class: resolved ? "significant" : "" }, el("td", { text: c.a }), el("td", { text: c.b }),
      el("td", { class: `num ${cls}`, text: signed(c.delta) }),
      el("td", { class: "num", text: `[${signed(c.ci95[0])}, ${signed(c.ci95[1])}]` }),
      el("td", { class: "num", text: c.tasks })));
  }
}

function curves() {
  const groups = {};
  for (const r of DATA.rows) (groups[r.acts_by] = groups[r.acts_by] || []).push(r);
  lineChart("chart-success", Object.entries(groups).map(([label, rows]) => {
    rows = rows.slice().sort((a, b) => a.iteration - b.iteration);
    return { label, data: rows.map((r) => ({ x: r.iteration, y: 100 * r.success_rate })),
             ci: rows.map((r) => r.ci95.map((v) => 100 * v)) };
  }), "iteration", "success %", { y: { min: 0, max: 100 } });

  const curve = DATA.curve || [];
  if (curve.length) lineChart("chart-curve", [{ label: "greedy π_i", data: curve.map((c) => ({ x: c.env_steps,
    y: 100 * c.success_rate })), ci: curve.map((c) => c.ci95.map((v) => 100 * v)) }], "env steps", "success %",
    { y: { min: 0, max: 100 } });
  else document.getElementById("fig-curve").hidden = true;

  const prm = DATA.curves.prm;
  const metrics = ["heldout_pairwise_accuracy", "heldout_spearman", "train_pairwise_accuracy"];
  lineChart("chart-prm", metrics.filter((m) => prm.some((p) => p[m] != null)).map((m) => ({
    label: m.replace("_", " ").replace("_", " "),
    data: prm.filter((p) => p[m] != null).map((p) => ({ x: p.iteration, y: p[m] })),
  })), "iteration", "metric");

  lineChart("chart-prm-loss", Object.entries(DATA.curves.prm_loss).map(([i, hist]) => ({
    label: `Q_${i}`, data: hist.map((h) => ({ x: h.step, y: h.loss })), pointRadius: 1,
  })), "training step", "loss");

  const update = Object.entries(DATA.curves.update);
  const sets = [];
  for (const [i, hist] of update) {
    const loss = hist.filter((h) => h.loss != null), q = hist.filter((h) => h.prm_mean != null);
    if (loss.length) sets.push({ label: `loss, iter ${i}`, data: loss.map((h) => ({ x: h.step, y: h.loss })) });
    if (q.length) sets.push({ label: `mean Q, iter ${i}`, data: q.map((h) => ({ x: h.step, y: h.prm_mean })),
                              borderDash: [4, 3] });
  }
  lineChart("chart-update", sets, "update step", "value");

  const signals = ["hack_prm", "hack_ens_std", "hack_kl", "hack_spearman", "hack_probe_success"];
  const hacking = [];
  for (const [i, hist] of update) {
    for (const s of signals) {
      const pts = hist.filter((h) => h[s] != null);
      if (pts.length) hacking.push({ label: `${s.slice(5)}, iter ${i}`, data: pts.map((h) => ({ x: h.step, y: h[s] })) });
    }
    const alarms = hist.filter((h) => h.hack_alarm);
    if (alarms.length) hacking.push({ label: `alarm, iter ${i}`, borderColor: "#ff0000", showLine: false,
                                      pointRadius: 6, data: alarms.map((h) => ({ x: h.step, y: 0 })) });
  }
  if (hacking.length) lineChart("chart-hacking", hacking, "update step", "signal");
  else document.getElementById("fig-hacking").hidden = true;
}

// ---------------------------------------------------------------------------------------------- episode browser
function options(select, values, all = "all") {
  select.replaceChildren(el("option", { value: "", text: all }), ...values.map((v) => el("option", { value: v, text: v })));
}

function filtered() {
  const row = document.getElementById("f-row").value, type = document.getElementById("f-type").value;
  const out = document.getElementById("f-outcome").value;
  const text = document.getElementById("f-text").value.trim().toLowerCase();
  return DATA.episodes.filter((e) => (!row || e.row === row) && (!type || e.task_type === type) &&
    (!out || outcome(e) === out) && (!text || e.task.toLowerCase().includes(text)));
}

function listEpisodes() {
  const shown = filtered();
  const body = document.querySelector("#episodes tbody");
  body.replaceChildren(...shown.map((e) => {
    const tr = el("tr", { "data-id": `${e.row}/${e.id}` }, el("td", { text: e.row }), el("td", { text: e.task }),
      el("td", { text: e.task_type.replaceAll("_", " ") }), el("td", { class: outcome(e), text: outcome(e) }),
      el("td", { class: "num", text: e.turns }));
    tr.addEventListener("click", () => { select(tr); openEpisode(e); });
    return tr;
  }));
  document.getElementById("episode-count").textContent = `${shown.length} of ${DATA.episodes.length} episodes`;
}

function select(tr) {
  document.querySelectorAll("#episodes tr.selected").forEach((r) => r.classList.remove("selected"));
  tr.classList.add("selected");
}

// The critic's score of the action taken: its candidate's score, when the agent weighed candidates.
function takenScore(step) {
  const k = step.cands.indexOf(step.action);
  return k >= 0 && step.scores.length ? step.scores[k] : null;
}

function renderEpisode(target, e, chartId) {
  const scored = e.steps.some((s) => takenScore(s) != null);
  const turns = e.steps.map((s, t) => {
    const rows = s.cands.map((c, k) => ({ c, score: s.scores[k] })).sort((a, b) => (b.score ?? 0) - (a.score ?? 0));
    const cands = rows.length ? el("table", { class: "cands" }, el("thead", {}, el("tr", {}, el("th", { text: "candidate" }),
      el("th", { text: "critic score" }))), el("tbody", {}, ...rows.map(({ c, score }) =>
      el("tr", {}, el("td", { class: c === s.action ? "chosen action" : "action", text: c }),
        el("td", { class: c === s.action ? "num chosen" : "num", text: score == null ? "" : score.toFixed(3) }))))) : "";
    return el("div", { class: "turn" },
      el("div", {}, el("b", { text: `turn ${t}` }), ` · MC return ${s.mc.toFixed(3)}`,
         takenScore(s) != null ? ` · Q ${takenScore(s).toFixed(3)}` : ""),
      el("pre", { text: s.obs }),
      el("div", {}, "> ", el("span", { class: s.valid ? "action" : "action invalid", text: s.action })), cands);
  });
  target.replaceChildren(el("div", { class: "episode" },
    el("h3", { text: `${e.row}: ${e.task}` }),
    el("p", { class: "note" }, `${e.task_type} · ${e.task_id} · `, el("span", { class: outcome(e), text: outcome(e) }),
      ` in ${e.turns} turns${e.error ? ` — ${e.error}` : ""}`),
    el("canvas", { id: chartId }), ...turns));
  const sets = [{ label: "MC return from the turn", data: e.steps.map((s, t) => ({ x: t, y: s.mc })) }];
  if (scored) sets.push({ label: "Q of the action taken", data: e.steps.map((s, t) => ({ x: t, y: takenScore(s) }))
                                                              .filter((p) => p.y != null) });
  lineChart(chartId, sets, "turn", "value", { y: { min: 0, max: 1 } });
}

function openEpisode(e) {
  document.getElementById("detail-empty").hidden = true;
  document.getElementById("detail-body").hidden = false;
  renderEpisode(document.getElementById("episode"), e, "chart-episode");
  const others = DATA.episodes.filter((o) => o.task_id === e.task_id && o !== e);
  const compare = document.getElementById("compare");
  compare.replaceChildren(el("option", { value: "", text: "none" }),
    ...others.map((o, k) => el("option", { value: String(k), text: `${o.row} (${outcome(o)}, ${o.turns} turns)` })));
  compare.onchange = () => {
    const other = others[Number(compare.value)];
    const pair = document.querySelector(".pair");
    pair.classList.toggle("two", compare.value !== "");
    if (compare.value === "") document.getElementById("episode-b").replaceChildren();
    else renderEpisode(document.getElementById("episode-b"), other, "chart-episode-b");
  };
  compare.onchange();
}

function browser() {
  options(document.getElementById("f-row"), DATA.rows.filter((r) => r.saved).map((r) => r.name));
  options(document.getElementById("f-type"), [...new Set(DATA.episodes.map((e) => e.task_type))].sort());
  for (const id of ["f-row", "f-type", "f-outcome"]) document.getElementById(id).addEventListener("change", listEpisodes);
  document.getElementById("f-text").addEventListener("input", listEpisodes);
  listEpisodes();
}

header();
resultsTables();
curves();
browser();
