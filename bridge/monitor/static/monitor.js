// The monitor page: one WebSocket from the bridge (state at up to 10 Hz, preview images when asked), buttons
// through the bridge's small JSON API. Nothing is loaded from anywhere but the bridge itself.
"use strict";

const $ = (id) => document.getElementById(id);
const COLORS = ["#4fb3ff", "#3ecf8e", "#f5c451", "#ff6b6b", "#c792ea", "#ff9f43", "#54e1e6", "#a3be8c", "#e06c75"];
const HISTORY = 300;  // graph points kept (30 s at 10 Hz)
const SLOW_MS = 500;  // tables and graphs redraw at most twice a second; bars and faces at every update
const page = { names: [], emotions: [], visemes: [], fps: [], stages: {}, preview: false, recording: null,
               meta: null, ws: null, slowAt: -Infinity, counts: { state: 0, preview: 0 }, pendingState: null,
               pendingImage: null, renderQueued: false, awaitingImage: false };
window.monitorCounts = page.counts;  // updates drawn, for tests and the benchmark

// Left and right shapes side by side (eyeBlinkLeft beside eyeBlinkRight), the unpaired ones after them; each row
// keeps the index of its value in the stream's order.
function paired(names) {
  const at = new Map(names.map((n, i) => [n, i])), pairs = [], single = [];
  for (const [i, n] of names.entries()) {
    const right = n.endsWith("Left") ? at.get(n.slice(0, -4) + "Right") : undefined;
    if (right !== undefined) pairs.push(i, right);
    else if (!(n.endsWith("Right") && at.has(n.slice(0, -5) + "Left"))) single.push(i);
  }
  return pairs.concat(single);
}

function bars(container, names, pair) {
  const el = $(container);
  el.innerHTML = "";
  for (const i of pair ? paired(names) : names.keys()) {
    const n = names[i], row = document.createElement("div");
    row.className = "row"; row.dataset.name = n; row.dataset.index = i;
    row.innerHTML = `<span class="name" title="${n}">${n}</span><span class="bar"><span class="fill"></span></span>` +
                    `<span class="value">0.00</span>`;
    el.appendChild(row);
  }
}

// Bars move by transform at every update (no layout), and only when their value changed; the numbers beside
// them change text, which lays the page out again, so they follow at the slow pace (numbers = true).
function setBars(container, values, numbers) {
  const rows = $(container).children;
  if (!values) return;
  for (const row of rows) {
    const i = Number(row.dataset.index);
    if (!(i < values.length)) continue;
    const v = Math.max(0, Math.min(1, values[i])), text = v.toFixed(2);
    if (row.dataset.value !== text) {
      row.dataset.value = text;
      row.children[1].firstChild.style.transform = `scaleX(${text})`;
    }
    if (numbers && row.children[2].textContent !== text) row.children[2].textContent = text;
  }
}

function setHtml(el, html) { if (el.innerHTML !== html) el.innerHTML = html; }
function setText(id, text) { const el = $(id); if (el.textContent !== text) el.textContent = text; }

function kv(table, pairs) {
  setHtml($(table), pairs.map(([k, v]) => `<tr><td>${k}</td><td>${v}</td></tr>`).join(""));
}

function esc(s) {
  return String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
}

function graph(canvas, series, maxFloor) {
  const g = canvas.getContext("2d"), W = canvas.width, H = canvas.height;
  g.clearRect(0, 0, W, H);
  let max = maxFloor;
  for (const s of series) for (const v of s.values) max = Math.max(max, v);
  max *= 1.1;
  g.strokeStyle = "#2a313b"; g.fillStyle = "#7d8794"; g.font = "10px sans-serif"; g.lineWidth = 1;
  for (const f of [0.5, 1]) {
    const y = H - (H - 4) * f;
    g.beginPath(); g.moveTo(0, y); g.lineTo(W, y); g.stroke();
    g.fillText((max * f).toFixed(max * f < 10 ? 1 : 0), 2, y + 10);
  }
  for (const s of series) {
    g.strokeStyle = s.color; g.lineWidth = 1.5; g.beginPath();
    s.values.forEach((v, i) => {
      const x = W - (s.values.length - 1 - i) * (W / HISTORY), y = H - (H - 4) * (v / max);
      if (i === 0) g.moveTo(x, y); else g.lineTo(x, y);
    });
    g.stroke();
  }
}

