// droidheap's report page: everything it shows is computed here from the JSON data in the page
// (droidheap/results/page.py writes it), so the file works offline and alone.
"use strict";

const METRICS = [
  ["in_use_bytes", "in use (bytes)", 5], ["in_use_count", "in use (objects)", 4],
  ["alloc_bytes", "allocated (bytes)", 3], ["alloc_count", "allocated (objects)", 2],
  // What a dump's sweep found (--unreachable): rows of its own, their figures in the in-use columns.
  ["unreachable_bytes", "unreachable (bytes)", 5], ["unreachable_count", "unreachable (objects)", 4],
];
const COLUMN = Object.fromEntries(METRICS.map(([name, , column]) => [name, column]));
const ROW_HEIGHT = 18;
const MIN_WIDTH_PERCENT = 0.1;  // narrower boxes would be unreadable slivers
const MAX_BOXES = 4000;         // enough for any screen; keeps a huge profile responsive
const TOP_SITES = 30;

function showError(message) {
  document.getElementById("errors").textContent += message + "\n";
}
window.addEventListener("error", (e) => showError(`error: ${e.message}`));
window.addEventListener("unhandledrejection", (e) => showError(`error: ${e.reason}`));

const data = JSON.parse(document.getElementById("droidheap-data").textContent);
const frames = data.frames || [];
const UNKNOWN_FRAME = { function: "?", where: "", module: "" };
const profiles = data.profiles || [];
// A sample names its call stack by index into data.stacks (shared by every dump): from here on
// it holds the stack's frame ids themselves.
const stacks = data.stacks || [];
for (const profile of profiles) {
  for (const rows of [profile.samples, profile.unreachable ? profile.unreachable.samples : []]) {
    for (const sample of rows) sample[0] = stacks[sample[0]] || [];
  }
}
const state = { profile: 0, metric: "in_use_bytes", search: "", zoom: [] };

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
}

function humanBytes(count) {
  if (Math.abs(count) < 1024) return `${count} B`;
  let value = count / 1024;
  for (const unit of ["KiB", "MiB"]) {
    if (Math.abs(value) < 1024) return `${value.toFixed(1)} ${unit}`;
    value /= 1024;
  }
  return `${value.toFixed(1)} GiB`;
}

function signedBytes(count) {
  return (count > 0 ? "+" : "") + humanBytes(count);
}

function isUnreachable(metric) {
  return metric.startsWith("unreachable");
}

// What the view of a metric draws from: the dump's rows, or its sweep's.
function viewed(profile) {
  return isUnreachable(state.metric) ? profile.unreachable : profile;
}

function offered(profile, metric) {
  return isUnreachable(metric) ? Boolean(profile.unreachable && profile.unreachable.swept)
      : !(profile.at_peak && metric.startsWith("alloc"));
}

function formatValue(value, metric = state.metric) {
  return metric.endsWith("bytes") ? humanBytes(value) : `${value} objects`;
}

function percent(part, whole) {
  return whole ? `${(100 * part / whole).toFixed(1)}%` : "0%";
}

function baseName(path) {
  return path ? path.slice(path.lastIndexOf("/") + 1) : "";
}

// A frame by id; an id the data lacks shows as "?" rather than stopping the page.
function frameOf(id) {
  const frame = frames[id] || UNKNOWN_FRAME;
  return { function: String(frame.function || "?"), where: frame.where || "", module: frame.module || "" };
}

function frameLabel(id) {
  const frame = frameOf(id);
  return frame.where ? `${frame.function} (${frame.where})` : frame.function;
}

// As the text report names a dump: of how many, and the seconds since the process's first dump
// (which the first has no use for, nor a heap dumped once).
function profileLabel(p) {
  const name = baseName((p.cmdline || "?").split(" ")[0]);
  const after = p.time_s ? `, ${p.time_s.toFixed(1)} s after the first` : "";
  const which = p.dumps === 1 ? "one dump" : `dump ${p.dump}${p.dumps ? ` of ${p.dumps}` : ""}${after}`;
  const moment = p.at_exit ? " (at exit)" : p.at_peak ? " (peak)" : "";
  return `pid ${p.pid} (${name}), heap ${p.heap}, ${which}${moment}`;
}

// Colours by module, so that a library reads as one band; shades by function within it.
function hash(text) {
  let h = 2166136261;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619);
  return h >>> 0;
}

function frameColour(id) {
  const frame = frameOf(id);
  const hue = hash(frame.module || "?") % 360;
  const light = 62 + (hash(frame.function) % 16);
  return `hsl(${hue}, 55%, ${light}%)`;
}

