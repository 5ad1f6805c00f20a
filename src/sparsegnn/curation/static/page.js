"use strict";
// The curate serve page. Everything from the server is data: it is written with
// textContent, never as markup. The query, page, sort, filters and open row live in the
// URL, so a reload or a shared link shows the same result.
const $ = (id) => document.getElementById(id);
const token = new URLSearchParams(location.search).get("token") || "";
const DEFAULT_SQL = "SELECT * FROM corpus";
const SIZES = [10, 25, 50, 100, 200];
const TAXONOMY = "eai_taxonomy";
const SUFFIX = {csv: ".csv", parquet: ".parquet", json: ".jsonl"};
const OPS = {eq: "=", ne: "≠", prefix: "starts with", contains: "contains", gt: ">", lt: "<"};
let recipes = {};
let state = fromUrl();
let runs = 0;  // answers to an older run are dropped

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (cls) node.className = cls;
  return node;
}

function fromUrl() {
  const u = new URLSearchParams(location.search);
  const size = Number(u.get("size"));
  return {
    recipe: u.get("recipe") || "", sql: u.get("sql") || DEFAULT_SQL, params: u.getAll("p"),
    filters: u.getAll("f").map(parseFilter).filter((f) => f !== null),
    search: u.get("q") || "", sort: u.get("sort") || "", desc: u.get("desc") === "1",
    page: Math.max(1, parseInt(u.get("page") || "1", 10) || 1),
    size: SIZES.includes(size) ? size : 50,
    row: u.has("row") ? Math.max(0, parseInt(u.get("row"), 10) || 0) : null,
  };
}

function parseFilter(text) {
  const [field, op, ...value] = text.split(":");
  return field && op ? {field: field, op: op, value: value.join(":")} : null;
}

function toUrl(push) {
  const u = new URLSearchParams({token: token});
  if (state.recipe) u.set("recipe", state.recipe); else u.set("sql", state.sql);
  for (const p of state.params) u.append("p", p);
  for (const f of state.filters) u.append("f", f.field + ":" + f.op + ":" + f.value);
  if (state.search) u.set("q", state.search);
  if (state.sort) u.set("sort", state.sort);
  if (state.sort && state.desc) u.set("desc", "1");
  if (state.page > 1) u.set("page", String(state.page));
  if (state.size !== 50) u.set("size", String(state.size));
  if (state.row !== null) u.set("row", String(state.row));
  const url = "?" + u.toString();
  if (url !== location.search) history[push ? "pushState" : "replaceState"](null, "", url);
}

function selection() {
  return {...(state.recipe ? {recipe: state.recipe} : {sql: state.sql}),
          params: state.params, filters: state.filters, search: state.search,
          sort: state.sort, descending: state.desc};
}

async function api(path, body) {
  const init = body === undefined ? {} : {
    method: "POST", headers: {"Content-Type": "application/json"},
    body: JSON.stringify(body)};
  return fetch(path + "?token=" + encodeURIComponent(token), init);
}

async function answer(response) {
  try {
    return await response.json();
  } catch {
    return {error: "the server answered " + response.status + " without a message",
            kind: "error"};
  }
}

function showMessage(kind, text) {
  $("message").className = kind;
  $("message").textContent = text;
}

function showError(data) {
  const prefix = {refused: "Refused: ", busy: "Busy: ", forbidden: "Forbidden: "};
  showMessage(data.kind, (prefix[data.kind] || "Error: ") + data.error);
}

// ---------------------------------------------------------------- parameters
function countParams(sql) {
  // `?` outside strings, quoted names and comments
  let n = 0;
  for (let i = 0; i < sql.length; i++) {
    const c = sql[i];
    let end = -1;
    if (c === "'" || c === "\"") end = sql.indexOf(c, i + 1);
    else if (c === "-" && sql[i + 1] === "-") end = sql.indexOf("\n", i);
    else if (c === "/" && sql[i + 1] === "*") end = sql.indexOf("*/", i + 2) + 1;
    else if (c === "?") { n++; continue; } else continue;
    i = end <= 0 ? sql.length : end;
  }
  return n;
}

function renderParams() {
  const n = state.recipe ? 0 : countParams(state.sql);
  state.params = state.params.slice(0, n);
  while (state.params.length < n) state.params.push("");
  const box = $("params");
  if (box.children.length === n) return;
  box.replaceChildren();
  state.params.forEach((value, i) => {
    const label = el("label", "? " + (i + 1) + " ");
    const input = el("input", undefined, "param");
    input.value = value;
    input.addEventListener("input", () => { state.params[i] = input.value; });
    input.addEventListener("keydown", (e) => { if (e.key === "Enter") fresh(); });
    label.append(input);
    box.append(label);
  });
}

