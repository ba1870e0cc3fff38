// report.html's growth chart and its tables of leak suspects and of a diff. html.py puts this
// before report.js in the page's one script: report.js's helpers (el, humanBytes, functionCell)
// and its data are the page's, and report.js, last, starts the page.
"use strict";

// The SVG namespace, asked of the HTML parser: the page then holds no URL at all, which lets a
// test assert that it references nothing on the network.
const SVG = (() => {
  const probe = document.createElement("div");
  probe.innerHTML = "<svg></svg>";
  return probe.firstChild.namespaceURI;
})();

function svg(tag, attributes = {}, text = "") {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  if (text) node.textContent = text;
  return node;
}

// About `count` round tick values from 0 (or `min`) to at least `max`: steps of 1, 2, 2.5 or 5
// times a power of ten of `unit` (1024**k for bytes, so that the labels read "1.5 MiB", not
// "1.4305 MiB").
function ticks(min, max, count, unit = 1) {
  const span = (max - min) / unit || 1;
  const magnitude = 10 ** Math.floor(Math.log10(span / count));
  const step = unit * magnitude * ([1, 2, 2.5, 5, 10].find((m) => span / (m * magnitude) <= count) || 10);
  const values = [];
  for (let i = Math.floor(min / step); i * step < max + step * 0.999; i++) values.push(i * step);
  return values;
}

function byteUnit(max) {
  let unit = 1;
  while (max / unit >= 1024 && unit < 1024 ** 3) unit *= 1024;
  return unit;
}

function renderGrowth() {
  const series = (data.growth || []).filter((s) => s.points.length >= 2);
  document.getElementById("growth-section").hidden = !series.length;
  if (!series.length) return;
  // A dump without a time stands at its index.
  const lines = series.map((s) => s.points.map((p, i) => [typeof p[0] === "number" ? p[0] : i, p[1]]));
  const [width, height, left, right, top, bottom] = [760, 240, 78, 16, 10, 40];
  const points = lines.flat();
  const xTicks = ticks(Math.min(...points.map((p) => p[0])), Math.max(...points.map((p) => p[0])), 6);
  const yTicks = ticks(0, Math.max(...points.map((p) => p[1]), 1), 4, byteUnit(Math.max(...points.map((p) => p[1]))));
  const [x0, x1, y1] = [xTicks[0], xTicks[xTicks.length - 1], yTicks[yTicks.length - 1]];
  const x = (v) => left + (width - left - right) * (v - x0) / ((x1 - x0) || 1);
  const y = (v) => top + (height - top - bottom) * (1 - v / y1);
  const chart = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
                             class: "chart", "aria-label": "bytes in use over time" });
  for (const v of yTicks) {
    chart.append(svg("line", { x1: left, y1: y(v), x2: width - right, y2: y(v), class: v ? "grid" : "axis" }),
                 svg("text", { x: left - 6, y: y(v) + 4, "text-anchor": "end" }, humanBytes(v)));
  }
  for (const v of xTicks) {
    chart.append(svg("line", { x1: x(v), y1: y(0), x2: x(v), y2: y(0) + 4, class: "axis" }),
                 svg("text", { x: x(v), y: y(0) + 16, "text-anchor": "middle" }, `${+v.toFixed(3)} s`));
  }
  chart.append(svg("line", { x1: left, y1: top, x2: left, y2: y(0), class: "axis" }),
               svg("text", { x: (left + width - right) / 2, y: height - 4, "text-anchor": "middle",
                             class: "axis-title" }, "seconds since the first dump"),
               svg("text", { x: 12, y: (top + y(0)) / 2, "text-anchor": "middle", class: "axis-title",
                             transform: `rotate(-90 12 ${(top + y(0)) / 2})` }, "in use"));
  const legend = el("div", { class: "legend" });
  lines.forEach((line, i) => {
    const colour = `hsl(${(i * 137 + 210) % 360}, 60%, 42%)`;
    chart.append(svg("polyline", {
      points: line.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" "),
      fill: "none", stroke: colour, "stroke-width": 2,
    }));
    for (const p of line) {
      const dot = svg("circle", { cx: x(p[0]).toFixed(1), cy: y(p[1]).toFixed(1), r: 3, fill: colour });
      dot.append(svg("title", {}, `${series[i].label}\n${+p[0].toFixed(3)} s: ${humanBytes(p[1])} in use`));
      chart.append(dot);
    }
    legend.append(el("span", { style: `background:${colour}` }), series[i].label);
  });
  document.getElementById("growth").replaceChildren(chart, legend);
}

function sparkline(values) {
  const [width, height] = [90, 18];
  const max = Math.max(...values) || 1;
  const step = values.length > 1 ? width / (values.length - 1) : width;
  const line = svg("svg", { width, height, class: "spark" });
  line.append(svg("polyline", {
    points: values.map((v, i) => `${(i * step).toFixed(1)},${(height - 1 - (height - 2) * v / max).toFixed(1)}`)
        .join(" "), fill: "none", stroke: "#b00020", "stroke-width": 1.5,
  }));
  return line;
}

function renderLeaks() {
  const leaks = data.leaks || [];
  document.getElementById("leaks-section").hidden = !leaks.length;
  if (!leaks.length) return;
  const header = el("tr", {}, el("th", { text: "call site" }), el("th", { text: "process and heap" }),
      el("th", { class: "num", text: "growth" }), el("th", { class: "num", text: "steady" }),
      el("th", { text: "in use at each dump" }));
  document.getElementById("leaks").replaceChildren(header, ...leaks.map((leak) => el("tr", {},
      functionCell(leak.frame), el("td", { text: leak.label }),
      el("td", { class: "num grow", text: signedBytes(leak.growth_bytes) }),
      el("td", { class: "num", text: `${Math.round(100 * leak.steadiness)}%` }),
      el("td", { title: leak.in_use_by_dump.map(humanBytes).join(", ") }, sparkline(leak.in_use_by_dump)))));
}

function renderDiff() {
  const diff = data.diff;
  document.getElementById("diff-section").hidden = !diff;
  if (!diff) return;
  document.getElementById("diff-title").textContent = `Growth between ${diff.base} and ${diff.current}`;
  const header = el("tr", {}, el("th", { text: "call site" }),
      ...["before", "after", "change", "allocated"].map((t) => el("th", { class: "num", text: t })));
  const rows = diff.sites.map((s) => el("tr", {}, functionCell(s.frame),
      el("td", { class: "num", text: humanBytes(s.base_in_use) }),
      el("td", { class: "num", text: humanBytes(s.in_use) }),
      el("td", { class: `num ${s.in_use_delta > 0 ? "grow" : s.in_use_delta < 0 ? "shrink" : ""}`,
                 text: signedBytes(s.in_use_delta) }),
      el("td", { class: "num", text: signedBytes(s.alloc_delta) })));
  document.getElementById("diff").replaceChildren(header, ...(rows.length ? rows
      : [el("tr", {}, el("td", { colspan: 5, text: "No call site changed." }))]));
}
