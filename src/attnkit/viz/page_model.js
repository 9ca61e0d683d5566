// attnkit.viz interactive page, part 4 of 6: the model view, every layer x head as a
// thumbnail heatmap (BertViz's model view: find the interesting heads at a glance). Each
// thumbnail is max-pooled to at most its size in pixels (a sharp pattern stays visible)
// and scaled to its own maximum; click one (or Enter on the focused one) to open it in
// the head view.
function modelGeometry(N, H) {
  const room = Math.max(400, Math.min(1400, window.innerWidth - 60));
  const thumb = Math.max(24, Math.min(96, Math.floor((room - 70) / H) - 6));
  return { thumb, gap: 6, left: 64, top: 20, N, H,
           width: 64 + H * (thumb + 6), height: 20 + N * (thumb + 6) };
}

// One thumbnail: the head's (L, S) weights max-pooled to (P, P2) pixels, then / its max.
function pooled(bytes, h, L, S, P, P2) {
  const out = new Float32Array(P * P2), off = h * L * S;
  for (let i = 0; i < L; i++) {
    const row = Math.floor((i * P) / L) * P2;
    for (let j = 0; j < S; j++) {
      const v = bytes[off + i * S + j], k = row + Math.floor((j * P2) / S);
      if (v > out[k]) out[k] = v;
    }
  }
  let max = 0;
  for (let k = 0; k < out.length; k++) if (out[k] > max) max = out[k];
  for (let k = 0; k < out.length; k++) out[k] /= max || 1;
  return out;
}

async function renderModel() {
  const s = sentence(), N = s.layers.length, H = s.layers[0].heads.length;
  const L = tokensQ().length, S = tokensK().length, g = modelGeometry(N, H);
  const P = Math.max(1, Math.min(L, g.thumb)), P2 = Math.max(1, Math.min(S, g.thumb));
  sizeCanvas(g.width, g.height);
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = "#1b1f24";
  ctx.textBaseline = "middle";
  ctx.textAlign = "center";
  for (let h = 0; h < H; h++) ctx.fillText("head " + h, g.left + h * (g.thumb + g.gap) +
    g.thumb / 2, g.top / 2, g.thumb + g.gap);
  const off = document.createElement("canvas");
  off.width = P2;
  off.height = P;
  const octx = off.getContext("2d");
  ctx.imageSmoothingEnabled = false;
  for (let n = 0; n < N; n++) {
    const y = g.top + n * (g.thumb + g.gap);
    ctx.textAlign = "right";
    ctx.fillStyle = "#1b1f24";
    ctx.fillText(s.layers[n].name, g.left - 8, y + g.thumb / 2, g.left - 10);
    const key = entryKey("head", n), bytes = await unpack(s.layers[n].data, key);
    for (let h = 0; h < H; h++) {
      const tkey = key + "/thumb " + h + " " + P + "x" + P2;
      let t = cache.get(tkey);
      if (!t) cache.set(tkey, (t = pooled(bytes, h, L, S, P, P2)));
      const img = octx.createImageData(P2, P), rgb0 = headColor(h, H);
      for (let k = 0; k < t.length; k++) {
        const rgb = mix(rgb0, ui.scale.value === "sqrt" ? Math.sqrt(t[k]) : t[k]);
        img.data[4 * k] = rgb[0];
        img.data[4 * k + 1] = rgb[1];
        img.data[4 * k + 2] = rgb[2];
        img.data[4 * k + 3] = 255;
      }
      octx.putImageData(img, 0, 0);
      const x = g.left + h * (g.thumb + g.gap);
      ctx.drawImage(off, x, y, g.thumb, g.thumb);
      ctx.strokeStyle = "#d0d7de";
      ctx.strokeRect(x - 0.5, y - 0.5, g.thumb + 1, g.thumb + 1);
    }
  }
  base = { image: snapshot(), g, kind: "model" };
  drawFocus();
}

function drawFocus() {
  const g = base.g, [n, h] = state.focus;
  ctx.putImageData(base.image, 0, 0);
  ctx.strokeStyle = "#cf222e";
  ctx.lineWidth = 2;
  ctx.strokeRect(g.left + h * (g.thumb + g.gap) - 2, g.top + n * (g.thumb + g.gap) - 2,
    g.thumb + 4, g.thumb + 4);
  ctx.lineWidth = 1;
}

function modelCell(x, y) {  // [layer, head] under (x, y), or null
  const g = base.g, step = g.thumb + g.gap;
  const h = Math.floor((x - g.left) / step), n = Math.floor((y - g.top) / step);
  if (h < 0 || h >= g.H || n < 0 || n >= g.N) return null;
  if (x - g.left - h * step > g.thumb || y - g.top - n * step > g.thumb) return null;
  return [n, h];
}

function describeCell(n, h) {
  const layer = sentence().layers[n];
  info.textContent = layer.name + ", " + layer.heads[h] + ": largest weight " +
    fmt(layer.scales[h]) + ". Click (or Enter) to open it in the head view.";
}

function hoverModel(x, y) {
  const cell = modelCell(x, y);
  if (!cell) return clearHover();
  state.focus = cell;
  drawFocus();
  describeCell(cell[0], cell[1]);
}

function openHead(n, h) {
  state.layer = n;
  state.heads = [h];
  state.view = "head";
  render();
}
