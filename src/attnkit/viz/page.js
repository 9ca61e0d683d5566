// attnkit.viz interactive view: layer and head selection, a token-to-token (lines) view
// and a heatmap view, hover highlighting. Self-contained: no network, no libraries.
// The data (weights at 8 bits per value, relative to each head's maximum) is the JSON
// in #ak-data, written by attnkit.viz.AttentionView.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("ak-data").textContent);
  const $ = (id) => document.getElementById(id);
  const root = $("ak-root"), info = $("ak-info"), canvas = $("ak-canvas");
  const layerSel = $("ak-layer"), headSel = $("ak-head"), viewSel = $("ak-view");
  const thresholdInput = $("ak-threshold"), scaleSel = $("ak-scale");
  const ctx = canvas.getContext("2d", { willReadFrequently: true });
  const Q = data.queries, K = data.keys, L = Q.length, S = K.length;
  const decoded = [];
  let current = null;   // {values, argmax, max, heads, label}
  let base = null;      // cached drawing: {image, faded, geometry}
  let renders = 0;

  $("ak-meta").textContent = data.meta;

  async function bytesOf(index) {
    if (decoded[index]) return decoded[index];
    const text = atob(data.layers[index].data);
    let bytes = new Uint8Array(text.length);
    for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
    if (data.encoding === "u8-deflate") {
      if (typeof DecompressionStream === "undefined") {
        throw new Error("this browser lacks DecompressionStream (Chrome 80+, Firefox 113+, " +
          "Safari 16.4+); write the page with AttentionView(..., compress=False)");
      }
      const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
      bytes = new Uint8Array(await new Response(stream).arrayBuffer());
    }
    decoded[index] = bytes;
    return bytes;
  }

  // The (L, S) matrix of one head, or of "mean" / "max" / "all" heads, as floats.
  async function matrix(layerIndex, head) {
    const layer = data.layers[layerIndex], bytes = await bytesOf(layerIndex);
    const n = L * S, H = layer.heads.length, scales = layer.scales;
    const values = new Float32Array(n);
    let argmax = null;
    if (head === "mean" || head === "max" || head === "all") {
      if (head === "all") argmax = new Uint8Array(n);
      for (let h = 0; h < H; h++) {
        const f = scales[h] / 255, off = h * n;
        for (let i = 0; i < n; i++) {
          const v = bytes[off + i] * f;
          if (head === "mean") values[i] += v / H;
          else if (v > values[i]) { values[i] = v; if (argmax) argmax[i] = h; }
        }
      }
    } else {
      const h = Number(head), f = scales[h] / 255, off = h * n;
      for (let i = 0; i < n; i++) values[i] = bytes[off + i] * f;
    }
    let max = 0;
    for (let i = 0; i < n; i++) if (values[i] > max) max = values[i];
    const label = layer.name + ", " + (head === "all" ? "all heads (colour: strongest)"
      : isNaN(Number(head)) ? head + " of heads" : layer.heads[Number(head)]);
    return { values, argmax, max: max || 1, heads: H, label };
  }

  function fillLayers() {
    data.layers.forEach((layer, i) => layerSel.add(new Option(layer.name, String(i))));
  }

  function fillHeads(keep) {
    const layer = data.layers[Number(layerSel.value)];
    headSel.length = 0;
    layer.heads.forEach((name, h) => headSel.add(new Option(name, String(h))));
    if (layer.aggregates && layer.heads.length > 1) {
      headSel.add(new Option("mean of heads", "mean"));
      headSel.add(new Option("max of heads", "max"));
      headSel.add(new Option("all heads, by colour", "all"));
    }
    const values = Array.from(headSel.options, (o) => o.value);
    headSel.value = values.includes(keep) ? keep : values[0];
  }

  // Colours: a white-to-blue ramp; for "all", the strongest head's hue.
  function ramp(t) {
    return [255 - 247 * t, 255 - 207 * t, 255 - 148 * t];
  }
  function hue(h, H, t) {  // HSL: the head's hue, lightness from white (t = 0) down
    const deg = (360 * h) / Math.max(1, H), light = 1 - 0.5 * t, a = 0.75 * Math.min(light,
      1 - light);
    const f = (n) => {
      const k = (n + deg / 30) % 12;
      return 255 * (light - a * Math.max(-1, Math.min(k - 3, 9 - k, 1)));
    };
    return [f(0), f(8), f(4)];
  }
  function shade(v, m) {  // 0 .. 1 on the chosen colour scale
    const t = v / m.max;
    return scaleSel.value === "sqrt" ? Math.sqrt(t) : t;
  }

  function sizeCanvas(w, h) {
    const dpr = window.devicePixelRatio || 1;
    canvas.width = Math.ceil(w * dpr);
    canvas.height = Math.ceil(h * dpr);
    canvas.style.width = w + "px";
    canvas.style.height = h + "px";
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  }

  function snapshot() {
    return ctx.getImageData(0, 0, canvas.width, canvas.height);
  }

  // ---- token to token (lines) ----
  function linesGeometry() {
    const n = Math.max(L, S), dpr = window.devicePixelRatio || 1;
    const row = Math.max(2, Math.min(n > 64 ? 14 : 20, Math.floor(30000 / (n * dpr))));
    ctx.font = Math.min(12, row - 2) + "px system-ui, sans-serif";
    const widest = (tokens) => Math.min(160, Math.max(20, ...tokens.slice(0, 2000)
      .map((t) => ctx.measureText(t).width)));
    const left = widest(Q) + 12, right = widest(K) + 12, gap = 320, top = 8;
    return { row, left, right, gap, top, width: left + gap + right, height: top * 2 + n * row,
             x0: left, x1: left + gap };
  }

  // Lines are batched: one path per (colour, opacity level). Long inputs would need
  // L x S lines; only the strongest MAX_LINES are drawn (rasterizing is the cost).
  const LEVELS = 16, MAX_LINES = 12000;

  function lineCutoff(m) {  // the lowest opacity level drawn, and how many lines that is
    const threshold = Math.max(0, Number(thresholdInput.value) || 0) * m.max;
    const counts = new Array(LEVELS + 1).fill(0);
    let above = 0;
    for (let k = 0; k < L * S; k++) {
      if (m.values[k] <= threshold) continue;
      counts[Math.max(1, Math.ceil(shade(m.values[k], m) * LEVELS))] += 1;
      above += 1;
    }
    let level = LEVELS + 1, drawn = 0;
    while (level > 1 && drawn + counts[level - 1] <= MAX_LINES) drawn += counts[--level];
    return { threshold, level, drawn, above };
  }

  function drawLines(m, g, focus) {
    const levels = LEVELS, cut = m.cut;
    const paths = new Map(), y = (i) => g.top + (i + 0.5) * g.row;
    const add = (i, j) => {
      const k = i * S + j, v = m.values[k];
      const level = Math.max(1, Math.ceil(shade(v, m) * levels));
      if (focus === null && (v <= cut.threshold || level < cut.level)) return;
      const key = (m.argmax ? m.argmax[k] : 0) * (levels + 1) + level;
      let path = paths.get(key);
      if (!path) paths.set(key, (path = new Path2D()));
      path.moveTo(g.x0, y(i));
      path.lineTo(g.x1, y(j));
    };
    if (focus === null) {
      for (let i = 0; i < L; i++) for (let j = 0; j < S; j++) add(i, j);
    } else if (focus[0] === "q") {
      for (let j = 0; j < S; j++) add(focus[1], j);
    } else {
      for (let i = 0; i < L; i++) add(i, focus[1]);
    }
    const alpha = focus === null ? 0.9 : 1;
    ctx.lineWidth = 1;
    for (const [key, path] of paths) {
      const head = Math.floor(key / (levels + 1)), level = key % (levels + 1);
      const rgb = m.argmax ? hue(head, m.heads, 1) : [8, 48, 107];
      ctx.strokeStyle = "rgba(" + rgb.map(Math.round).join(",") + "," +
        ((alpha * level) / levels).toFixed(3) + ")";
      ctx.stroke(path);
    }
  }

  function linesLabels(g, focus) {
    const fontPx = Math.min(12, g.row - 2);
    if (fontPx < 6) return;
    ctx.font = fontPx + "px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    const put = (tokens, side, x, align) => {
      ctx.textAlign = align;
      tokens.forEach((t, i) => {
        const on = focus && focus[0] === side && focus[1] === i;
        ctx.fillStyle = on ? "#cf222e" : "#1b1f24";
        ctx.fillText(t, x, g.top + (i + 0.5) * g.row, 150);
      });
    };
    put(Q, "q", g.x0 - 6, "right");
    put(K, "k", g.x1 + 6, "left");
  }

  function renderLines(m) {
    const g = linesGeometry();
    sizeCanvas(g.width, g.height);
    ctx.clearRect(0, 0, g.width, g.height);
    m.cut = lineCutoff(m);
    drawLines(m, g, null);
    linesLabels(g, null);
    const image = snapshot();
    ctx.fillStyle = "rgba(255,255,255,0.85)";  // the faded copy behind a hovered token
    ctx.fillRect(0, 0, g.width, g.height);
    base = { image, faded: snapshot(), g, kind: "lines" };
    ctx.putImageData(image, 0, 0);
  }

  function hoverLines(x, y) {
    const g = base.g, i = Math.floor((y - g.top) / g.row);
    const side = x < (g.x0 + g.x1) / 2 ? "q" : "k";
    if (i < 0 || i >= (side === "q" ? L : S)) return clearHover();
    ctx.putImageData(base.faded, 0, 0);
    drawLines(current, g, [side, i]);
    linesLabels(g, [side, i]);
    const pairs = side === "q"
      ? K.map((t, j) => [current.values[i * S + j], t, j])
      : Q.map((t, r) => [current.values[r * S + i], t, r]);
    pairs.sort((a, b) => b[0] - a[0]);
    const name = side === "q" ? "query " + i + " " + JSON.stringify(Q[i]) + " attends to"
      : "key " + i + " " + JSON.stringify(K[i]) + " is attended by";
    info.textContent = name + ": " + pairs.slice(0, 6)
      .map((p) => JSON.stringify(p[1]) + " (" + p[2] + ") " + p[0].toFixed(3)).join(", ");
  }

  // ---- heatmap ----
  function heatGeometry() {
    const room = Math.max(300, Math.min(900, window.innerWidth - 60));
    const fit = room / Math.max(L, S, 1);  // long inputs: fractional cells fill the room
    const cell = fit >= 2 ? Math.min(36, Math.floor(fit)) : Math.max(1, fit);
    const labels = cell >= 9;
    ctx.font = Math.min(12, cell - 1) + "px system-ui, sans-serif";
    const widest = (tokens) => Math.min(140, Math.max(0, ...tokens.map((t) =>
      ctx.measureText(t).width)));
    const left = labels ? widest(Q) + 12 : 4, top = labels ? widest(K) + 14 : 4;
    return { cell, labels, left, top, width: left + cell * S + 4, height: top + cell * L + 4 };
  }

  function renderHeat(m) {
    const g = heatGeometry();
    sizeCanvas(Math.ceil(g.width), Math.ceil(g.height));
    ctx.clearRect(0, 0, g.width, g.height);
    const off = document.createElement("canvas");
    off.width = Math.max(1, S);
    off.height = Math.max(1, L);
    const octx = off.getContext("2d"), img = octx.createImageData(off.width, off.height);
    for (let i = 0; i < L * S; i++) {
      const t = shade(m.values[i], m);
      const rgb = m.argmax ? hue(m.argmax[i], m.heads, t) : ramp(t);
      img.data.set([rgb[0], rgb[1], rgb[2], 255], i * 4);
    }
    octx.putImageData(img, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(off, g.left, g.top, g.cell * S, g.cell * L);
    heatLabels(g, -1, -1);
    base = { image: snapshot(), g, kind: "heatmap" };
  }

  function heatLabels(g, qi, kj) {
    if (!g.labels) return;
    ctx.font = Math.min(12, g.cell - 1) + "px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    ctx.textAlign = "right";
    Q.forEach((t, i) => {
      ctx.fillStyle = i === qi ? "#cf222e" : "#1b1f24";
      ctx.fillText(t, g.left - 5, g.top + (i + 0.5) * g.cell, 140);
    });
    K.forEach((t, j) => {
      ctx.save();
      ctx.translate(g.left + (j + 0.5) * g.cell, g.top - 5);
      ctx.rotate(-Math.PI / 2);
      ctx.textAlign = "left";
      ctx.fillStyle = j === kj ? "#cf222e" : "#1b1f24";
      ctx.fillText(t, 0, 0, 140);
      ctx.restore();
    });
  }

  function hoverHeat(x, y) {
    const g = base.g;
    const i = Math.floor((y - g.top) / g.cell), j = Math.floor((x - g.left) / g.cell);
    if (i < 0 || i >= L || j < 0 || j >= S) return clearHover();
    ctx.putImageData(base.image, 0, 0);
    ctx.strokeStyle = "rgba(207,34,46,0.9)";
    ctx.lineWidth = 1;
    ctx.strokeRect(g.left, g.top + i * g.cell, g.cell * S, g.cell);
    ctx.strokeRect(g.left + j * g.cell, g.top, g.cell, g.cell * L);
    if (g.labels) {
      ctx.clearRect(0, 0, g.left - 1, g.height);
      ctx.clearRect(0, 0, g.width, g.top - 1);
      heatLabels(g, i, j);
    }
    const k = i * S + j;
    const strongest = current.argmax ? " (strongest: " +
      data.layers[Number(layerSel.value)].heads[current.argmax[k]] + ")" : "";
    info.textContent = "query " + i + " " + JSON.stringify(Q[i]) + " -> key " + j + " " +
      JSON.stringify(K[j]) + ": " + current.values[k].toFixed(4) + strongest;
  }

  function clearHover() {
    if (base) ctx.putImageData(base.image, 0, 0);
    if (!current) return;
    const cut = base && base.kind === "lines" ? current.cut : null;
    const lines = !cut ? "" : cut.drawn < cut.above ? "; the " + cut.drawn +
      " strongest of " + cut.above + " links drawn" : "; " + cut.drawn + " links";
    info.textContent = current.label + "; colour scale 0 .. " + current.max.toFixed(3) +
      lines + ". Hover a token or a cell.";
  }

  async function render() {
    const layer = Number(layerSel.value), head = headSel.value, view = viewSel.value;
    root.dataset.state = "rendering";
    try {
      current = await matrix(layer, head);
      if (view === "lines") renderLines(current);
      else renderHeat(current);
      renders += 1;
      clearHover();
      root.dataset.renders = String(renders);
      root.dataset.state = "drawn " + layer + " " + head + " " + view;
    } catch (err) {
      info.textContent = "error: " + err.message;
      root.dataset.state = "error";
    }
  }

  canvas.addEventListener("mousemove", (ev) => {
    if (!base || !current) return;
    const r = canvas.getBoundingClientRect();
    const x = ev.clientX - r.left, y = ev.clientY - r.top;
    if (base.kind === "lines") hoverLines(x, y);
    else hoverHeat(x, y);
  });
  canvas.addEventListener("mouseleave", clearHover);
  layerSel.addEventListener("change", () => { fillHeads(headSel.value); render(); });
  headSel.addEventListener("change", render);
  viewSel.addEventListener("change", render);
  thresholdInput.addEventListener("change", render);
  scaleSel.addEventListener("change", render);

  fillLayers();
  layerSel.value = String(data.initial.layer);
  fillHeads(String(data.initial.head));
  viewSel.value = data.initial.view;
  scaleSel.value = data.initial.scale || "linear";
  render();
})();