function matches(id) {
  if (!state.search) return false;
  const frame = frameOf(id);
  const needle = state.search.toLowerCase();
  return frame.function.toLowerCase().includes(needle) ||
      frame.where.toLowerCase().includes(needle) || frame.module.toLowerCase().includes(needle);
}

// The call tree of a profile for a metric, root first: {id, value, children: Map(id -> node)}.
function buildTree(profile, metric) {
  const column = COLUMN[metric];
  const root = { id: -1, value: 0, children: new Map() };
  for (const sample of profile.samples) {
    const value = sample[column];
    if (value <= 0) continue;
    root.value += value;
    let node = root;
    const stack = sample[0];
    for (let i = stack.length - 1; i >= 0; i--) {
      let child = node.children.get(stack[i]);
      if (!child) {
        child = { id: stack[i], value: 0, children: new Map() };
        node.children.set(stack[i], child);
      }
      child.value += value;
      node = child;
    }
  }
  return root;
}

function matchedValue(profile, metric) {
  const column = COLUMN[metric];
  let total = 0;
  for (const sample of profile.samples) {
    if (sample[column] > 0 && sample[0].some(matches)) total += sample[column];
  }
  return total;
}

function readHash() {
  const params = new URLSearchParams(location.hash.slice(1));
  const index = parseInt(params.get("profile"), 10);
  state.profile = index >= 0 && index < profiles.length ? index : defaultProfile();
  state.metric = COLUMN[params.get("metric")] !== undefined ? params.get("metric")
      : defaultMetric(profiles[state.profile]);
  state.search = params.get("search") || "";
  state.zoom = (params.get("zoom") || "").split(",").filter((s) => s !== "").map(Number)
      .filter((id) => id >= 0 && id < frames.length);
}

function writeHash() {
  const params = new URLSearchParams();
  params.set("profile", state.profile);
  params.set("metric", state.metric);
  if (state.search) params.set("search", state.search);
  if (state.zoom.length) params.set("zoom", state.zoom.join(","));
  history.replaceState(null, "", "#" + params.toString());
}

function metricTotal(profile, metric) {
  const column = COLUMN[metric];
  return profile.samples.reduce((sum, sample) => sum + Math.max(0, sample[column]), 0);
}

// What a person looks at first: the last dump of the first process's heap that sampled anything
// (a shell that only started the program may have none), of those taken while it ran (or at its
// peak): the dump after its exit shows what its teardown left, not what it grew to, and opens
// only when there is no other (a run without -c).
function defaultProfile() {
  const last = new Map();  // by process and heap, in the page's order: the index of its last dump
  profiles.forEach((p, i) => {
    const key = `${p.pid} ${p.heap}`;
    if (!p.at_exit || !last.has(key)) last.set(key, i);
  });
  const lasts = [...last.values()];
  return lasts.find((i) => metricTotal(profiles[i], "alloc_count") ||
                           metricTotal(profiles[i], "in_use_count")) ?? lasts[0];
}

// Bytes in use, unless nothing sampled is: most programs free everything before they exit, and
// their last dump then has data only for what they allocated.
function defaultMetric(profile) {
  return profile.at_peak || metricTotal(profile, "in_use_bytes") ? "in_use_bytes" : "alloc_bytes";
}

// Why a dump has nothing for a metric, in place of a blank flamegraph and table.
function emptyReason(profile, metric) {
  if (isUnreachable(metric)) return `Unreachable (leaked): ${profile.unreachable.verdict}.`;
  if (!metricTotal(profile, "alloc_count") && !metricTotal(profile, "in_use_count")) {
    return "Nothing was sampled in this dump: the process allocated nothing while profiled, or " +
        `too little to be sampled (one sample per ${profile.sampling_interval} B allocated, on average).`;
  }
  if (!metric.startsWith("in_use")) return "Nothing for this metric in this dump.";
  const t = profile.totals;
  if (t && t.in_use_bytes > 0) {
    return "Nothing sampled is in use at this dump: the sampled allocations were all freed; what " +
        `the program still holds (exact: ${humanBytes(t.in_use_bytes)} in ${t.live_blocks} blocks) ` +
        "was not sampled. The allocated views show where it allocated.";
  }
  return "Nothing sampled is in use at this dump: the program freed what it allocated. " +
      "The allocated views show where it allocated.";
}

