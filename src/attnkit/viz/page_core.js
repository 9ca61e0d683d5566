// attnkit.viz interactive page, part 1 of 6: data, state, colours, colour bars, legend.
// The page's scripts (page_core, page_lines, page_heat, page_model, page_neuron,
// page_main) are concatenated into one function by attnkit.viz.AttentionView: they share
// these names. Self-contained: no network, no libraries.
const data = JSON.parse(document.getElementById("ak-data").textContent);
const $ = (id) => document.getElementById(id);
const root = $("ak-root"), info = $("ak-info"), canvas = $("ak-canvas");
const ctx = canvas.getContext("2d", { willReadFrequently: true });
const ui = {
  sentence: $("ak-sentence"), view: $("ak-view"), layer: $("ak-layer"),
  combine: $("ak-combine"), query: $("ak-query"), scale: $("ak-scale"),
  threshold: $("ak-threshold"), legend: $("ak-legend"), colorbar: $("ak-colorbar"),
};
const VIEW_NAMES = ["head", "heatmap", "model", "neuron", "rollout", "flow"];
const state = {
  sentence: 0, view: "head", layer: 0, heads: [0], combine: "colour", query: 0,
  focus: [0, 0],  // the model view's keyboard focus: [layer, head]
};
let current = null;  // what is drawn: {values, argmax, max, label, ...}
let base = null;     // the cached drawing, for hover: {image, faded, g, kind}
let renders = 0;
const cache = new Map();

function sentence() { return data.sentences[state.sentence]; }
function tokensQ() { return sentence().queries; }
function tokensK() { return sentence().keys; }

// ---- decoding: base64, then deflate (DecompressionStream) unless written uncompressed ----
async function unpack(text, key) {
  if (cache.has(key)) return cache.get(key);
  const raw = atob(text);
  let bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  if (data.encoding === "u8-deflate") {
    if (typeof DecompressionStream === "undefined") {
      throw new Error("this browser lacks DecompressionStream (Chrome 80+, Firefox 113+, " +
        "Safari 16.4+); write the page with AttentionView(..., compress=False)");
    }
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    bytes = new Uint8Array(await new Response(stream).arrayBuffer());
  }
  cache.set(key, bytes);
  return bytes;
}

// The entry a view reads: a layer (head, heatmap, model, neuron), the rollout or the flow.
function entryOf(view, layer) {
  const s = sentence();
  if (view === "rollout") return s.rollout;
  if (view === "flow") return s.flow && s.flow.data ? s.flow : null;
  return s.layers[layer];
}
function entryKey(view, layer) {
  return state.sentence + "/" + (view === "rollout" || view === "flow" ? view : "layer " + layer);
}

// The (L, S) matrix of the selected heads of an entry, combined: one head as it is; several
// by "mean", "max" or "colour" (the strongest head per pair: argmax says which).
async function matrix(entry, key, heads, combine) {
  const bytes = await unpack(entry.data, key);
  const L = tokensQ().length, S = tokensK().length, n = L * S, scales = entry.scales;
  const values = new Float32Array(n);
  let argmax = null;
  if (heads.length === 1) {
    const h = heads[0], f = scales[h] / 255, off = h * n;
    for (let i = 0; i < n; i++) values[i] = bytes[off + i] * f;
  } else {
    if (combine === "colour") argmax = new Uint8Array(n).fill(heads[0]);
    for (const h of heads) {
      const f = scales[h] / 255, off = h * n;
      for (let i = 0; i < n; i++) {
        const v = bytes[off + i] * f;
        if (combine === "mean") values[i] += v / heads.length;
        else if (v > values[i]) { values[i] = v; if (argmax) argmax[i] = h; }
      }
    }
  }
  let max = 0;
  for (let i = 0; i < n; i++) if (values[i] > max) max = values[i];
  return { values, argmax, max: max || 1, heads: entry.heads.length, L, S };
}

// ---- colours ----
const BLUE = [8, 48, 107], PURPLE = [63, 0, 125], GREY = [36, 41, 47];
const NEG = [33, 102, 172], POS = [178, 24, 43];  // diverging: blue < 0 < red
function headColor(h, H) {  // a distinct, saturated hue per head (HSL, lightness 0.45)
  const deg = (360 * h) / Math.max(1, H), s = 0.75, l = 0.45, a = s * Math.min(l, 1 - l);
  const f = (n) => {
    const k = (n + deg / 30) % 12;
    return Math.round(255 * (l - a * Math.max(-1, Math.min(k - 3, 9 - k, 1))));
  };
  return [f(0), f(8), f(4)];
}
function mix(rgb, t) {  // white (t = 0) to rgb (t = 1)
  return [255 + (rgb[0] - 255) * t, 255 + (rgb[1] - 255) * t, 255 + (rgb[2] - 255) * t];
}
function shade(v, max) {  // 0 .. 1 on the chosen colour scale
  const t = Math.max(0, Math.min(1, v / max));
  return ui.scale.value === "sqrt" ? Math.sqrt(t) : t;
}
function css(rgb, alpha) {
  const c = rgb.map(Math.round).join(",");
  return alpha === undefined ? "rgb(" + c + ")" : "rgba(" + c + "," + alpha.toFixed(3) + ")";
}
// The base colour of a drawing: the one head's colour, blue for mean/max, purple for the
// rollout and the flow; "colour" (several heads) has one per head (the legend).
function baseColor(m) {
  if (state.view === "rollout" || state.view === "flow") return PURPLE;
  if (state.heads.length === 1) return headColor(state.heads[0], m.heads);
  return state.combine === "colour" ? GREY : BLUE;
}
function pairColor(m, k, t) {
  return mix(m.argmax ? headColor(m.argmax[k], m.heads) : baseColor(m), t);
}

