/* The workstreams view: workstreams and their runs, a run's graph (inline SVG: each step a box
   with its name and its state in words, beside a colour; each need an arrow) with the same steps
   in a table, and the recovery operations of the API (retry the whole workstream, retry the failed
   steps, resume from a step, roll back to a checkpoint, skip or cancel a step with a required
   reason, remove a dependency in this run), each asked for confirmation first. */
"use strict";
(() => {
  const { api, h, fill, say, ago, confirm, act } = Rb;
  const $ = (id) => document.getElementById(id);
  const enc = encodeURIComponent;
  const SYMBOL = { pending: "·", waiting: "…", running: "▶", succeeded: "✔", skipped: "↷", failed: "✖", cancelled: "⊘", blocked: "■" };
  const DONE = new Set(["succeeded", "skipped"]);
  let chosen = null; /* the workstream whose runs are listed */
  let openRun = null; /* the workstream run whose graph is shown */

  const stateText = (state) => `${SYMBOL[state] || ""} ${state}`.trim();

  /* ------------------------------------------------------------------ the graph */
  const BOX_W = 180, BOX_H = 52, GAP_X = 56, GAP_Y = 20, PAD = 10;
  /* Each step's column: one more than its deepest need, removed needs included, so a run keeps the
     shape of its workstream and a removed need is drawn as a dashed arrow between columns. */
  function levels(steps) {
    const by = Object.fromEntries(steps.map((s) => [s.step, s]));
    const level = {};
    const depth = (name, seen) => {
      if (name in level) return level[name];
      const step = by[name];
      const needs = (step ? [...step.needs, ...(step.removed_needs || [])] : []).filter((n) => by[n] && !seen.has(n));
      level[name] = needs.length ? 1 + Math.max(...needs.map((n) => depth(n, new Set([...seen, name])))) : 0;
      return level[name];
    };
    steps.forEach((s) => depth(s.step, new Set()));
    return level;
  }

  function drawGraph(svg, run) {
    const el = (tag, attrs, text) => {
      const node = document.createElementNS(svg.namespaceURI, tag);
      for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
      if (text !== undefined) node.textContent = text;
      return node;
    };
    const level = levels(run.steps);
    const columns = [];
    run.steps.forEach((s) => (columns[level[s.step]] ||= []).push(s));
    const at = {};
    columns.forEach((steps, l) => steps.forEach((s, i) => { at[s.step] = { x: PAD + l * (BOX_W + GAP_X), y: PAD + i * (BOX_H + GAP_Y) }; }));
    const width = PAD * 2 + columns.length * (BOX_W + GAP_X) - GAP_X;
    const height = PAD * 2 + Math.max(...columns.map((c) => c.length)) * (BOX_H + GAP_Y) - GAP_Y;
    svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    svg.setAttribute("width", width);
    svg.setAttribute("height", height);
    const arrow = el("marker", { id: "ws-arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" });
    arrow.append(el("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrow" }));
    const parts = [el("defs", {})];
    parts[0].append(arrow);
    const edge = (from, to, removed) => {
      const a = at[from], b = at[to];
      if (!a || !b) return null;
      const x1 = a.x + BOX_W, y1 = a.y + BOX_H / 2, x2 = b.x - 2, y2 = b.y + BOX_H / 2;
      const mid = (x1 + x2) / 2;
      return el("path", { d: `M ${x1} ${y1} C ${mid} ${y1}, ${mid} ${y2}, ${x2} ${y2}`, class: removed ? "edge removed" : "edge", "marker-end": "url(#ws-arrow)" });
    };
    for (const s of run.steps) {
      for (const need of s.needs) parts.push(edge(need, s.step, false));
      for (const need of s.removed_needs || []) parts.push(edge(need, s.step, true));
    }
    for (const s of run.steps) {
      const { x, y } = at[s.step];
      const node = el("g", { class: `node state-${s.state}`, "data-step": s.step });
      node.append(el("title", {}, `${s.step}: ${s.state}${s.reason ? " — " + s.reason : ""}`),
        el("rect", { x, y, width: BOX_W, height: BOX_H, rx: 6 }),
        el("text", { x: x + 8, y: y + 20, class: "name" }, s.step),
        el("text", { x: x + 8, y: y + 40, class: "state" }, stateText(s.state) + (s.critical ? "" : " · non-critical")));
      parts.push(node);
    }
    svg.replaceChildren(...parts.filter(Boolean));
  }

  function counts(steps) {
    const n = {};
    for (const s of steps) n[s.state] = (n[s.state] || 0) + 1;
    return Object.entries(n).map(([state, k]) => `${k} ${state}`).join(", ");
  }

  /* ------------------------------------------------------------------ the operations */
  async function operate(title, text, method, path, body, done) {
    if (!(await confirm(title, text))) { say(`${title.replace(/\?$/, "")}: cancelled; nothing changed.`); return; }
    try {
      const out = await api(method, path, body);
      say(done(out), "ok");
      if (out.run_id) openRun = out.run_id;
    } catch (error) { say(`${title.replace(/\?$/, "")} refused: ${error.message}`, "bad"); }
    await Rb.refresh(false);
  }

  const changed = (what) => (out) => {
    const parts = [`${what}: the run is ${out.state}`];
    if (out.started_steps && out.started_steps.length) parts.push(`started ${out.started_steps.join(", ")}`);
    for (const [step, why] of Object.entries(out.not_rolled_back || {})) parts.push(`not rolled back: ${step} (${why})`);
    return parts.join("; ") + ".";
  };

  function needsReason(verb, step) {
    const reason = $("ws-reason");
    if (reason.value.trim()) return reason.value.trim();
    $("ws-reason-error").textContent = `A reason is required to ${verb} step ${step}.`;
    reason.setAttribute("aria-invalid", "true");
    reason.focus();
    return null;
  }

  function stepAction(run, step, verb) {
    return () => act(async () => {
      const reason = needsReason(verb, step);
      if (!reason) return;
      $("ws-reason-error").textContent = "";
      $("ws-reason").removeAttribute("aria-invalid");
      const what = verb === "skip" ? "marked completed, with a warning" : "cancelled; the steps that need it stop needing it";
      await operate(`${verb === "skip" ? "Skip" : "Cancel"} step ${step}?`, `Step ${step} of run ${run} will be ${what}. ` +
        `Reason: "${reason}".`, "POST", `/workstream-runs/${enc(run)}/steps/${enc(step)}/${verb}`, { reason },
        changed(`Step ${step} ${verb === "skip" ? "skipped" : "cancelled"}`));
      $("ws-reason").value = "";
    });
  }

  function removeNeed(run, step, need) {
    return () => act(() => operate(`Remove ${step}'s need of ${need}?`, `In run ${run} only, step ${step} no longer waits for ` +
      `${need} (the workstream's definition is unchanged).`, "DELETE", `/workstream-runs/${enc(run)}/steps/${enc(step)}/needs/${enc(need)}`,
    undefined, changed(`${step} no longer needs ${need}`)));
  }

  function resume(run, from) {
    return () => act(() => operate("Resume this run?", from ? `Step ${from} and every step after it run again (the steps it needs must be completed).`
      : "The run carries on from where it stopped.", "POST", `/workstream-runs/${enc(run)}/resume`, from ? { from_step: from } : {},
    changed(from ? `Resumed from ${from}` : "Resumed")));
  }

  /* ------------------------------------------------------------------ rendering */
  function fillSelect(select, options) {
    const kept = select.value;
    select.replaceChildren(...options.map(([value, label]) => h("option", { value }, label)));
    if (options.some(([value]) => value === kept)) select.value = kept;
  }

  async function showRun(runId) {
    const run = await api("GET", `/workstreams/${enc(runId)}`);
    const checkpoints = await api("GET", `/workstream-runs/${enc(runId)}/checkpoints`);
    $("ws-run-title").textContent = `Run ${run.run_id} of ${run.workstream_id}: ${run.state}`;
    $("ws-run-summary").textContent = `State: ${run.state}${run.reason ? " (" + run.reason + ")" : ""}. Started ${run.started_at}` +
      `${run.ended_at ? ", ended " + run.ended_at : ""}. Steps: ${counts(run.steps)}. Checkpoint ${run.checkpoint}.`;
    $("ws-run-summary").className = run.state === "completed" ? "ok" : run.state === "failed" ? "bad" : "";
    drawGraph($("ws-graph"), run);
    $("ws-graph-text").textContent = `Graph of ${run.workstream_id}: ` + run.steps.map((s) =>
      `${s.step} is ${s.state}${s.needs.length ? " (needs " + s.needs.join(", ") + ")" : ""}`).join("; ") + ".";
    fill($("ws-steps").tBodies[0], run.steps.map((s) => h("tr", { "data-step": s.step },
      h("th", { scope: "row" }, s.step + (s.critical ? "" : " (non-critical)")),
      h("td", { class: `step-state state-${s.state}` }, stateText(s.state)),
      h("td", {}, s.needs.map((need) => h("span", { class: "need" }, need, DONE.has(s.state) ? null : [" ",
        h("button", { type: "button", onclick: removeNeed(run.run_id, s.step, need), "aria-label": `Remove ${s.step}'s need of ${need}` }, "Remove…")])),
      s.removed_needs && s.removed_needs.length ? ` (removed: ${s.removed_needs.join(", ")})` : null),
      h("td", {}, s.run_id ? h("button", { type: "button", onclick: () => Rb.openRun(s.run_id), "aria-label": `Timeline of ${s.step}'s run` }, s.run_id) : "—"),
      h("td", { class: "num" }, s.tries),
      h("td", {}, [s.reason, s.warning].filter(Boolean).join("; ")),
      h("td", {},
        DONE.has(s.state) || s.state === "running" ? null : [h("button", { type: "button", onclick: stepAction(run.run_id, s.step, "skip"),
          "aria-label": `Skip ${s.step}` }, "Skip…"), " "],
        DONE.has(s.state) || s.state === "cancelled" ? null : [h("button", { type: "button", onclick: stepAction(run.run_id, s.step, "cancel"),
          "aria-label": `Cancel ${s.step}` }, "Cancel step…"), " "],
      h("button", { type: "button", onclick: resume(run.run_id, s.step), "aria-label": `Resume from ${s.step}` }, "Resume from here…")),
    )), "No steps.", 7);
    fillSelect($("ws-resume-from"), [["", "where it stopped"], ...run.steps.map((s) => [s.step, s.step])]);
    fillSelect($("ws-rollback-to"), [["", "the checkpoint before the latest"], ...checkpoints.slice().reverse().map((c) =>
      [String(c.version), `${c.version}: ${c.cause} (${c.state}, ${c.completed.length} completed)`])]);
    $("ws-run").hidden = false;
  }

  async function showRuns(workstreamId) {
    const runs = await api("GET", `/workstreams/${enc(workstreamId)}/runs`);
    $("ws-runs-caption").textContent = `Runs of ${workstreamId}, latest first`;
    fill($("ws-runs").tBodies[0], runs.map((r) => h("tr", { "aria-current": r.run_id === openRun ? "true" : null },
      h("th", { scope: "row" }, r.run_id), h("td", { class: r.state === "completed" ? "ok" : r.state === "failed" ? "bad" : "" }, r.state),
      h("td", {}, counts(r.steps)), h("td", {}, ago(r.started_at)), h("td", {}, r.ended_at ? ago(r.ended_at) : "—"),
      h("td", {}, h("button", { type: "button", onclick: () => { openRun = r.run_id; Rb.refresh(false); }, "aria-label": `Graph of ${r.run_id}` }, "Graph")))),
    "No runs yet: start one.", 6);
    if (!openRun && runs.length) openRun = runs[0].run_id;
  }

  async function start(workstreamId) {
    await operate(`Start a run of ${workstreamId}?`, `Its root steps start now; each step runs through the retry loop.`, "POST",
      `/workstreams/${enc(workstreamId)}/run`, {}, (out) => `Started run ${out.run_id} of ${workstreamId}.`);
    chosen = workstreamId;
  }

  Rb.views.workstreams = {
    init() {
      const run = () => openRun;
      $("ws-retry-failed").addEventListener("click", () => act(() => operate("Retry the failed steps?",
        `The failed steps of run ${run()} run again, each with a fresh task run.`, "POST", `/workstream-runs/${enc(run())}/retry-failed`, {},
        changed("Failed steps retried"))));
      $("ws-resume").addEventListener("click", () => resume(run(), $("ws-resume-from").value)());
      $("ws-rollback").addEventListener("click", () => act(() => {
        const to = $("ws-rollback-to").value;
        return operate("Roll back this run?", `Run ${run()} goes back to ${to ? "checkpoint " + to : "the checkpoint before the latest"}: ` +
          "running steps are cancelled, queued ones reset, resources released. Completed steps keep their state. It then waits for Resume.",
        "POST", `/workstream-runs/${enc(run())}/rollback`, to ? { to: Number(to) } : {}, changed("Rolled back"));
      }));
      $("ws-retry").addEventListener("click", () => act(() => operate("Retry the whole workstream?",
        `A new run of the workstream starts from its root steps (run ${run()} stays as it is).`, "POST", `/workstream-runs/${enc(run())}/retry`, {},
        (out) => `Started run ${out.run_id}: the whole workstream again.`)));
      $("ws-reason").addEventListener("input", () => { $("ws-reason-error").textContent = ""; $("ws-reason").removeAttribute("aria-invalid"); });
    },
    async refresh(poll) {
      /* a poll never redraws under an operator choosing a checkpoint or typing a reason */
      if (poll && $("ws-actions").contains(document.activeElement) && document.activeElement.tagName !== "BUTTON") return;
      const list = await api("GET", "/workstreams");
      fill($("ws-list").tBodies[0], list.map((w) => h("tr", { "aria-current": w.workstream_id === chosen ? "true" : null },
        h("th", { scope: "row" }, w.workstream_id), h("td", {}, w.tenant), h("td", {}, w.trigger), h("td", {}, w.steps.join(", ")),
        h("td", {}, w.last_run ? `${w.last_state} (${w.last_run})` : "never run"),
        h("td", {},
          h("button", { type: "button", onclick: () => { chosen = w.workstream_id; openRun = null; Rb.refresh(false); }, "aria-label": `Runs of ${w.workstream_id}` }, "Runs"), " ",
          h("button", { type: "button", onclick: () => act(() => start(w.workstream_id)), "aria-label": `Start a run of ${w.workstream_id}` }, "Start a run…")),
      )), "No workstreams registered: rebound workstreams apply FILE.", 6);
      if (!chosen && list.length) chosen = list[0].workstream_id;
      if (chosen) await showRuns(chosen);
      if (openRun) await showRun(openRun);
    },
  };
})();