function push(list, v) { list.push(v); if (list.length > HISTORY) list.shift(); }

function onState(m) {
  const s = m.stats, f = m.face;
  const now = performance.now(), slow = now - page.slowAt >= SLOW_MS;
  if (f) {
    setBars("bars-blendshapes", f.blendshapes, slow);
    setBars("bars-emotion", f.emotion, slow);
    if (f.visemes) setBars("bars-visemes", f.visemes, slow);
    drawAvatar($("avatar"), page.names, f);
  }
  push(page.fps, s.fps);
  for (const [stage] of Object.entries(s.stage_ms)) if (!page.stages[stage]) page.stages[stage] = [];
  for (const [stage, values] of Object.entries(page.stages)) push(values, (s.stage_ms[stage] || [0])[0]);
  if (!slow) return;
  page.slowAt = now;
  onSlowState(m);
}

// Text, tables and graphs: at most twice a second (each text change lays the page out again).
function onSlowState(m) {
  const s = m.stats, f = m.face;
  setText("fps", s.fps.toFixed(1));
  setText("latency", `${s.latency_ms_p50.toFixed(1)} / p99 ${s.latency_ms_p99.toFixed(1)}`);
  setText("backend", (m.backends || []).join(", ") || "–");
  const installed = Object.entries(s.releases || {}).filter(([, r]) => r).map(([k, r]) => `${k} r${r}`).join(", ");
  const rolled = Object.entries(s.rolled_back || {}).map(([k, r]) => `${k} r${r}`).join(", ");
  setText("release", `release ${installed || "shipped"}` + (s.update_status !== "none" ? ` · ${s.update_status}` : "")
    + (rolled ? ` · rolled back ${rolled}` : ""));
  const found = f && f.face_found;
  setText("face", f ? (found ? `face ${(100 * f.confidence).toFixed(0)}%` : "no face") : "waiting for the first frame");
  const pill = "pill " + (found ? "good" : "bad");
  if ($("face").className !== pill) $("face").className = pill;
  if (f) {
    if ($("visemes-card").hidden !== !f.visemes) $("visemes-card").hidden = !f.visemes;
    const deg = (a) => a.map((v) => v.toFixed(1)).join(" / ");
    kv("pose", [["head yaw / pitch / roll", deg(f.head_rotation) + "°"], ["head x / y / z", deg(f.head_translation) + " cm"],
                ["gaze left (yaw / pitch)", deg(f.eye_left) + "°"], ["gaze right", deg(f.eye_right) + "°"],
                ["frame", f.seq]]);
  }
  graph($("graph-fps"), [{ values: page.fps, color: COLORS[0] }], 10);
  const stages = Object.keys(page.stages).filter((k) => k !== "capture_to_send");
  graph($("graph-latency"), stages.map((k, i) => ({ values: page.stages[k], color: COLORS[i % COLORS.length] })), 1);
  setHtml($("legend"), stages.map((k, i) =>
    `<span><i style="background:${COLORS[i % COLORS.length]}"></i>${esc(k)} ${(s.stage_ms[k] || [0])[0].toFixed(1)}</span>`).join(""));
  setHtml($("sinks").tBodies[0], Object.entries(s.sinks).map(([name, v]) =>
    `<tr data-sink="${esc(name)}"><td>${esc(name)}</td><td>${esc(v.destination || "")}</td><td>${v.sent}</td>` +
    `<td class="${v.errors ? "err" : ""}">${v.errors}</td></tr>`).join(""));
  const dropped = Object.entries(s.dropped).map(([k, v]) => `${k} ${v}`).join(", ");
  kv("counters", [["frames captured / sent", `${s.captured} / ${s.sent}`], ["dropped", dropped],
                  ["bad frames", s.bad_frames], ["face lost (last seconds)", `${(100 * s.face_lost_ratio).toFixed(0)}%`],
                  ["uptime", `${s.uptime_s.toFixed(0)} s`]]);
  const guarded = Object.entries(s.guarded).map(([k, v]) => `${esc(k)} ${v}`).join(", ") || "none";
  const recreated = Object.entries(s.recreated).map(([k, v]) => `${esc(k)} ${v}`).join(", ") || "none";
  kv("guard", [["frames replaced", s.guarded_total], ["by reason / stage", guarded], ["sessions recreated", recreated],
               ["last event", esc(s.last_guard || "–")]]);
  const models = Object.entries(m.models || {}).map(([k, v]) => [esc(k), esc(v)]);
  kv("models", [["source", esc((m.sources || []).join(", "))], ["models loaded", s.models_loaded ? "yes" : "no"],
                ["engine builds / swaps", `${sum(s.engine_builds)} / ${sum(s.engine_swaps)}`], ...models]);
  page.recording = m.recording;
  setText("record", m.recording ? "Stop recording" : "Record");
  $("record").classList.toggle("on", !!m.recording);
  for (const id of ["calibrate", "record"]) $(id).hidden = !m.controls;
}

