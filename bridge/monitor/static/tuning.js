// The tuning panel: one subject's blendshape mapping tuned while the stream runs (bridge/monitor/tuning_api.py).
// Each blendshape's bar shows what the avatar gets (after the mapping) and a peak-hold marker at the highest weight
// measured (before it), so weak shapes show; the sliders change the selected shape's gain, dead zone and curve at
// once; Ranges walks through the expressions and sets gains so each full expression reaches 1.0; Save stores the
// mapping in the subject's profile. It keeps to its own card and its own names (monitor.js is not touched).
"use strict";

(() => {
  const el = (id) => document.getElementById(id);
  const POLL_MS = 250;
  const state = { names: [], mapping: {}, selected: "eyeBlinkLeft", sending: null, busy: false, edits: 0 };
  window.tuningStepMs = window.tuningStepMs || 4000;  // each expression of the range walk-through

  function tell(text) { el("message").textContent = text; }

  async function post(path, body) {
    const r = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json" },
                                  body: JSON.stringify(body || {}) });
    const data = await r.json();
    if (!r.ok) throw new Error(`${data.error}. ${data.fix}`);
    return data;
  }

  function build(names) {
    const bars = el("tuning-bars"), select = el("tuning-shape");
    bars.innerHTML = ""; select.innerHTML = "";
    // the blendshape card's order (monitor.js `paired`: each Left beside its Right) where the page has it
    const order = typeof paired === "function" ? paired(names) : [...names.keys()];
    for (const i of order) {
      const n = names[i], row = document.createElement("div");
      row.className = "row tuning-row"; row.dataset.name = n; row.dataset.index = i;
      row.innerHTML = `<span class="name" title="${n}">${n}</span>` +
        `<span class="bar"><span class="fill"></span><span class="peak" title="peak before the mapping"></span></span>` +
        `<span class="value">0.00</span>`;
      row.onclick = () => select_(n);
      bars.appendChild(row);
      const option = document.createElement("option");
      option.value = n; option.textContent = n;
      select.appendChild(option);
    }
    select_(state.selected);
  }

  function settings(name) {
    const s = (state.mapping.blendshapes || {})[name] || {};
    return { gain: s.gain ?? 1, dead_zone: s.dead_zone ?? 0, gamma: s.gamma ?? 1 };
  }

  function showSliders() {
    const s = settings(state.selected);
    for (const [id, key] of [["tuning-gain", "gain"], ["tuning-dead", "dead_zone"], ["tuning-gamma", "gamma"]]) {
      if (document.activeElement !== el(id)) el(id).value = s[key];
      el(id).nextElementSibling.textContent = Number(el(id).value).toFixed(2);
    }
  }

  function select_(name) {
    state.selected = name;
    el("tuning-shape").value = name;
    for (const row of el("tuning-bars").children) row.classList.toggle("selected", row.dataset.name === name);
    showSliders();
  }

  function draw(view, current) {
    if (state.names.length !== view.names.length) { state.names = view.names; build(view.names); }
    // a view asked for before the newest slider change (or while it is on its way) would put the old values back
    // on the sliders, and the next change would send them: the mapping is taken only from a current view
    if (current) state.mapping = view.mapping;
    el("tuning-subject").textContent = view.subject;
    const rows = el("tuning-bars").children;
    for (const row of rows) {
      const i = Number(row.dataset.index);
      const v = Math.max(0, Math.min(1, view.mapped[i])), p = Math.max(0, Math.min(1, view.peaks[i]));
      row.children[1].children[0].style.transform = `scaleX(${v.toFixed(3)})`;
      row.children[1].children[1].style.left = `${(p * 100).toFixed(1)}%`;
      row.children[1].children[1].dataset.peak = p.toFixed(3);
      row.children[2].textContent = v.toFixed(2);
    }
    state.steps = view.steps;
    if (current) showSliders();
  }

  async function poll() {
    try {
      const edits = state.edits, r = await fetch(`/api/tuning`);
      if (r.ok) { const view = await r.json(); draw(view, !state.busy && edits === state.edits); }
    } catch (e) { /* the bridge went away: monitor.js says so */ }
    setTimeout(poll, POLL_MS);
  }

  function changed() {  // one request in flight; the newest values win
    state.edits += 1;
    for (const id of ["tuning-gain", "tuning-dead", "tuning-gamma"]) {
      el(id).nextElementSibling.textContent = Number(el(id).value).toFixed(2);
    }
    state.sending = { name: state.selected, gain: Number(el("tuning-gain").value),
                      dead_zone: Number(el("tuning-dead").value), gamma: Number(el("tuning-gamma").value) };
    if (!state.busy) send();
  }

  async function send() {
    state.busy = true;
    while (state.sending) {
      const body = state.sending; state.sending = null;
      try { state.mapping = (await post("/api/tuning/shape", body)).mapping; } catch (e) { tell(e.message); }
    }
    state.busy = false;
  }

  const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

  async function ranges() {
    const button = el("tuning-ranges");
    button.disabled = true;
    try {
      await post("/api/tuning/peaks/reset");
      for (const [prompt] of state.steps || []) {
        el("tuning-step").textContent = `Now ${prompt}, and hold it...`;
        await sleep(window.tuningStepMs);
      }
      el("tuning-step").textContent = "";
      tell((await post("/api/tuning/ranges")).message);
    } catch (e) { tell(e.message); }
    button.disabled = false;
  }

  window.addEventListener("DOMContentLoaded", () => {
    for (const id of ["tuning-gain", "tuning-dead", "tuning-gamma"]) el(id).addEventListener("input", changed);
    el("tuning-shape").addEventListener("change", (e) => select_(e.target.value));
    el("tuning-ranges").onclick = ranges;
    el("tuning-reset-peaks").onclick = () => post("/api/tuning/peaks/reset").catch((e) => tell(e.message));
    el("tuning-save").onclick = async () => {
      try { tell((await post("/api/tuning/save")).message); } catch (e) { tell(e.message); }
    };
    poll();
  });
})();
