// attnkit.viz interactive page, part 3 of 6: the heatmap (one cell per query/key pair),
// also the rollout's and the flow's picture. At 512 tokens and more a cell is about a pixel.
function heatGeometry(L, S) {
  const room = Math.max(300, Math.min(900, window.innerWidth - 60));
  const fit = room / Math.max(L, S, 1);  // long inputs: fractional cells fill the room
  const cell = fit >= 2 ? Math.min(36, Math.floor(fit)) : Math.max(1, fit);
  const labels = cell >= 9;
  ctx.font = Math.min(12, cell - 1) + "px system-ui, sans-serif";
  const widest = (tokens) => Math.min(140, Math.max(0, ...tokens.map((t) =>
    ctx.measureText(t).width)));
  const left = labels ? widest(tokensQ()) + 12 : 4, top = labels ? widest(tokensK()) + 14 : 4;
  return { cell, labels, left, top, width: left + cell * S + 4, height: top + cell * L + 4 };
}

function renderHeat(m) {
  const L = m.L, S = m.S, g = heatGeometry(L, S);
  sizeCanvas(g.width, g.height);
  const off = document.createElement("canvas");
  off.width = Math.max(1, S);
  off.height = Math.max(1, L);
  const octx = off.getContext("2d"), img = octx.createImageData(off.width, off.height);
  for (let k = 0; k < L * S; k++) {
    const rgb = pairColor(m, k, shade(m.values[k], m.max));
    img.data[4 * k] = rgb[0];
    img.data[4 * k + 1] = rgb[1];
    img.data[4 * k + 2] = rgb[2];
    img.data[4 * k + 3] = 255;
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
  tokensQ().forEach((t, i) => {
    ctx.fillStyle = i === qi ? "#cf222e" : "#1b1f24";
    ctx.fillText(t, g.left - 5, g.top + (i + 0.5) * g.cell, 140);
  });
  tokensK().forEach((t, j) => {
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
  const g = base.g, L = current.L, S = current.S, Q = tokensQ(), K = tokensK();
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
  state.query = i;
  const k = i * S + j;
  const strongest = current.argmax ? " (strongest: " +
    sentence().layers[state.layer].heads[current.argmax[k]] + ")" : "";
  info.textContent = "query " + i + " " + JSON.stringify(Q[i]) + " -> key " + j + " " +
    JSON.stringify(K[j]) + ": " + current.values[k].toFixed(4) + strongest;
}
