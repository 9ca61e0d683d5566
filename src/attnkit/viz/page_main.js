// attnkit.viz interactive page, part 6 of 6: the controls, the drawing of the chosen view,
// hover, clicks and the keyboard. #ak-root's data-state says what is drawn ("drawn ..."),
// data-renders how many drawings, data-render-ms the last one's time, data-first-draw-ms
// the time from navigation to the first drawing.
let filledQueries = -1;

function isDepthView(view) { return view === "rollout" || view === "flow"; }

function option(select, value, label) { select.add(new Option(label, String(value))); }

function syncControls() {
  const s = sentence(), view = state.view;
  ui.view.value = view;
  ui.sentence.value = String(state.sentence);
  $("ak-sentence-label").classList.toggle("hidden", data.sentences.length < 2);
  $("ak-meta").textContent = s.meta;
  ui.layer.length = 0;
  const depthEntry = isDepthView(view) ? entryOf(view, 0) : null;
  if (depthEntry) {
    state.depth = Math.max(0, Math.min(state.depth, depthEntry.heads.length - 1));
    depthEntry.heads.forEach((name, d) => option(ui.layer, d, name));
    ui.layer.value = String(state.depth);
  } else {
    s.layers.forEach((layer, n) => option(ui.layer, n, layer.name));
    ui.layer.value = String(state.layer);
  }
  $("ak-layer-name").textContent = depthEntry ? "depth" : "layer";
  $("ak-layer-label").classList.toggle("hidden", view === "model" ||
    (isDepthView(view) && !depthEntry));
  const several = state.heads.length > 1 && (view === "head" || view === "heatmap");
  $("ak-combine-label").classList.toggle("hidden", !several);
  ui.combine.value = state.combine;
  $("ak-threshold-label").classList.toggle("hidden", view !== "head");
  $("ak-query-label").classList.toggle("hidden", view !== "neuron");
  if (filledQueries !== state.sentence) {
    ui.query.length = 0;
    tokensQ().forEach((t, i) => option(ui.query, i, i + ": " + t));
    filledQueries = state.sentence;
  }
  state.query = Math.max(0, Math.min(state.query, tokensQ().length - 1));
  ui.query.value = String(state.query);
  fillLegend();
}

function message(text) {
  sizeCanvas(640, 60);
  ctx.font = "13px system-ui, sans-serif";
  ctx.fillStyle = "#57606a";
  ctx.textBaseline = "middle";
  ctx.fillText(text, 10, 30, 620);
  base = { image: snapshot(), kind: "message" };
  colorBars([]);
  info.textContent = text;
  current = null;
}

function missingEntry(view) {
  if (view === "rollout") return "No rollout: it needs self-attention (queries = keys).";
  const note = sentence().flow && sentence().flow.note;
  return "No attention flow in this page" + (note ? ": " + note : ".");
}

function rampBar(m, label) {
  return { label, kind: "ramp", rgb: baseColor(m), max: m.max,
           sqrt: ui.scale.value === "sqrt" };
}

async function draw() {
  const view = state.view;
  if (view === "model") {
    current = null;
    await renderModel();
    colorBars([{ label: "each thumbnail: weight / its own maximum (hue: the head)",
                 kind: "ramp", rgb: GREY, max: 1, sqrt: ui.scale.value === "sqrt" }]);
    describeCell(state.focus[0], state.focus[1]);
    return "model";
  }
  const entry = entryOf(view, state.layer);
  if (!entry) { message(missingEntry(view)); return view + " none"; }
  if (view === "neuron" && state.heads.length > 1) state.heads = [state.heads[0]];  // one head
  const heads = isDepthView(view) ? [state.depth] : state.heads;
  if (!heads.length) { message("No head selected: click a head in the legend."); return "none"; }
  const key = entryKey(view, state.layer);
  const m = await matrix(entry, key, view === "neuron" ? [heads[0]] : heads, state.combine);
  current = m;
  const what = isDepthView(view) ? entry.name + " " + entry.heads[state.depth]
    : entry.name + ", " + (heads.length === 1 ? entry.heads[heads[0]]
      : heads.length + " heads (" + (state.combine === "colour" ? "hue: the strongest"
        : state.combine) + ")");
  m.label = what;
  if (view === "neuron") { fillLegend(); await renderNeuron(m); }
  else if (view === "head") renderLines(m);
  else renderHeat(m);
  if (view !== "neuron") {
    const label = m.argmax ? "weight (lightness); hue: the strongest head (legend)"
      : view === "rollout" ? "rollout: each token's share (rows sum to 1)"
        : view === "flow" ? "attention flow: max-flow value (0 .. 1)" : "attention weight";
    colorBars([rampBar(m, label)]);
  }
  if (view !== "neuron" || base.kind === "neuron") clearHover();
  return [view, isDepthView(view) ? state.depth : state.layer, heads.join(",")].join(" ");
}