function sum(d) { return Object.values(d || {}).reduce((a, b) => a + b, 0); }

// Everything that arrives is only kept; one render per animation frame draws the newest state and image together,
// so the browser paints at most once per update however the messages come (each paint of the page costs far
// more than the drawing in it).
function schedule() {
  if (!page.renderQueued) { page.renderQueued = true; requestAnimationFrame(render); }
}

function render() {
  page.renderQueued = false;
  const state = page.pendingState, image = page.pendingImage;
  page.pendingState = page.pendingImage = null;
  if (state) onState(state);
  if (image) drawPreview(image.bitmap, image.meta);
}

async function onPreview(blob) {
  const meta = page.meta;
  if (!meta || !page.preview) return;
  page.awaitingImage = false;
  const bitmap = await createImageBitmap(blob);
  if (page.pendingImage) page.pendingImage.bitmap.close();
  page.pendingImage = { bitmap, meta };
  schedule();
}

function drawPreview(image, meta) {
  const canvas = $("preview");
  if (!page.preview) { image.close(); return; }
  if (canvas.width !== meta.width || canvas.height !== meta.height) {
    canvas.width = meta.width; canvas.height = meta.height;
  }
  const g = canvas.getContext("2d");
  g.drawImage(image, 0, 0);
  image.close();
  const p = meta.landmarks;
  if (p) {
    g.fillStyle = "#3ecf8e";
    g.beginPath();  // one path for the 468 points: one fill instead of 468
    for (let i = 0; i < p.length; i += 2) g.rect(p[i] - 0.5, p[i + 1] - 0.5, 1.5, 1.5);
    g.fill();
    drawAxes(g, p[2], p[3], meta.head_rotation, Math.abs(p[2 * 454] - p[2 * 234]) * 0.6);
  }
  setText("preview-info", p ? "" : "no face");  // no changing text per image: it would lay the page out
  canvas.dataset.frames = String(Number(canvas.dataset.frames || 0) + 1);
  page.counts.preview += 1;
}