function syncInputs() {
  $("recipe").value = state.recipe in recipes ? state.recipe : "";
  $("sql").value = state.recipe ? (recipes[state.recipe] || "") : state.sql;
  $("search").value = state.search;
  $("size").value = String(state.size);
  $("params").replaceChildren();  // rebuilt with the state's values
  renderParams();
  renderFilters();
}

// ---------------------------------------------------------------- running
function clearResults() {
  for (const id of ["rows", "facets", "fields", "composed", "composed-params", "status"]) {
    $(id).replaceChildren();
  }
  $("detail").hidden = true;
  $("prev").disabled = true;
  $("next").disabled = true;
}

function fresh() {
  state.page = 1;
  state.row = null;
  run(true);
}

async function run(push) {
  toUrl(push);
  const mine = ++runs;
  clearResults();  // an error then replaces the old rows instead of sitting above them
  showMessage("", "");
  $("status").textContent = "running…";
  const offset = (state.page - 1) * state.size;
  const response = await api("/api/query", {...selection(), offset: offset,
                                            limit: state.size});
  const data = await answer(response);
  if (mine !== runs) return;
  $("status").textContent = "";
  if (!response.ok) {
    showError(data);
    return;
  }
  $("composed").textContent = data.sql;
  $("composed-params").textContent =
    data.params.length ? "? values, in order: " + JSON.stringify(data.params) : "";
  renderRows(data);
  renderFacets(data.distributions);
  renderFields(data.fields);
  const last = Math.min(data.offset + data.rows.length, data.total);
  $("status").textContent = data.total + " rows; showing " +
    (data.rows.length ? data.offset + 1 : 0) + "–" + last;
  $("prev").disabled = state.page === 1;
  $("next").disabled = last >= data.total;
  if (state.row !== null) showDetail(state.row, false);
}

function sortBy(key) {
  if (state.sort !== key) { state.sort = key; state.desc = false; }
  else if (!state.desc) state.desc = true;
  else { state.sort = ""; state.desc = false; }
  fresh();
}

function header(name, key) {
  const th = el("th");
  const mark = state.sort === key ? (state.desc ? " ▼" : " ▲") : "";
  const button = el("button", name + mark);
  button.type = "button";
  button.title = "sort by " + key;
  button.dataset.sort = key;
  button.addEventListener("click", () => sortBy(key));
  th.append(button);
  return th;
}

function renderRows(data) {
  const categories = [];
  for (const row of data.rows) {
    for (const cat of Object.keys(row.codes)) {
      if (!categories.includes(cat)) categories.push(cat);
    }
  }
  const head = el("tr");
  for (const name of data.columns) head.append(header(name, name));
  for (const cat of categories) head.append(header(cat, TAXONOMY + "." + cat + ".primary.code"));
  const thead = el("thead");
  thead.append(head);
  const tbody = el("tbody");
  data.rows.forEach((row, i) => {
    const tr = el("tr");
    tr.dataset.index = String(data.offset + i);
    tr.title = "show the whole row";
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
    tr.addEventListener("click", () => showDetail(data.offset + i, true));
    tbody.append(tr);
  });
  $("rows").replaceChildren(thead, tbody);
}

function renderFacets(distributions) {
  const box = $("facets");
  for (const [category, bars] of Object.entries(distributions)) {
    const section = el("section", undefined, "facet-group");
    section.dataset.category = category;
    section.append(el("h3", category));
    const max = Math.max(1, ...bars.map((b) => b.count));
    for (const bar of bars) {
      const button = el("button", undefined, "facet");
      button.type = "button";
      button.append(el("span", bar.code + " " + bar.label, "facet-name"),
                    el("span", String(bar.count), "count"));
      const line = el("span", undefined, "bar");
      line.style.width = (100 * bar.count / max) + "%";
      button.append(line);
      if (bar.filter) {
        button.title = "keep only " + bar.filter.field + " " + bar.filter.op + " " +
          bar.filter.value;
        button.addEventListener("click", () => addFilter(bar.filter));
      } else {
        button.disabled = true;
      }
      section.append(button);
    }
    box.append(section);
  }
}

function renderFields(fields) {
  const pick = $("filter-field");
  const chosen = pick.value;
  pick.replaceChildren();
  const table = $("fields");
  for (const field of fields) {
    const tr = el("tr");
    tr.append(el("td", field.name, "code"), el("td", field.type));
    table.append(tr);
    pick.append(el("option", field.name));
  }
  if (fields.some((f) => f.name === chosen)) pick.value = chosen;
}

// ---------------------------------------------------------------- filters
function addFilter(filter) {
  const same = (f) => f.field === filter.field && f.op === filter.op && f.value === filter.value;
  if (!state.filters.some(same)) state.filters.push(filter);
  renderFilters();
  fresh();
}