// ---- canvas ----
function sizeCanvas(w, h) {
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.max(1, Math.ceil(w * dpr));
  canvas.height = Math.max(1, Math.ceil(h * dpr));
  canvas.style.width = Math.ceil(w) + "px";
  canvas.style.height = Math.ceil(h) + "px";
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
}
function snapshot() { return ctx.getImageData(0, 0, canvas.width, canvas.height); }
function fmt(v) {
  const a = Math.abs(v);
  return a !== 0 && (a < 0.001 || a >= 1000) ? v.toExponential(1) : v.toFixed(a < 1 ? 3 : 2);
}

// ---- colour bars: one per colour scale on screen, with tick labels in data units ----
// bar: {label, kind: "ramp" | "diverging", rgb, max, sqrt}
function colorBars(bars) {
  ui.colorbar.textContent = "";
  for (const bar of bars) {
    const box = document.createElement("div"), title = document.createElement("div");
    box.className = "ak-bar";
    box.dataset.kind = bar.kind;
    title.textContent = bar.label;
    const c = document.createElement("canvas"), width = 180;
    c.width = width;
    c.height = 10;
    const g = c.getContext("2d");
    for (let x = 0; x < width; x++) {
      const f = x / (width - 1);
      if (bar.kind === "diverging") {
        const t = Math.abs(2 * f - 1);
        g.fillStyle = css(mix(f < 0.5 ? NEG : POS, t));
      } else {
        g.fillStyle = css(mix(bar.rgb, bar.sqrt ? Math.sqrt(f) : f));
      }
      g.fillRect(x, 0, 1, 10);
    }
    const ticks = document.createElement("div");
    ticks.className = "ticks";
    ticks.style.width = width + "px";
    const values = bar.kind === "diverging" ? [-bar.max, 0, bar.max]
      : [0, 0.25, 0.5, 0.75, 1].map((f) => f * bar.max);
    for (const v of values) {
      const span = document.createElement("span");
      const f = bar.kind === "diverging" ? (v / bar.max + 1) / 2 : v / bar.max;
      span.style.left = (100 * f) + "%";
      span.textContent = fmt(v);
      ticks.appendChild(span);
    }
    box.append(title, c, ticks);
    ui.colorbar.appendChild(box);
  }
}

// ---- the legend: one button per head, its colour; click toggles, shift-click alone ----
function fillLegend() {
  const entry = sentence().layers[state.layer], H = entry.heads.length;
  const show = ["head", "heatmap", "neuron"].includes(state.view) && H > 0;
  ui.legend.classList.toggle("hidden", !show);
  ui.legend.textContent = "";
  if (!show) return;
  entry.heads.forEach((name, h) => {
    const b = document.createElement("button");
    b.type = "button";
    b.dataset.head = String(h);
    b.setAttribute("aria-pressed", String(state.heads.includes(h)));
    b.title = "click: show or hide this head; shift-click: this head alone";
    const sw = document.createElement("span");
    sw.className = "swatch";
    sw.style.background = css(headColor(h, H));
    b.append(sw, document.createTextNode(name));
    b.addEventListener("click", (ev) => {
      if (ev.shiftKey || state.view === "neuron") state.heads = [h];
      else if (state.heads.includes(h)) state.heads = state.heads.filter((x) => x !== h);
      else state.heads = [...state.heads, h].sort((a, c) => a - c);
      render();
    });
    ui.legend.appendChild(b);
  });
  for (const [label, heads] of [["all", entry.heads.map((_, h) => h)], ["none", []]]) {
    const b = document.createElement("button");
    b.type = "button";
    b.dataset.head = label;
    b.textContent = label;
    b.addEventListener("click", () => { state.heads = heads; render(); });
    ui.legend.appendChild(b);
  }
  const hint = document.createElement("span");
  hint.className = "hint";
  hint.textContent = state.view === "neuron" ? "the neuron view shows one head"
    : "shift-click: one head alone";
  ui.legend.appendChild(hint);
}