async function render() {
  const t0 = performance.now();
  root.dataset.state = "rendering";
  try {
    syncControls();
    const what = await draw();
    renders += 1;
    root.dataset.renders = String(renders);
    root.dataset.renderMs = (performance.now() - t0).toFixed(1);
    if (!root.dataset.firstDrawMs) root.dataset.firstDrawMs = performance.now().toFixed(1);
    root.dataset.state = "drawn " + state.sentence + " " + what;
  } catch (err) {
    info.textContent = "error: " + err.message;
    root.dataset.state = "error";
  }
}

function clearHover() {
  if (base) ctx.putImageData(base.image, 0, 0);
  if (base && base.kind === "model") return drawFocus();
  if (!current) return;
  const cut = base && base.kind === "lines" ? current.cut : null;
  const lines = !cut ? "" : cut.drawn < cut.above ? "; the " + cut.drawn +
    " strongest of " + cut.above + " links drawn" : "; " + cut.drawn + " links";
  info.textContent = current.label + "; colour scale 0 .. " + fmt(current.max) + lines +
    ". Hover a token or a cell.";
}

function pointer(ev) {
  const r = canvas.getBoundingClientRect();
  return [ev.clientX - r.left, ev.clientY - r.top];
}

canvas.addEventListener("mousemove", (ev) => {
  if (!base) return;
  const [x, y] = pointer(ev);
  if (base.kind === "lines") hoverLines(x, y);
  else if (base.kind === "heatmap") hoverHeat(x, y);
  else if (base.kind === "model") hoverModel(x, y);
  else if (base.kind === "neuron") hoverNeuron(x, y);
});
canvas.addEventListener("mouseleave", () => clearHover());
canvas.addEventListener("click", (ev) => {
  if (!base || base.kind !== "model") return;
  const cell = modelCell(...pointer(ev));
  if (cell) openHead(cell[0], cell[1]);
});

ui.sentence.addEventListener("change", () => { state.sentence = Number(ui.sentence.value);
  render(); });
ui.view.addEventListener("change", () => { state.view = ui.view.value; render(); });
ui.layer.addEventListener("change", () => {
  if (isDepthView(state.view)) state.depth = Number(ui.layer.value);
  else state.layer = Number(ui.layer.value);
  render();
});
ui.combine.addEventListener("change", () => { state.combine = ui.combine.value; render(); });
ui.query.addEventListener("change", () => { state.query = Number(ui.query.value); render(); });
ui.scale.addEventListener("change", () => render());
ui.threshold.addEventListener("change", () => render());

function step(value, delta, count) { return (value + delta + count) % count; }

document.addEventListener("keydown", (ev) => {
  const tag = ev.target && ev.target.tagName;
  if (tag === "INPUT" || tag === "SELECT" || ev.ctrlKey || ev.metaKey || ev.altKey) return;
  const s = sentence(), N = s.layers.length, H = s.layers[0].heads.length;
  const key = ev.key, view = state.view;
  if (view === "model" && key.startsWith("Arrow")) {
    const [n, h] = state.focus;
    const d = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] }[key];
    state.focus = [step(n, d[0], N), step(h, d[1], H)];
    drawFocus();
    describeCell(...state.focus);
  } else if (view === "model" && key === "Enter") {
    openHead(...state.focus);
  } else if (key === "ArrowLeft" || key === "ArrowRight") {
    if (isDepthView(view)) return;
    state.heads = [step(state.heads.length ? state.heads[0] : 0, key === "ArrowLeft" ? -1 : 1, H)];
    render();
  } else if (key === "ArrowUp" || key === "ArrowDown") {
    const d = key === "ArrowUp" ? -1 : 1;
    if (isDepthView(view)) {
      const entry = entryOf(view, 0);
      if (!entry) return;
      state.depth = step(state.depth, d, entry.heads.length);
    } else state.layer = step(state.layer, d, N);
    render();
  } else if (key === "[" || key === "]") {
    state.query = step(state.query, key === "[" ? -1 : 1, tokensQ().length);
    render();
  } else if (key >= "1" && key <= String(VIEW_NAMES.length)) {
    state.view = VIEW_NAMES[Number(key) - 1];
    render();
  } else if (key === "a") {
    state.heads = s.layers[0].heads.map((_, h) => h);
    render();
  } else if ((key === "n" || key === "p") && data.sentences.length > 1) {
    state.sentence = step(state.sentence, key === "n" ? 1 : -1, data.sentences.length);
    render();
  } else return;
  ev.preventDefault();
});

data.sentences.forEach((s, i) => option(ui.sentence, i, s.name));
Object.assign(state, data.initial);
ui.scale.value = data.initial.scale || "linear";
render();
