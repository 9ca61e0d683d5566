// attnkit.viz interactive page, part 2 of 6: the head view (lines from each query token to
// the keys it attends to; opacity = weight; colour = the head, BertViz's picture).
function linesGeometry() {
  const Q = tokensQ(), K = tokensK(), n = Math.max(Q.length, K.length);
  const dpr = window.devicePixelRatio || 1;
  const row = Math.max(2, Math.min(n > 64 ? 14 : 20, Math.floor(30000 / (n * dpr))));
  ctx.font = Math.min(12, row - 2) + "px system-ui, sans-serif";
  const widest = (tokens) => Math.min(160, Math.max(20, ...tokens.slice(0, 2000)
    .map((t) => ctx.measureText(t).width)));
  const left = widest(Q) + 12, right = widest(K) + 12, gap = 320, top = 8;
  return { row, left, right, gap, top, width: left + gap + right, height: top * 2 + n * row,
           x0: left, x1: left + gap };
}

// Lines are batched: one path per (colour, opacity level). Long inputs would need L x S
// lines; only the strongest MAX_LINES are drawn (rasterizing is the cost), and the info
// line says so.
const LEVELS = 16, MAX_LINES = 12000;

function lineCutoff(m) {  // the lowest opacity level drawn, and how many lines that is
  const threshold = Math.max(0, Number(ui.threshold.value) || 0) * m.max;
  const counts = new Array(LEVELS + 1).fill(0);
  let above = 0;
  for (let k = 0; k < m.L * m.S; k++) {
    if (m.values[k] <= threshold) continue;
    counts[Math.max(1, Math.ceil(shade(m.values[k], m.max) * LEVELS))] += 1;
    above += 1;
  }
  let level = LEVELS + 1, drawn = 0;
  while (level > 1 && drawn + counts[level - 1] <= MAX_LINES) drawn += counts[--level];
  return { threshold, level, drawn, above };
}

function drawLines(m, g, focus) {
  const cut = m.cut, S = m.S, L = m.L;
  const paths = new Map(), y = (i) => g.top + (i + 0.5) * g.row;
  const add = (i, j) => {
    const k = i * S + j, v = m.values[k];
    const level = Math.max(1, Math.ceil(shade(v, m.max) * LEVELS));
    if (v <= 0 || (focus === null && (v <= cut.threshold || level < cut.level))) return;
    const key = (m.argmax ? m.argmax[k] : -1) * (LEVELS + 1) + level;
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
  ctx.lineWidth = 1;
  for (const [key, path] of paths) {
    const head = Math.floor(key / (LEVELS + 1)), level = key - head * (LEVELS + 1);
    const rgb = head >= 0 ? headColor(head, m.heads) : baseColor(m);
    ctx.strokeStyle = css(rgb, (focus === null ? 0.9 : 1) * (level / LEVELS));
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
  put(tokensQ(), "q", g.x0 - 6, "right");
  put(tokensK(), "k", g.x1 + 6, "left");
}

function renderLines(m) {
  const g = linesGeometry();
  sizeCanvas(g.width, g.height);
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
  const g = base.g, i = Math.floor((y - g.top) / g.row), Q = tokensQ(), K = tokensK();
  const side = x < (g.x0 + g.x1) / 2 ? "q" : "k", S = K.length;
  if (i < 0 || i >= (side === "q" ? Q.length : S)) return clearHover();
  ctx.putImageData(base.faded, 0, 0);
  drawLines(current, g, [side, i]);
  linesLabels(g, [side, i]);
  if (side === "q") state.query = i;
  const pairs = side === "q"
    ? K.map((t, j) => [current.values[i * S + j], t, j])
    : Q.map((t, r) => [current.values[r * S + i], t, r]);
  pairs.sort((a, b) => b[0] - a[0]);
  const name = side === "q" ? "query " + i + " " + JSON.stringify(Q[i]) + " attends to"
    : "key " + i + " " + JSON.stringify(K[i]) + " is attended by";
  info.textContent = name + ": " + pairs.slice(0, 6)
    .map((p) => JSON.stringify(p[1]) + " (" + p[2] + ") " + p[0].toFixed(3)).join(", ");
}