function renderControls() {
  const select = document.getElementById("profile");
  select.replaceChildren(...profiles.map((p, i) => el("option", { value: i, text: profileLabel(p) })));
  select.value = state.profile;
  select.addEventListener("change", () => {
    state.profile = Number(select.value);
    state.zoom = [];
    update();
  });
  const metrics = document.getElementById("metrics");
  // The unreachable views only where some dump was swept for unreachable memory.
  const shown = METRICS.filter(([name]) => !isUnreachable(name) || profiles.some((p) => p.unreachable));
  metrics.replaceChildren(...shown.map(([name, label]) => el("label", { "data-metric": name },
      el("input", { type: "radio", name: "metric", value: name, onchange: () => {
        state.metric = name;
        update();
      } }), ` ${label}`)));
  const search = document.getElementById("search");
  search.value = state.search;
  search.addEventListener("input", () => {
    state.search = search.value.trim();
    update();
  });
}

// libc's samples count the sizes asked for, its exact totals the usable sizes the allocator handed
// out (a few percent more); a heap a program registers reports one size for both.
function sizeLabels(heap) {
  return heap === "libc.malloc" ? [", requested sizes", ", usable sizes"] : ["", ""];
}

function renderSummary(profile) {
  const summary = document.getElementById("summary");
  const sampled = [0, 0, 0, 0];
  for (const sample of profile.samples) for (let c = 2; c < 6; c++) sampled[c - 2] += sample[c];
  const [requested, usable] = sizeLabels(profile.heap);
  const parts = [profile.at_peak
      ? `sampled at the peak${requested}: ${humanBytes(sampled[3])} in use in ${sampled[2]} objects`
      : `sampled${requested}: ${humanBytes(sampled[1])} allocated in ${sampled[0]} objects, ` +
        `${humanBytes(sampled[3])} in use in ${sampled[2]} objects`,
      `sampling interval ${profile.sampling_interval} B`];
  const t = profile.totals;
  if (t) {
    parts.push(`exact${usable}: ${t.alloc_count} allocations (${humanBytes(t.alloc_bytes)}), ` +
               `${t.free_count} frees, ${t.live_blocks} blocks (${humanBytes(t.in_use_bytes)}) in use`);
  }
  summary.replaceChildren(parts.join(" · "));
  if (profile.unreachable) {
    const verdict = `unreachable (leaked): ${profile.unreachable.verdict}`;
    summary.append(" · ", el("span", { class: "verdict", text: verdict }));
  }
  for (const note of viewed(profile).notes || []) {
    summary.append(" · ", el("span", { class: "note", text: note }));
  }
}

function box(id, left, width, depth, label, title, classes) {
  return el("div", {
    class: "frame " + classes, "data-frame": id, "data-width": width.toFixed(3),
    style: `left:${left.toFixed(4)}%;width:${width.toFixed(4)}%;top:${depth * ROW_HEIGHT}px;` +
        (id >= 0 ? `background:${frameColour(id)}` : ""),
    title, text: label,
  });
}

function frameTitle(id, value, total) {
  const frame = frameOf(id);
  return [frame.function, frame.where, frame.module, `${formatValue(value)}, ${percent(value, total)}`]
      .filter(Boolean).join("\n");
}

function renderFlamegraph(profile) {
  const flame = document.getElementById("flame");
  const root = buildTree(viewed(profile), state.metric);
  const total = root.value;
  flame.classList.toggle("searching", Boolean(state.search));
  const matched = document.getElementById("matched");
  const matchedTotal = state.search ? matchedValue(viewed(profile), state.metric) : 0;
  matched.textContent = state.search
      ? `matched: ${formatValue(matchedTotal)} (${percent(matchedTotal, total)})` : "";
  if (!total) {
    flame.style.height = "";
    flame.replaceChildren(el("div", { class: "empty", text: emptyReason(profile, state.metric) }));
    return;
  }
  // The zoom path, as far as it still exists in this tree.
  let focus = root;
  const path = [];
  for (const id of state.zoom) {
    const child = focus.children.get(id);
    if (!child) break;
    path.push(child);
    focus = child;
  }
  state.zoom = path.map((node) => node.id);
  const boxes = [box(-1, 0, 100, 0, `all: ${formatValue(total)}`, "zoom out to the whole profile",
                     "root")];
  boxes[0].addEventListener("click", () => zoomTo([]));
  path.forEach((node, i) => {
    const crumb = box(node.id, 0, 100, i + 1, frameLabel(node.id),
                      frameTitle(node.id, node.value, total), "crumb" + (matches(node.id) ? " match" : ""));
    crumb.addEventListener("click", () => zoomTo(state.zoom.slice(0, i)));
    boxes.push(crumb);
  });
  // Below the focus (the last crumb, or the root), its subtree scaled to the full width; breadth
  // first, so that the boxes kept under MAX_BOXES are the widest.
  const queue = [[focus, 0, path.length, state.zoom]];
  const scale = 100 / focus.value;
  let maxDepth = path.length;
  while (queue.length && boxes.length < MAX_BOXES) {
    const [node, left, depth, nodePath] = queue.shift();
    let x = left;
    for (const [id, child] of node.children) {
      const width = child.value * scale;
      if (width >= MIN_WIDTH_PERCENT) {
        const childPath = nodePath.concat([id]);
        const element = box(id, x, width, depth + 1, frameLabel(id),
                            frameTitle(id, child.value, total), matches(id) ? "match" : "");
        element.addEventListener("click", () => zoomTo(childPath));
        boxes.push(element);
        maxDepth = Math.max(maxDepth, depth + 1);
        queue.push([child, x, depth + 1, childPath]);
      }
      x += width;
    }
  }
  flame.style.height = `${(maxDepth + 1) * ROW_HEIGHT + 2}px`;
  flame.replaceChildren(...boxes);
}