function renderFilters() {
  const list = $("filters");
  list.replaceChildren();
  state.filters.forEach((f, i) => {
    const item = el("li", f.field + " " + (OPS[f.op] || f.op) + " " +
                    JSON.stringify(f.value) + " ");
    const remove = el("button", "×");
    remove.type = "button";
    remove.title = "remove this filter";
    remove.addEventListener("click", () => {
      state.filters.splice(i, 1);
      renderFilters();
      fresh();
    });
    item.append(remove);
    list.append(item);
  });
}

// ---------------------------------------------------------------- one row whole
async function showDetail(index, push) {
  state.row = index;
  toUrl(push);
  const mine = runs;
  const response = await api("/api/row", {...selection(), index: index});
  const data = await answer(response);
  if (mine !== runs || state.row !== index) return;
  if (!response.ok) {
    showError(data);
    return;
  }
  $("detail-title").textContent = "Row " + (index + 1);
  for (const tr of $("rows").querySelectorAll("tbody tr")) {
    tr.classList.toggle("open", tr.dataset.index === String(index));
  }
  const codes = $("detail-codes");
  const head = el("tr");
  for (const name of ["category", "primary", "label", "confidence", "secondary", "label"]) {
    head.append(el("th", name));
  }
  codes.replaceChildren(head);
  for (const [cat, c] of Object.entries(data.codes)) {
    const tr = el("tr");
    tr.dataset.category = cat;
    tr.append(el("td", cat), el("td", c.code, "code"), el("td", c.label),
              el("td", c.confidence === null ? "" : c.confidence.toFixed(4)),
              el("td", c.secondary, "code"), el("td", c.secondary_label));
    codes.append(tr);
  }
  const fields = $("detail-fields");
  fields.replaceChildren();
  for (const field of data.fields) {
    const tr = el("tr");
    tr.dataset.field = field.name;
    const value = el("td");
    value.append(el("pre", field.value));
    tr.append(el("th", field.name), value);
    fields.append(tr);
  }
  $("detail").hidden = false;
  $("detail").scrollIntoView({block: "nearest"});
}

// ---------------------------------------------------------------- exports
async function download(format) {
  showMessage("", "");
  const response = await api("/api/export", {...selection(), format: format});
  if (!response.ok) {
    showError(await answer(response));
    return;
  }
  const link = el("a");
  link.href = URL.createObjectURL(await response.blob());
  link.download = "selection" + SUFFIX[format];
  link.click();
  URL.revokeObjectURL(link.href);
  $("status").textContent += " · exported " + link.download;
}

// ---------------------------------------------------------------- wiring
async function loadRecipes() {
  const response = await api("/api/recipes");
  const data = await answer(response);
  if (!response.ok) {
    showError(data);
    return;
  }
  recipes = data.recipes;
  for (const name of Object.keys(recipes)) $("recipe").append(el("option", name));
  const unavailable = Object.entries(data.unavailable);
  if (unavailable.length) {
    $("recipe").title = unavailable.map(([name, why]) => name + ": " + why).join("\n");
  }
}

function newBase() {
  state.filters = [];
  state.search = "";
  state.sort = "";
  state.desc = false;
  syncInputs();
  fresh();
}

$("recipe").addEventListener("change", () => {
  state.recipe = $("recipe").value;
  state.sql = state.recipe ? DEFAULT_SQL : $("sql").value;
  newBase();
});
$("sql").addEventListener("input", () => {
  state.recipe = "";
  state.sql = $("sql").value;
  $("recipe").value = "";
  renderParams();
});
$("run").addEventListener("click", () => {
  if (!state.recipe) state.sql = $("sql").value;
  fresh();
});
$("search-go").addEventListener("click", () => { state.search = $("search").value; fresh(); });
$("search").addEventListener("keydown", (e) => {
  if (e.key === "Enter") { state.search = $("search").value; fresh(); }
});
$("filter-add").addEventListener("click", () => {
  if ($("filter-field").value) {
    addFilter({field: $("filter-field").value, op: $("filter-op").value,
               value: $("filter-value").value});
  }
});
$("size").addEventListener("change", () => { state.size = Number($("size").value); fresh(); });
$("prev").addEventListener("click", () => { state.page -= 1; state.row = null; run(true); });
$("next").addEventListener("click", () => { state.page += 1; state.row = null; run(true); });
$("detail-close").addEventListener("click", () => {
  state.row = null;
  $("detail").hidden = true;
  toUrl(true);
});
for (const [op, name] of Object.entries(OPS)) {
  const option = el("option", name);
  option.value = op;
  $("filter-op").append(option);
}
for (const format of Object.keys(SUFFIX)) {
  $(format).addEventListener("click", () => download(format));
}
window.addEventListener("popstate", () => {
  state = fromUrl();
  syncInputs();
  run(false);
});
loadRecipes().then(() => {
  syncInputs();  // a recipe this store cannot run stays asked for: the answer says why
  run(false);
});
