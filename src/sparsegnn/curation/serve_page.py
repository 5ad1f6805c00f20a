"""The one page of ``curate serve``: static HTML with its script, style and charts inline.

Nothing of the corpus is ever written into this text. The script fetches JSON from the
server and puts every value into the page with ``textContent`` or as an SVG attribute
(never ``innerHTML``), so a document, code or query holding markup shows as that markup.
The script and style carry the response's CSP nonce; the page references no other file.
"""

from __future__ import annotations

_STYLE = """
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; background: #fff; }
h1 { font-size: 1.3em; }
textarea { width: 100%; font: 13px monospace; }
.controls { margin: 0.5em 0; display: flex; gap: 0.5em; align-items: center; }
#message { margin: 0.5em 0; padding: 0.5em; display: none; white-space: pre-wrap; }
#message.refused, #message.error { display: block; background: #fde8e8;
  border: 1px solid #c0392b; color: #8b1a10; }
#message.busy { display: block; background: #fff6d8; border: 1px solid #b7950b; }
#charts { display: flex; flex-wrap: wrap; gap: 1em; }
figure.chart { margin: 0; border: 1px solid #ddd; padding: 0.4em; }
figcaption { font-weight: 600; margin-bottom: 0.3em; }
table { border-collapse: collapse; margin-top: 1em; }
td, th { border: 1px solid #ccc; padding: 0.2em 0.4em; vertical-align: top;
  max-width: 32em; overflow-wrap: anywhere; }
th { background: #f2f2f2; }
.code { font-family: monospace; }
.conf { color: #555; font-size: 0.85em; }
"""