function zoomTo(path) {
  state.zoom = path;
  update();
}

function siteRows(profile) {
  const sites = new Map();
  for (const sample of profile.samples) {
    let site = sites.get(sample[1]);
    if (!site) {
      site = [0, 0, 0, 0, 0, 0];
      sites.set(sample[1], site);
    }
    for (let c = 2; c < 6; c++) site[c] += sample[c];
  }
  const column = COLUMN[state.metric];
  return [...sites.entries()].filter(([, s]) => s[column] > 0)
      .sort((a, b) => b[1][column] - a[1][column] || b[1][5] - a[1][5]).slice(0, TOP_SITES);
}

function functionCell(id) {
  const frame = frameOf(id);
  return el("td", { class: "fn", title: frame.module }, frame.function,
            frame.where ? el("span", { class: "where", text: ` (${frame.where})` }) : "");
}

function renderSites(profile) {
  const table = document.getElementById("sites");
  const unreachable = isUnreachable(state.metric);
  const header = el("tr", {}, el("th", { text: "call site" }), el("th", { text: "module" }),
      ...(unreachable ? ["unreachable", "unreachable objects"] : ["in use", "in use objects"])
          .concat(["allocated", "allocated objects"]).map((t) => el("th", { class: "num", text: t })));
  // At the peak only what was in use is known, and a sweep knows nothing of allocations: no
  // allocation figures rather than zeros.
  const noAllocations = profile.at_peak || unreachable;
  const rows = siteRows(viewed(profile)).map(([id, s]) => el("tr", {
    "data-frame": id, onclick: () => {
      state.search = frameOf(id).function;
      document.getElementById("search").value = state.search;
      update();
    },
  }, functionCell(id), el("td", { text: baseName(frameOf(id).module), title: frameOf(id).module }),
      el("td", { class: "num", text: humanBytes(s[5]) }), el("td", { class: "num", text: s[4] }),
      el("td", { class: "num", text: noAllocations ? "–" : humanBytes(s[3]) }),
      el("td", { class: "num", text: noAllocations ? "–" : s[2] })));
  table.replaceChildren(header, ...(rows.length ? rows
      : [el("tr", {}, el("td", { colspan: 6, text: emptyReason(profile, state.metric) }))]));
}

function update() {
  const profile = profiles[state.profile];
  if (!offered(profile, state.metric)) state.metric = defaultMetric(profile);
  for (const label of document.querySelectorAll("#metrics label")) {
    const name = label.dataset.metric;
    const input = label.querySelector("input");
    input.disabled = !offered(profile, name);
    input.checked = name === state.metric;
    label.classList.toggle("disabled", input.disabled);
  }
  renderSummary(profile);
  const total = metricTotal(viewed(profile), state.metric);
  const metricName = METRICS.find(([name]) => name === state.metric)[1];
  document.getElementById("total").textContent = `Total ${metricName}: ${formatValue(total)}`;
  renderFlamegraph(profile);
  renderSites(profile);
  writeHash();
}

function main() {
  document.getElementById("title").textContent = data.title || "droidheap";
  renderGrowth();
  renderLeaks();
  renderDiff();
  if (!profiles.length) {
    document.getElementById("flame").replaceChildren(el("div", { class: "empty", text: "No heap dumps." }));
    for (const id of ["sites-section", "controls"]) {
      document.getElementById(id).hidden = true;
    }
    return;
  }
  readHash();
  renderControls();
  update();
  // A link pasted into this tab, or the hash edited by hand, changes only the hash.
  window.addEventListener("hashchange", () => {
    readHash();
    document.getElementById("profile").value = state.profile;
    document.getElementById("search").value = state.search;
    update();
  });
}

main();
