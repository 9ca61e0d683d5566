// attnkit.viz interactive page, part 5 of 6: the neuron view (BertViz's): for one head and
// one query token, the query vector q, every key vector k_j, their elementwise product
// q * k_j, the score scale * (q . k_j) and the model's weight on key j.
async function vectorsOf(layer, h) {
  const v = sentence().vectors, entry = v.layers[layer], E = v.dim;
  const H = sentence().layers[layer].heads.length, kvh = Math.floor(h / (H / v.kv_heads));
  const qb = await unpack(entry.q.data, entryKey("head", layer) + "/q");
  const kb = await unpack(entry.k.data, entryKey("head", layer) + "/k");
  const L = tokensQ().length, S = tokensK().length, i = Math.min(state.query, L - 1);
  const q = new Float32Array(E), k = new Float32Array(S * E);
  const qs = entry.q.scales[h] / 127, ks = entry.k.scales[kvh] / 127;
  for (let e = 0; e < E; e++) q[e] = (qb[(h * L + i) * E + e] - 128) * qs;
  for (let t = 0; t < S * E; t++) k[t] = (kb[kvh * S * E + t] - 128) * ks;
  return { q, k, E, S, i, kvh, qmax: entry.q.scales[h], kmax: entry.k.scales[kvh],
           scale: v.scale };
}

function neuronGeometry(E, S) {
  const cw = Math.max(2, Math.min(10, Math.floor(320 / Math.max(1, E))));
  const rh = S <= 64 ? 14 : Math.max(3, Math.min(12, Math.floor(6000 / S)));
  ctx.font = "12px system-ui, sans-serif";
  const widest = Math.min(150, Math.max(60, ...tokensK().slice(0, 2000)
    .map((t) => ctx.measureText(t).width)));
  const left = widest + 12, panel = cw * E, bar = 90, gap = 14, top = 46;
  const xs = [left, left + panel + gap, left + 2 * (panel + gap), left + 2 * (panel + gap) + bar + gap];
  return { cw, rh, left, panel, bar, gap, top, xs, width: xs[3] + bar + 10,
           height: top + rh * S + 8 };
}

function renderNeuronMissing() {
  sizeCanvas(640, 60);
  ctx.font = "13px system-ui, sans-serif";
  ctx.fillStyle = "#57606a";
  ctx.textBaseline = "middle";
  const note = sentence().vectors_note || "pass queries= and keys= to AttentionView";
  ctx.fillText("No query/key vectors in this page: " + note + ".", 10, 30, 620);
  base = { image: snapshot(), kind: "neuron-none" };
  colorBars([]);
  info.textContent = "The neuron view needs the query and key vectors: " + note + ".";
}

async function renderNeuron(m) {
  if (!sentence().vectors) return renderNeuronMissing();
  const h = state.heads[0], n = await vectorsOf(state.layer, h), E = n.E, S = n.S;
  const g = neuronGeometry(E, S), rowOf = n.i * S;
  const prod = new Float32Array(S * E), score = new Float32Array(S);
  let pmax = 0, smax = 0;
  for (let j = 0; j < S; j++) {
    let dot = 0;
    for (let e = 0; e < E; e++) {
      const p = n.q[e] * n.k[j * E + e];
      prod[j * E + e] = p;
      dot += p;
      if (Math.abs(p) > pmax) pmax = Math.abs(p);
    }
    score[j] = n.scale * dot;
    if (Math.abs(score[j]) > smax) smax = Math.abs(score[j]);
  }
  sizeCanvas(g.width, g.height);
  const cell = (x, y, v, max) => {
    const t = Math.min(1, Math.abs(v) / (max || 1));
    ctx.fillStyle = css(mix(v < 0 ? NEG : POS, t));
    ctx.fillRect(x, y, g.cw, g.rh - (g.rh > 4 ? 1 : 0));
  };
  ctx.font = "12px system-ui, sans-serif";
  ctx.textBaseline = "middle";
  ctx.fillStyle = "#1b1f24";
  ctx.textAlign = "left";
  const heads = E >= 16 ? ["k (key vectors)", "q \u00d7 k (elementwise)",
    "q \u00b7 k \u00d7 scale", "weight"] : ["k", "q \u00d7 k", "q \u00b7 k \u00d7 scale", "weight"];
  heads.forEach((t, c) => ctx.fillText(t, g.xs[c], 8, c < 2 ? g.panel : g.bar));
  ctx.textAlign = "right";
  ctx.fillStyle = "#cf222e";
  ctx.fillText("q: " + tokensQ()[n.i], g.left - 6, 28, g.left - 8);
  for (let e = 0; e < E; e++) cell(g.xs[0] + e * g.cw, 22, n.q[e], n.qmax);
  ctx.fillStyle = "#57606a";
  ctx.textAlign = "left";
  ctx.fillText("query " + n.i + ", " + sentence().layers[state.layer].heads[h], g.xs[1], 28);
  const labels = g.rh >= 8;
  ctx.font = Math.min(12, g.rh - 2) + "px system-ui, sans-serif";
  for (let j = 0; j < S; j++) {
    const y = g.top + j * g.rh;
    if (labels) {
      ctx.textAlign = "right";
      ctx.fillStyle = "#1b1f24";
      ctx.fillText(tokensK()[j], g.left - 6, y + g.rh / 2, g.left - 8);
    }
    for (let e = 0; e < E; e++) {
      cell(g.xs[0] + e * g.cw, y, n.k[j * E + e], n.kmax);
      cell(g.xs[1] + e * g.cw, y, prod[j * E + e], pmax);
    }
    const mid = g.xs[2] + g.bar / 2, w = (score[j] / (smax || 1)) * (g.bar / 2);
    ctx.fillStyle = css(score[j] < 0 ? NEG : POS);
    ctx.fillRect(Math.min(mid, mid + w), y, Math.abs(w), g.rh - 1);
    ctx.fillStyle = css(baseColor(m));
    ctx.fillRect(g.xs[3], y, (m.values[rowOf + j] / m.max) * g.bar, g.rh - 1);
  }
  base = { image: snapshot(), g, kind: "neuron", n, score, rowOf };
  colorBars([
    { label: "q: largest |q| of this head", kind: "diverging", max: n.qmax },
    { label: "k: largest |k| of key head " + n.kvh, kind: "diverging", max: n.kmax },
    { label: "q \u00d7 k: largest |product| here", kind: "diverging", max: pmax || 1 },
  ]);
}

function hoverNeuron(x, y) {
  if (base.kind !== "neuron") return;
  const g = base.g, j = Math.floor((y - g.top) / g.rh), K = tokensK();
  if (j < 0 || j >= K.length) return clearHover();
  ctx.putImageData(base.image, 0, 0);
  ctx.strokeStyle = "rgba(207,34,46,0.9)";
  ctx.strokeRect(1, g.top + j * g.rh, g.width - 2, g.rh);
  const dot = base.score[j] / base.n.scale;
  info.textContent = "query " + base.n.i + " " + JSON.stringify(tokensQ()[base.n.i]) +
    " . key " + j + " " + JSON.stringify(K[j]) + ": q . k = " + fmt(dot) + ", x scale " +
    fmt(base.n.scale) + " = " + fmt(base.score[j]) + "; the model's weight " +
    current.values[base.rowOf + j].toFixed(4) + " (after its mask and softmax)";
}