_SCRIPT = r"""
"use strict";
const token = new URLSearchParams(location.search).get("token") || "";
const SVG = "http://www.w3.org/2000/svg";
const PAGE = 50;
const state = {recipe: null, offset: 0, total: 0};
const $ = (id) => document.getElementById(id);

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (cls) node.className = cls;
  return node;
}

function svgEl(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

async function api(path, body) {
  const init = body === undefined ? {} : {
    method: "POST", headers: {"Content-Type": "application/json"},
    body: JSON.stringify(body)};
  return fetch(path + "?token=" + encodeURIComponent(token), init);
}

function selection() {
  return state.recipe ? {recipe: state.recipe} : {sql: $("sql").value};
}

function showMessage(kind, text) {
  const box = $("message");
  box.className = kind;
  box.textContent = text;
}

async function run(offset) {
  showMessage("", "");
  $("status").textContent = "running…";
  const response = await api("/api/query", {...selection(), offset: offset, limit: PAGE});
  const data = await response.json();
  if (!response.ok) {
    const prefix = data.kind === "refused" ? "Refused: " : "Error: ";
    showMessage(data.kind, prefix + data.error);
    $("status").textContent = "";
    return;
  }
  state.offset = data.offset;
  state.total = data.total;
  renderRows(data);
  renderCharts(data.distributions);
  const last = Math.min(data.offset + data.rows.length, data.total);
  $("status").textContent = data.total + " rows; showing " +
    (data.rows.length ? data.offset + 1 : 0) + "–" + last;
  $("prev").disabled = data.offset === 0;
  $("next").disabled = last >= data.total;
}

function renderRows(data) {
  const table = $("rows");
  table.replaceChildren();
  const categories = [];
  for (const row of data.rows) {
    for (const cat of Object.keys(row.codes)) {
      if (!categories.includes(cat)) categories.push(cat);
    }
  }
  const head = el("tr");
  for (const name of [...data.columns, ...categories]) head.append(el("th", name));
  table.append(head);
  for (const row of data.rows) {
    const tr = el("tr");
    for (const cell of row.cells) tr.append(el("td", cell));
    for (const cat of categories) {
      const td = el("td");
      const code = row.codes[cat];
      if (code) {
        td.append(el("span", code.code, "code"), " ", el("span", code.label));
        if (code.confidence !== null) {
          td.append(" ", el("span", "(" + code.confidence.toFixed(2) + ")", "conf"));
        }
        td.title = "secondary: " + (code.secondary || "none");
      }
      tr.append(td);
    }
    table.append(tr);
  }
}

function renderCharts(distributions) {
  const box = $("charts");
  box.replaceChildren();
  for (const [category, bars] of Object.entries(distributions)) {
    const figure = el("figure", undefined, "chart");
    figure.dataset.category = category;
    figure.append(el("figcaption", category));
    figure.append(barChart(bars));
    box.append(figure);
  }
}

function barChart(bars) {
  const row = 18, labelWidth = 150, barWidth = 160, width = labelWidth + barWidth + 50;
  const max = Math.max(1, ...bars.map((b) => b.count));
  const svg = svgEl("svg", {width: width, height: bars.length * row + 4,
                            role: "img", "aria-label": "code counts"});
  bars.forEach((bar, i) => {
    const y = i * row + 2;
    const name = (bar.code + " " + bar.label).slice(0, 24);
    const group = svgEl("g", {});
    group.append(svgEl("title", {}, bar.code + " " + bar.label + ": " + bar.count));
    group.append(svgEl("text", {x: 0, y: y + 12, "font-size": 11}, name));
    group.append(svgEl("rect", {x: labelWidth, y: y, height: row - 4, fill: "#3b6ea8",
                                width: Math.max(1, barWidth * bar.count / max)}));
    group.append(svgEl("text", {x: labelWidth + barWidth * bar.count / max + 4, y: y + 12,
                                "font-size": 11}, String(bar.count)));
    svg.append(group);
  });
  return svg;
}

async function download(format) {
  showMessage("", "");
  const response = await api("/api/export", {...selection(), format: format});
  if (!response.ok) {
    const data = await response.json();
    showMessage(data.kind, (data.kind === "refused" ? "Refused: " : "Error: ") + data.error);
    return;
  }
  const link = el("a");
  link.href = URL.createObjectURL(await response.blob());
  link.download = "selection." + format;
  link.click();
  URL.revokeObjectURL(link.href);
}

async function loadRecipes() {
  const data = await (await api("/api/recipes")).json();
  const pick = $("recipe");
  for (const name of Object.keys(data.recipes)) pick.append(el("option", name));
  pick.addEventListener("change", () => {
    state.recipe = pick.value || null;
    $("sql").value = state.recipe ? data.recipes[state.recipe] : "SELECT * FROM corpus";
  });
}

$("sql").addEventListener("input", () => { state.recipe = null; $("recipe").value = ""; });
$("run").addEventListener("click", () => run(0));
$("prev").addEventListener("click", () => run(Math.max(0, state.offset - PAGE)));
$("next").addEventListener("click", () => run(state.offset + PAGE));
$("csv").addEventListener("click", () => download("csv"));
$("parquet").addEventListener("click", () => download("parquet"));
loadRecipes().then(() => run(0));
"""

_BODY = """<h1>sparsegnn curation</h1>
<div class="controls">
  <label>Recipe <select id="recipe"><option value="">(your SQL)</option></select></label>
  <button id="run" type="button">Run</button>
  <button id="csv" type="button">Export CSV</button>
  <button id="parquet" type="button">Export Parquet</button>
</div>
<textarea id="sql" rows="6" spellcheck="false">SELECT * FROM corpus</textarea>
<div id="message" role="alert"></div>
<div class="controls">
  <button id="prev" type="button" disabled>Previous</button>
  <button id="next" type="button" disabled>Next</button>
  <span id="status"></span>
</div>
<h2>Code distributions (primary codes; FDC by main class)</h2>
<div id="charts"></div>
<h2>Rows</h2>
<table id="rows"></table>
"""


def page_html(nonce: str) -> str:
    """The page, its inline script and style marked with ``nonce`` (URL-safe characters
    from ``secrets``, so it needs no escaping)."""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width">\n'
            f'<link rel="icon" href="data:,">\n<title>sparsegnn curation</title>\n'
            f'<style nonce="{nonce}">{_STYLE}</style></head>\n<body>\n{_BODY}'
            f'<script nonce="{nonce}">{_SCRIPT}</script>\n</body></html>\n')
