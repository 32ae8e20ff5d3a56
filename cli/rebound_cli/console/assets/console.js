/* The Rebound console's core: the API client (CSRF header on changes), a DOM builder that never
   parses data as HTML, the tabs (arrow keys move between them) and what they show in the URL
   (#<view>, #run/<run id>: back and forward work, and a run has a page of its own), a
   confirmation dialog, and the poll that refreshes the visible view every few seconds. The views
   are in views.js, tasks.js and workstreams.js. */
"use strict";
const Rb = (() => {
  const CSRF = document.querySelector('meta[name="csrf-token"]').content;
  const POLL_MS = 4000;
  const views = {};
  const routes = {}; /* #<name>/<argument>: a view's page of one thing (routes.run opens a run) */
  let active = "overview";
  let routing = false; /* applying the URL (back, forward, a link): do not add to the history */
  let paused = false;
  let busy = false;
  let acting = 0;

  /* An operator's action: no poll runs while it is under way (a poll must not interleave a redrive). */
  async function act(fn) {
    acting += 1;
    try { return await fn(); } finally { acting -= 1; }
  }

  async function api(method, path, body) {
    return (await call(method, path, body)).data;
  }

  /* The whole answer: status, data and the headers (a page's X-Next-After). */
  async function call(method, path, body) {
    const opts = { method, headers: { Accept: "application/json" }, credentials: "same-origin" };
    if (method !== "GET") {
      opts.headers["X-CSRF-Token"] = CSRF;
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body ?? {});
    }
    const response = await fetch("/api" + path, opts);
    const data = await response.json().catch(() => null);
    if (!response.ok || (response.status === 202 && data && data.code === "APPROVAL_REQUIRED")) {
      /* 202 APPROVAL_REQUIRED: nothing was done; the request waits for a second operator. */
      const error = new Error((data && data.message) || response.statusText);
      error.status = response.status;
      error.data = data || {};
      throw error;
    }
    return { status: response.status, data, headers: response.headers };
  }

  function query(params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, v);
    const s = q.toString();
    return s ? "?" + s : "";
  }

  /* h("td", {class: "num"}, "12") — text children become text nodes, never HTML. */
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else if (k === "text") el.textContent = v;
      else el.setAttribute(k, v === true ? "" : v);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return el;
  }

  /* Each cell is labelled with its column's heading (data-label): on a narrow screen the rows
     become stacked cards that say what each value is (console.css). */
  function fill(tbody, rows, empty, columns) {
    tbody.replaceChildren(...(rows.length ? rows : [h("tr", {}, h("td", { colspan: columns }, empty))]));
    const heads = [...(tbody.parentElement?.tHead?.rows[0]?.cells || [])].map((c) => c.textContent);
    for (const row of tbody.rows) [...row.cells].forEach((cell, i) => { if (heads[i]) cell.dataset.label = heads[i]; });
  }

  function say(text, kind) {
    const el = document.getElementById("status");
    el.textContent = text;
    el.className = kind || "";
  }

  function ago(iso) {
    if (!iso) return "";
    const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
    if (s < 120) return `${Math.round(s)} s ago`;
    if (s < 7200) return `${Math.round(s / 60)} min ago`;
    if (s < 172800) return `${Math.round(s / 3600)} h ago`;
    return `${Math.round(s / 86400)} d ago`;
  }

  let svgNs = null; /* the namespace of the page's own <svg> elements (no URL written here) */
  function s(tag, attrs, text) {
    const el = document.createElementNS(svgNs, tag);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
    if (text !== undefined) el.textContent = text;
    return el;
  }

  /* A line chart of values (oldest first) into an inline <svg>: no library, nothing fetched. */
  function lineChart(svg, values, labelFirst, labelLast) {
    svgNs = svg.namespaceURI;
    const W = 420, H = 140, L = 34, B = 18, T = 8;
    const top = Math.max(1, ...values);
    const x = (i) => L + (values.length > 1 ? (i * (W - L - 6)) / (values.length - 1) : 0);
    const y = (v) => T + (H - B - T) * (1 - v / top);
    const parts = [s("line", { class: "axis", x1: L, y1: H - B, x2: W - 4, y2: H - B }),
      s("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }),
      s("text", { x: 2, y: T + 8 }, String(top)), s("text", { x: 2, y: H - B }, "0"),
      s("text", { x: L, y: H - 4 }, labelFirst || ""), s("text", { x: W - 90, y: H - 4 }, labelLast || "")];
    if (values.length) parts.push(s("polyline", { class: "line", points: values.map((v, i) => `${x(i)},${y(v)}`).join(" ") }));
    svg.replaceChildren(...parts);
  }

  /* Stacked bars: each bar is [good, bad] (drawn ok-coloured below, bad-coloured above). */
  function barChart(svg, bars, labelFirst, labelLast) {
    svgNs = svg.namespaceURI;
    const W = 420, H = 140, L = 34, B = 18, T = 8;
    const top = Math.max(1, ...bars.map(([a, b]) => a + b));
    const w = (W - L - 6) / Math.max(bars.length, 1);
    const hgt = (v) => ((H - B - T) * v) / top;
    const parts = [s("line", { class: "axis", x1: L, y1: H - B, x2: W - 4, y2: H - B }),
      s("text", { x: 2, y: T + 8 }, String(top)), s("text", { x: 2, y: H - B }, "0"),
      s("text", { x: L, y: H - 4 }, labelFirst || ""), s("text", { x: W - 60, y: H - 4 }, labelLast || "")];
    bars.forEach(([good, bad], i) => {
      const x0 = L + i * w + 1;
      parts.push(s("rect", { class: "ok-bar", x: x0, width: Math.max(w - 2, 1), y: H - B - hgt(good), height: hgt(good) }));
      parts.push(s("rect", { class: "bad-bar", x: x0, width: Math.max(w - 2, 1), y: H - B - hgt(good) - hgt(bad), height: hgt(bad) }));
    });
    svg.replaceChildren(...parts);
  }

  function confirm(title, text) {
    const dialog = document.getElementById("confirm");
    document.getElementById("confirm-title").textContent = title;
    document.getElementById("confirm-text").textContent = text;
    return new Promise((resolve) => {
      dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
      dialog.returnValue = "";
      dialog.showModal();
      document.getElementById("confirm-cancel").focus();
    });
  }

  async function refresh(poll) {
    const view = views[active];
    if (!view || busy || (poll && acting)) return;
    busy = true;
    try {
      await view.refresh(poll);
      document.getElementById("refreshed").textContent = "updated " + new Date().toLocaleTimeString();
    } catch (error) {
      say(`Could not refresh: ${error.message}`, "bad");
    } finally {
      busy = false;
    }
  }

  /* The URL says what is shown: a new entry in the history for each thing an operator opens. */
  function remember(hash) {
    if (routing || location.hash === "#" + hash) return;
    history.pushState(null, "", "#" + hash);
  }

  function route() {
    const [name, ...rest] = location.hash.slice(1).split("/");
    const argument = rest.length ? decodeURIComponent(rest.join("/")) : "";
    routing = true;
    try {
      if (routes[name] && argument) routes[name](argument);
      else {
        if (views[name]?.reset) views[name].reset(); /* back to the list from one thing's page */
        show(views[name] ? name : "overview", false);
      }
    } finally { routing = false; }
  }

  function go(hash) { history.pushState(null, "", "#" + hash); route(); }

  function show(name, focus, hash) {
    remember(hash || name);
    active = name;
    for (const tab of document.querySelectorAll('[role="tab"]')) {
      const selected = tab.id === "tab-" + name;
      tab.setAttribute("aria-selected", String(selected));
      tab.tabIndex = selected ? 0 : -1;
      if (selected && focus) tab.focus();
      document.getElementById(tab.getAttribute("aria-controls")).hidden = !selected;
    }
    refresh(false);
  }

  function start() {
    const tabs = [...document.querySelectorAll('[role="tab"]')];
    tabs.forEach((tab, i) => {
      tab.addEventListener("click", () => show(tab.id.slice(4), false));
      tab.addEventListener("keydown", (event) => {
        const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
        if (step) show(tabs[(i + step + tabs.length) % tabs.length].id.slice(4), true);
        if (event.key === "Home") show(tabs[0].id.slice(4), true);
        if (event.key === "End") show(tabs[tabs.length - 1].id.slice(4), true);
      });
    });
    const pause = document.getElementById("pause");
    pause.addEventListener("click", () => {
      paused = !paused;
      pause.setAttribute("aria-pressed", String(paused));
      pause.textContent = paused ? "Resume updates" : "Pause updates";
    });
    for (const view of Object.values(views)) if (view.init) view.init();
    api("GET", "/health").then(
      (h) => { document.getElementById("env").textContent = "environment: " + h.environment; },
      (e) => say(`The API does not answer: ${e.message}`, "bad"),
    );
    window.addEventListener("popstate", route);
    document.getElementById("goto-run").addEventListener("submit", (event) => {
      event.preventDefault();
      const id = document.getElementById("goto-run-id").value.trim();
      if (id) go("run/" + encodeURIComponent(id));
    });
    route();
    setInterval(() => { if (!paused && !document.hidden) refresh(true); }, POLL_MS);
  }

  document.addEventListener("DOMContentLoaded", () => setTimeout(start, 0));
  return { api, call, query, h, fill, say, ago, confirm, act, show, go, refresh, views, routes, lineChart, barChart,
    get active() { return active; } };
})();