// Head axes from yaw / pitch / roll (FaceFrame conventions) in camera space (x right, y down, z away from the
// camera), drawn from the nose tip: red = the subject's left, green = up, blue = where the face points.
function drawAxes(g, x0, y0, ypr, length) {
  const [yaw, pitch, roll] = ypr.map((a) => a * Math.PI / 180);
  const rot = (v) => {
    let [x, y, z] = v;
    [x, z] = [x * Math.cos(yaw) - z * Math.sin(yaw), x * Math.sin(yaw) + z * Math.cos(yaw)];  // yaw about up
    [y, z] = [y * Math.cos(pitch) + z * Math.sin(pitch), -y * Math.sin(pitch) + z * Math.cos(pitch)];
    [x, y] = [x * Math.cos(roll) - y * Math.sin(roll), x * Math.sin(roll) + y * Math.cos(roll)];
    return [x, y];
  };
  const axes = [[[1, 0, 0], "#ff6b6b"], [[0, -1, 0], "#3ecf8e"], [[0, 0, -1], "#4fb3ff"]];
  g.lineWidth = 3;
  for (const [v, color] of axes) {
    const [dx, dy] = rot(v);
    g.strokeStyle = color; g.beginPath(); g.moveTo(x0, y0); g.lineTo(x0 + dx * length, y0 + dy * length); g.stroke();
  }
}

function say(text) { $("message").textContent = text; }

async function api(path, body) {
  const r = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json" },
                                body: JSON.stringify(body || {}) });
  const data = await r.json();
  if (!r.ok) throw new Error(`${data.error}; ${data.fix}`);
  return data;
}

function connect() {
  const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`);
  ws.binaryType = "blob";
  page.ws = ws;
  ws.onopen = () => {
    $("connection").textContent = "live"; $("connection").className = "pill good";
    if (page.preview) ws.send(JSON.stringify({ preview: true }));
  };
  ws.onclose = () => {
    $("connection").textContent = "disconnected"; $("connection").className = "pill bad";
    setTimeout(connect, 1000);
  };
  ws.onmessage = (ev) => {
    if (typeof ev.data !== "string") { onPreview(ev.data); return; }
    onMessage(JSON.parse(ev.data));
  };
}

function onMessage(m) {
  if (m.type === "hello") {
    if (page.names.join() !== m.blendshapes.join()) {  // the page drawn with the initial state keeps its rows
      page.names = m.blendshapes; page.emotions = m.emotions; page.visemes = m.visemes;
      bars("bars-blendshapes", m.blendshapes, true); bars("bars-emotion", m.emotions);
      bars("bars-visemes", m.visemes, true);
    }
    $("subject").textContent = m.subject || "FaceBridge";
  } else if (m.type === "state") {
    page.counts.state += 1;
    page.pendingState = m;
    if (!page.awaitingImage) schedule();
    else setTimeout(schedule, 150);  // the image that goes with it is late or lost: draw the state anyway
  } else if (m.type === "preview") {
    page.meta = m;
    page.awaitingImage = page.preview;  // the state and the JPEG follow: one paint for the three
  }
}

// The page arrives with the bridge's last state in it: drawn at once, before the WebSocket connects.
function showInitial() {
  const el = $("initial");
  if (!el) return;
  for (const m of JSON.parse(el.textContent)) onMessage(m);
  setText("connection", "connecting");
}

$("preview-toggle").onclick = () => {
  page.preview = !page.preview;
  $("preview-toggle").textContent = page.preview ? "Preview on" : "Preview off";
  $("preview-toggle").classList.toggle("on", page.preview);
  if (page.ws && page.ws.readyState === WebSocket.OPEN) page.ws.send(JSON.stringify({ preview: page.preview }));
  if (!page.preview) $("preview").getContext("2d").clearRect(0, 0, $("preview").width, $("preview").height);
};

$("calibrate").onclick = async () => {
  $("calibrate").disabled = true;
  say("calibrating: hold a neutral face and look at the camera…");
  try { say((await api("/api/calibrate")).message); } catch (e) { say(String(e.message)); }
  $("calibrate").disabled = false;
};

$("record").onclick = async () => {
  try { say((await api("/api/record", { on: !page.recording })).message); } catch (e) { say(String(e.message)); }
};

showInitial();
connect();
