/* The console's views: overview (queues, recovery status), DLQ, runs, work orders, policy tuning,
   feature flags and retry health. Each has refresh(poll); a poll never overwrites what the operator is editing. */
"use strict";
(() => {
  const { api, query, h, fill, say, ago, confirm, act } = Rb;
  const $ = (id) => document.getElementById(id);
  const STATES = ["running", "retry_scheduled", "failed", "dead_lettered", "succeeded_after_retry", "replayed"];
  const PAGE_TARGET_S = 300;
  const RECOVERY_AT_MOST = 200; /* counts stop past this ("more than 200"): a first screen stays fast */

  function formValues(form) {
    return Object.fromEntries([...new FormData(form).entries()].map(([k, v]) => [k, String(v).trim()]));
  }

  /* ---------------------------------------------------------------- overview */
  /* The DLQ chart: its history bucket by bucket from the DLQ's record (GET /dlq/history, read again
     once a bucket has passed), then the live depth from the queue's attributes as its last point. */
  const WINDOW_NAMES = { "1h": "last hour", "24h": "last 24 hours" };
  let dlqWindow = "1h";
  let dlqHistory = null;
  let dlqHistoryAt = 0;
  async function dlqChart(live) {
    if (!dlqHistory || dlqHistory.window !== dlqWindow || Date.now() - dlqHistoryAt >= dlqHistory.bucket_s * 1000) {
      dlqHistory = await api("GET", "/dlq/history" + query({ window: dlqWindow }));
      dlqHistoryAt = Date.now();
    }
    const hist = dlqHistory;
    const name = WINDOW_NAMES[hist.window] || hist.window;
    Rb.lineChart($("dlq-chart"), [...hist.points.map((p) => p.depth), live], name.replace("last ", "") + " ago", "now");
    $("dlq-window-name").textContent = name;
    const highest = Math.max(hist.start_depth, ...hist.points.map((p) => p.peak));
    $("dlq-chart-text").textContent = `DLQ depth now ${live}. Over the ${name}: ${hist.start_depth} at the start, ` +
      `highest ${highest}, ${hist.arrived} arrived, ${hist.left} left (from the DLQ's record, ` +
      `${Math.round(hist.bucket_s / 60)} min per point${hist.complete ? "" : "; INCOMPLETE: reading stopped at its limit"}).`;
  }
  function age(seconds) {
    if (seconds === null || seconds === undefined) return "unknown";
    if (seconds < 120) return `${Math.round(seconds)} s`;
    if (seconds < 7200) return `${Math.round(seconds / 60)} min`;
    return `${Math.round(seconds / 3600)} h`;
  }
  Rb.views.overview = {
    init() {
      for (const button of document.querySelectorAll(".dlq-window")) {
        button.addEventListener("click", () => {
          dlqWindow = button.dataset.window;
          for (const other of document.querySelectorAll(".dlq-window")) other.setAttribute("aria-pressed", String(other === button));
          Rb.refresh(false);
        });
      }
    },
    async refresh() {
      const queues = await api("GET", "/queues");
      fill($("queues").tBodies[0], queues.map((q) => h("tr", {},
        h("th", { scope: "row" }, q.queue + (q.dead_letter_queue ? " (DLQ)" : "")),
        h("td", { class: "num" }, q.visible), h("td", { class: "num" }, q.in_flight),
        h("td", { class: "num" }, q.delayed),
        h("td", { class: "num" + (q.dead_letter_queue && q.total ? " bad" : "") }, q.total),
        h("td", {}, q.oldest_age_s === null ? (q.total ? "unknown (no reading)" : "empty") : `${age(q.oldest_age_s)} (${q.age_source})`),
        h("td", {}, q.purpose),
      )), "no queues", 7);
      const r = await api("GET", "/runs/recovery" + query({ at_most: RECOVERY_AT_MOST }));
      const shown = (n) => (n > r.at_most ? `more than ${r.at_most}` : String(n));
      fill($("run-states").tBodies[0], STATES.map((state) => h("tr", {}, h("th", { scope: "row" }, state.replaceAll("_", " ")),
        h("td", { class: "num" }, shown(r.windows.hour[state])), h("td", { class: "num" }, shown(r.windows.day[state])))), "", 3);
      const rate = r.retry_success;
      const pct = (x) => `${Math.round(x * 1000) / 10} %`;
      const rateEl = $("retry-rate");
      rateEl.textContent = rate.rate === null
        ? `Retry success rate (last day): no retried run finished yet (target ${pct(rate.target)}).`
        : `Retry success rate (last day): ${pct(rate.rate)} — ${rate.meets_target ? "MEETS" : "BELOW"} the ${pct(rate.target)} target ` +
          `(${rate.succeeded} succeeded after a retry, ${rate.dead_lettered} dead-lettered${rate.sampled ? "; latest runs sampled" : ""}).`;
      rateEl.className = rate.rate === null ? "" : rate.meets_target ? "ok" : "bad";
      const hours = rate.by_hour;
      Rb.barChart($("retry-chart"), hours.map((x) => [x.succeeded, x.dead_lettered]), "24 h ago", "this hour");
      $("retry-chart-text").textContent = `Bars per hour: lower part succeeded after a retry (${rate.succeeded} in all), ` +
        `upper part dead-lettered (${rate.dead_lettered}). This hour: ${hours[hours.length - 1].succeeded} succeeded, ` +
        `${hours[hours.length - 1].dead_lettered} dead-lettered.`;
      const open = (await api("GET", "/workorders")).filter((o) => o.state !== "resolved");
      fill($("open-orders").tBodies[0], open.map((o) => {
        const age = (Date.now() - Date.parse(o.opened_at)) / 1000;
        const late = o.state === "open" && age > PAGE_TARGET_S;
        return h("tr", {}, h("td", {}, o.work_order_id), h("td", {}, o.state), h("td", {}, o.severity),
          h("td", {}, ago(o.opened_at)),
          h("td", { class: late ? "bad" : "ok" }, o.state !== "open" ? "acknowledged" : late ? "OVER target: unacknowledged > 5 min" : "within target"),
          h("td", {}, o.reason));
      }), "no open work orders", 6);
      /* last: the tables above are filled before the chart's history is read */
      const dlq = queues.find((q) => q.queue === "dlq");
      if (dlq) await dlqChart(dlq.total);
    },
  };

  /* ---------------------------------------------------------------- DLQ */
  const dlqFilters = () => Object.fromEntries(Object.entries(formValues($("dlq-filter"))).filter(([, v]) => v !== ""));
  Rb.views.dlq = {
    init() {
      $("dlq-filter").addEventListener("submit", (e) => { e.preventDefault(); Rb.refresh(false); });
      $("dlq-replay-all").addEventListener("click", () => act(() => replay(dlqFilters(), "the filtered set")));
    },
    async refresh() {
      const data = await api("GET", "/dlq" + query(dlqFilters()));
      const d = data.depth;
      $("dlq-depth").textContent = `DLQ depth: ${d.visible} visible, ${d.in_flight} in flight, ${d.delayed} delayed. ` +
        `${data.messages.length} message(s) match the filter.`;
      fill($("dlq-list").tBodies[0], data.messages.map((m) => h("tr", { "data-run": m.run_id || "" },
        h("td", {}, m.run_id || "(no run)"), h("td", {}, m.task_id || ""), h("td", {}, m.tenant || ""),
        h("td", {}, m.error_code || ""), h("td", {}, m.dead_lettered_at ? ago(m.dead_lettered_at) : ""),
        h("td", {},
          h("button", { type: "button", onclick: () => detail(m.message_id), "aria-label": `Details of ${m.run_id}` }, "Details"), " ",
          m.run_id ? h("button", { type: "button", onclick: () => act(() => replayRun(m.run_id)), "aria-label": `Replay ${m.run_id}` }, "Replay") : null),
      )), "The DLQ holds no matching messages.", 6);
    },
  };

  /* {"would-move": 2, "would-skip": 1} as "2 would move, 1 would skip". */
  function outcomes(counts) {
    const said = Object.entries(counts || {}).map(([k, n]) => `${n} ${k.replace(/-/g, " ")}`);
    return said.length ? said.join(", ") : "nothing to do";
  }

  async function replay(filters, what) {
    try {
      say("Counting what a replay would move (dry run)…");
      const dry = await api("POST", "/dlq/redrive", { ...filters, dry_run: true });
      const n = dry.matched;
      if (!n) { say("Dry run: no message matches, nothing to replay."); return; }
      if (!(await confirm("Replay dead letters?", `Dry run: ${n} message(s) of ${what} would be replayed ` +
          `with a fresh retry budget (${outcomes(dry.outcomes)}). Replay them now?`))) {
        say("Replay cancelled; nothing moved."); return;
      }
      const started = await api("POST", "/dlq/redrive", { ...filters, async: true });
      const done = await follow(started);
      say(`Replayed: ${done.moved} moved, ${done.skipped} left (skipped), ${done.failed} failed ` +
        `(job ${done.job_id}: ${done.state}).`, done.failed || done.state === "failed" ? "bad" : "ok");
    } catch (error) { say(`Replay failed: ${error.message}`, "bad"); }
    await Rb.refresh(false);
  }

  /* Poll a redrive job until it is done, showing its progress; the list refreshes as it moves. */
  async function follow(job) {
    const panel = $("dlq-job");
    panel.hidden = false;
    $("dlq-job-id").textContent = job.job_id;
    for (;;) {
      $("dlq-job-bar").value = job.progress;
      $("dlq-job-text").textContent = `${job.state}: ${job.moved} moved, ${job.failed} failed, ${job.skipped} skipped, ` +
        `${job.remaining} remaining of ${job.total} (${Math.round(job.progress * 100)} %).`;
      if (job.done) return job;
      await new Promise((resolve) => setTimeout(resolve, 1000));
      job = await api("GET", `/dlq/redrive-jobs/${encodeURIComponent(job.job_id)}`);
      await Rb.views.dlq.refresh(true);
    }
  }

  async function replayRun(runId) {
    if (!(await confirm("Replay this run?", `Dry run: 1 run (${runId}) would be replayed with a fresh retry budget. Replay it now?`))) {
      say("Replay cancelled; nothing moved."); return;
    }
    try {
      const done = await api("POST", `/runs/${encodeURIComponent(runId)}/retry`, { reason: "replayed from the console" });
      say(`Run ${runId}: ${done.action}.`, "ok");
    } catch (error) { say(`Replay of ${runId} failed: ${error.message}`, "bad"); }
    await Rb.refresh(false);
  }

  async function detail(messageId) {
    const panel = $("dlq-detail");
    try {
      const m = await api("GET", `/dlq/${encodeURIComponent(messageId)}`);
      panel.replaceChildren(h("h3", {}, `Message ${m.message_id}`),
        h("dl", {}, ...[["Run", m.run_id], ["Run state", m.run_state], ["Task", m.task_id], ["Tenant", m.tenant],
          ["Error code", m.error_code], ["Reason", m.reason], ["Attempts", m.attempts], ["Where", m.location],
          ["Work order", m.work_order_id]].flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v ?? "—")])),
        m.run_id ? h("button", { type: "button", onclick: () => openRun(m.run_id) }, "Open run timeline") : null,
        h("h4", {}, "Body"), h("pre", {}, m.body));
      panel.hidden = false;
      panel.focus();
    } catch (error) { say(`Could not show the message: ${error.message}`, "bad"); }
  }

  /* ---------------------------------------------------------------- runs */
  let openRunId = null;
  function openRun(runId) {
    openRunId = runId;
    Rb.show("runs", false, "run/" + encodeURIComponent(runId));
  }
  Rb.openRun = openRun; /* the workstreams view opens a step's task run here */
  Rb.routes.run = openRun; /* #run/<run id>: a run's own page */
  const EVERY_STATE = ["running", "pending", "retry_scheduled", "failed", "dead_lettered", "succeeded", "replayed",
    "skipped", "cancelled"];
  const RUNS_PAGE = 50;
  let runsAfter = null;
  let runsNext = null;
  let runsPageNo = 1;
  Rb.views.runs = {
    reset() { openRunId = null; $("run-detail").hidden = true; },
    init() {
      $("runs-search").addEventListener("submit", (e) => {
        e.preventDefault(); runsAfter = null; runsPageNo = 1; Rb.refresh(false);
      });
      $("runs-next").addEventListener("click", () => { runsAfter = runsNext; runsPageNo += 1; Rb.refresh(false); });
      $("runs-first").addEventListener("click", () => { runsAfter = null; runsPageNo = 1; Rb.refresh(false); });
    },
    async refresh() {
      const f = formValues($("runs-search"));
      if (!f.task_id && !f.state) await anyState();
      else {
        const page = await Rb.call("GET", "/runs" + query({ ...f, limit: RUNS_PAGE, after: runsAfter }));
        const runs = page.data;
        runsNext = page.headers.get("X-Next-After");
        $("runs-next").disabled = !runsNext;
        $("runs-first").disabled = runsPageNo === 1;
        $("runs-page").textContent = `Page ${runsPageNo}: ${runs.length} run(s)${runsNext ? ", more on the next page" : ""}.`;
        fill($("runs-list").tBodies[0], runs.map(runRow), "No run matches.", 6);
      }
      if (openRunId && !$("run-detail").contains(document.activeElement)) await timeline(openRunId);
    },
  };

  /* The latest runs in any state: a page of each state's index (none scans), merged by their last
     change. It has no next page: narrow it by task or state for that. */
  async function anyState() {
    const pages = await Promise.all(EVERY_STATE.map((state) => api("GET", "/runs" + query({ state, limit: RUNS_PAGE }))));
    const runs = pages.flat().sort((a, b) => (a.updated_at < b.updated_at ? 1 : -1)).slice(0, RUNS_PAGE);
    runsNext = null;
    $("runs-next").disabled = true;
    $("runs-first").disabled = true;
    $("runs-page").textContent = `The latest ${runs.length} run(s) in any state, by last change.`;
    fill($("runs-list").tBodies[0], runs.map(runRow), "No run yet.", 6);
  }

  function runRow(r) {
    return h("tr", {},
      h("td", {}, r.run_id), h("td", {}, r.state), h("td", { class: "num" }, `${r.attempt}/${r.attempts_in_budget}`),
      h("td", {}, r.last_error_code || ""), h("td", {}, r.scheduled_for),
      h("td", {}, h("button", { type: "button", onclick: () => openRun(r.run_id),
        "aria-label": `Timeline of ${r.run_id}` }, "Timeline")));
  }

  /* A timeline entry's evidence as labelled fields: a value that is itself a record stays compact. */
  function fields(detail) {
    const entries = Object.entries(detail || {});
    if (!entries.length) return null;
    return h("dl", { class: "fields" }, ...entries.flatMap(([k, v]) => [h("dt", {}, k.replace(/_/g, " ")),
      h("dd", {}, v === null ? "—" : typeof v === "object" ? JSON.stringify(v) : String(v))]));
  }

  async function timeline(runId) {
    const t = await api("GET", `/runs/${encodeURIComponent(runId)}`);
    const r = t.run;
    const reason = h("input", { id: "run-reason", name: "reason", "aria-describedby": "run-reason-error" });
    const runAction = (verb) => async () => {
      const needsReason = verb !== "retry";
      if (needsReason && !reason.value.trim()) {
        $("run-reason-error").textContent = `A reason is required to ${verb}.`;
        reason.setAttribute("aria-invalid", "true");
        reason.focus();
        return;
      }
      try {
        await api("POST", `/runs/${encodeURIComponent(runId)}/${verb}`, { reason: reason.value.trim() });
        say(`Run ${runId}: ${verb} done.`, "ok");
      } catch (error) { say(`${verb} of ${runId} failed: ${error.message}`, "bad"); }
      document.activeElement.blur();
      await Rb.refresh(false);
    };
    $("run-detail").replaceChildren(
      h("h3", {}, `Run ${r.run_id}`),
      h("p", {}, `State: ${r.state}. Task ${r.task_id} (tenant ${r.tenant}), attempt ${r.attempt} ` +
        `(${r.attempts_in_budget} in the current retry budget). ` +
        `Audit chain: ${t.audit && t.audit.ok ? "verified" : "NOT verified"}.`),
      h("ol", { class: "timeline", "aria-label": "Timeline" }, t.timeline.map((e) =>
        h("li", {}, h("strong", {}, e.action), ` — ${e.at} (${e.source}${e.state ? ", " + e.state : ""}, by ${e.actor})`,
          fields(e.detail)))),
      h("div", { class: "row" },
        h("button", { type: "button", class: "primary", onclick: runAction("retry") }, "Retry"),
        h("label", {}, "Reason (required to skip or cancel)", reason),
        h("button", { type: "button", onclick: runAction("skip") }, "Skip"),
        h("button", { type: "button", onclick: runAction("cancel") }, "Cancel run")),
      h("p", { id: "run-reason-error", class: "field-error", "aria-live": "polite" }));
    $("run-detail").hidden = false;
  }

  /* ---------------------------------------------------------------- work orders */
  Rb.views.workorders = {
    init() { $("wo-filter").addEventListener("submit", (e) => { e.preventDefault(); Rb.refresh(false); }); },
    async refresh() {
      if ($("wo-list").contains(document.activeElement) && document.activeElement.tagName === "SELECT") return;
      const orders = await api("GET", "/workorders" + query(formValues($("wo-filter"))));
      fill($("wo-list").tBodies[0], orders.map((o) => {
        const resolution = h("select", { "aria-label": `Resolution of ${o.work_order_id}` },
          ["fixed", "replayed", "skipped", "cancelled"].map((v) => h("option", {}, v)));
        const post = (verb, body) => async () => {
          try {
            await api("POST", `/workorders/${encodeURIComponent(o.work_order_id)}/${verb}`, body());
            say(`Work order ${o.work_order_id}: ${verb} done.`, "ok");
          } catch (error) { say(`${verb} failed: ${error.message}`, "bad"); }
          await Rb.refresh(false);
        };
        return h("tr", {}, h("td", {}, o.work_order_id), h("td", {}, o.state), h("td", {}, o.level ? `${o.severity}, level ${o.level}` : o.severity),
          h("td", {}, o.run_id || o.task_id || ""), h("td", {}, ago(o.opened_at)), h("td", {}, o.reason),
          h("td", {}, o.state === "open" ? h("button", { type: "button", onclick: post("ack", () => ({ note: "from the console" })) }, "Acknowledge") : null,
            o.state !== "resolved" ? [" ", resolution, " ", h("button", { type: "button",
              onclick: post("resolve", () => ({ resolution: resolution.value, note: "from the console" })) }, "Resolve")] : null));
      }), "No work orders.", 7);
    },
  };

  /* ---------------------------------------------------------------- flags */
  /* GET /flags and PUT /flags/{name}: each flag, whether it is on, and turning it off or on again. */
  Rb.views.flags = {
    async refresh() {
      const flags = await api("GET", "/flags");
      fill($("flags-list").tBodies[0], flags.map((f) => {
        const to = !f.on;
        const flip = async () => {
          const reason = $("flag-reason").value.trim();
          if (!(await confirm(`Turn ${f.name} ${to ? "on" : "off"}?`, `${f.what}. Handlers read the change within 30 s.`))) return;
          await act(async () => {
            try {
              const out = await api("PUT", `/flags/${encodeURIComponent(f.name)}`, { on: to, reason: reason || null });
              say(out.changed ? `${f.name} is now ${to ? "on" : "off"}` : `${f.name} was ${to ? "on" : "off"} already`, "ok");
            } catch (error) {
              say(`${f.name} not changed: ${error.message}`, "bad");
            }
          });
          await Rb.refresh(false);
        };
        return h("tr", {}, h("th", { scope: "row" }, h("code", {}, f.name)),
          h("td", { class: f.on ? "" : "bad" }, f.on ? "on" : "off"), h("td", {}, f.default ? "on" : "off"), h("td", {}, f.what),
          h("td", {}, h("button", { type: "button", "aria-label": `Turn ${f.name} ${to ? "on" : "off"}`, onclick: flip },
            to ? "Turn on" : "Turn off")));
      }), "No flags.", 5);
    },
  };

  /* ---------------------------------------------------------------- approvals */
  /* GET /approvals, POST /approvals/{id}/approve|reject: requests for a second operator. */
  Rb.views.approvals = {
    init() { $("approvals-closed").addEventListener("change", () => Rb.refresh(false)); },
    async refresh() {
      const closed = $("approvals-closed").checked;
      const found = await api("GET", "/approvals" + query({ closed: closed ? "true" : "" }));
      fill($("approvals-list").tBodies[0], found.map((r) => {
        const decide = (verb) => async () => {
          if (!(await confirm(`${verb === "approve" ? "Approve" : "Reject"} ${r.request_id}?`,
            verb === "approve" ? `${r.action} on ${r.subject}, asked by ${r.requested_by}: it is carried out at once, as you.` :
              "Nothing is done; the requester is told by the audit trail."))) return;
          await act(async () => {
            try {
              const out = await api("POST", `/approvals/${encodeURIComponent(r.request_id)}/${verb}`, { note: $("approval-note").value.trim() });
              const started = out.outcome && out.outcome.redrive_job ? `redrive job ${out.outcome.redrive_job} started (${out.outcome.total} messages)` : null;
              const result = out.outcome ? (out.outcome.ok ? started || "carried out" : `failed: ${out.outcome.message}`) : out.state;
              say(`${r.request_id} ${verb === "approve" ? "approved" : "rejected"}: ${result}`, "ok");
            } catch (error) {
              say(`${r.request_id} not ${verb}d: ${error.message}`, "bad");
            }
          });
          await Rb.refresh(false);
        };
        const open = r.state === "pending" || r.state === "approved";
        return h("tr", {}, h("td", {}, r.request_id), h("td", {}, r.state), h("td", {}, r.action), h("td", {}, r.subject),
          h("td", {}, r.requested_by), h("td", {}, r.reason), h("td", {}, r.expires_at),
          h("td", {}, open ? [h("button", { type: "button", onclick: decide("approve") }, "Approve"), " ",
            h("button", { type: "button", onclick: decide("reject") }, "Reject")] : (r.decided_by || "")));
      }), "No request waits for a second operator.", 8);
    },
  };

  /* ---------------------------------------------------------------- policies */
  let policyName = null;
  const READONLY = new Set(["name", "version"]);
  Rb.views.policies = {
    async refresh(poll) {
      const policies = await api("GET", "/policies");
      $("policy-list").replaceChildren(...policies.map((p) => h("button", { type: "button",
        "aria-pressed": String(p.name === policyName), onclick: () => { policyName = p.name; showPolicy(); } },
        `${p.name} (v${p.version})`)));
      if (!policyName && policies.length) { policyName = policies[0].name; await showPolicy(); }
      else if (!poll) await showPolicy();
    },
  };

  function encode(value) { return typeof value === "string" ? value : JSON.stringify(value); }
  function decode(text, before) {
    if (typeof before === "number") return text === "" ? null : Number(text);
    if (typeof before === "string") return text;
    if (text === "") return null;
    try { return JSON.parse(text); } catch { return text; }
  }

  function specDiff(before, after) {
    if (!before) return "first stored version: " + JSON.stringify(after);
    const keys = [...new Set([...Object.keys(before || {}), ...Object.keys(after || {})])].sort();
    const changed = keys.filter((k) => JSON.stringify(before[k]) !== JSON.stringify(after[k]));
    return changed.map((k) => `${k}: ${encode(before[k] ?? null)} → ${encode(after[k] ?? null)}`).join("; ") || "no change";
  }

  async function showPolicy() {
    const d = await api("GET", `/policies/${encodeURIComponent(policyName)}`);
    const p = d.policy;
    const inputs = {};
    const fields = Object.entries(p).filter(([k]) => !READONLY.has(k)).map(([k, v]) => {
      inputs[k] = h("input", { id: `pf-${k}`, name: k, value: v === null ? "" : encode(v), "aria-describedby": `pf-${k}-error` });
      return h("div", {}, h("label", { for: `pf-${k}` }, k), inputs[k], h("div", { id: `pf-${k}-error`, class: "field-error" }));
    });
    const result = h("p", { id: "policy-result", "aria-live": "polite" });
    const whatIf = h("div", { id: "policy-whatif", "aria-live": "polite" });
    const changes = () => Object.fromEntries(Object.entries(inputs).filter(([k, el]) => el.value !== (p[k] === null ? "" : encode(p[k])))
      .map(([k, el]) => [k, decode(el.value.trim(), p[k])]));
    const submit = (dryRun) => async (event) => {
      event.preventDefault();
      for (const k of Object.keys(inputs)) { inputs[k].removeAttribute("aria-invalid"); $(`pf-${k}-error`).textContent = ""; }
      const wanted = changes();
      if (!Object.keys(wanted).length) { result.textContent = "Nothing changed."; return; }
      try {
        const out = await api("PUT", `/policies/${encodeURIComponent(p.name)}`, { changes: wanted, dry_run: dryRun });
        const diff = Object.entries(out.change.diff).map(([k, c]) => `${k}: ${encode(c.from)} → ${encode(c.to)}`).join("; ");
        result.className = "ok";
        result.textContent = dryRun ? `Diff against v${out.change.from_version}: ${diff}` :
          `Saved ${p.name} as version ${out.policy.version} (${diff}). The next retry uses it.`;
        if (dryRun) await showWhatIf(p.name, wanted, whatIf);
        if (!dryRun) { say(result.textContent, "ok"); await Rb.refresh(false); }
      } catch (error) {
        const data = error.data || {};
        const field = [data.field, data.key_path, ...Object.keys(inputs)].find((k) => k && inputs[String(k).split(".")[0]] &&
          (k === data.field || k === data.key_path || (error.message || "").includes(k)));
        const key = field ? String(field).split(".")[0] : null;
        if (key) {
          inputs[key].setAttribute("aria-invalid", "true");
          $(`pf-${key}-error`).textContent = `Error: ${error.message}`;
          inputs[key].focus();
        }
        result.className = "bad";
        result.textContent = `Not saved: ${error.message}`;
      }
    };
    const form = h("form", { id: "policy-form", "aria-label": `Policy ${p.name}` }, h("div", { class: "row" }, fields),
      h("div", { class: "row" }, h("button", { type: "button", onclick: submit(true) }, "Show diff and what-if"),
        h("button", { type: "submit", class: "primary" }, "Save new version")), result, whatIf);
    form.addEventListener("submit", submit(false));
    const ordered = (d.versions || []).slice().sort((a, b) => a.version - b.version);
    const versions = ordered.map((v, i) => ({ ...v, change: specDiff(i ? ordered[i - 1].spec : null, v.spec) })).reverse();
    $("policy-detail").replaceChildren(
      h("h3", {}, `${p.name}: version ${p.version}`), h("p", {}, `Source: ${d.source}.`), form,
      h("h4", {}, "Version history"),
      h("table", { id: "policy-versions" }, h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Version"),
        h("th", { scope: "col" }, "When"), h("th", { scope: "col" }, "By"), h("th", { scope: "col" }, "Change"))),
        h("tbody", {}, versions.length ? versions.map((v) => h("tr", {}, h("td", {}, v.version ?? ""), h("td", {}, v.updated_at || ""),
          h("td", {}, v.updated_by || ""), h("td", {}, h("code", {}, v.change)))) :
          h("tr", {}, h("td", { colspan: 4 }, "No stored versions: the policy is as configured.")))));
    $("policy-detail").hidden = false;
  }

  /* The proposed values replayed over the last 7 days' recorded failures (POST /policies/{name}/whatif),
     the same figures as `rebound policies whatif`. */
  const WHATIF_ROWS = [
    ["Runs with a failure", "runs"], ["Would have recovered", "recovered"],
    ["Would have dead-lettered", "dead_lettered"], ["Retries (messages)", "retries"],
    ["Retries per hour", "retries_per_hour"], ["Retries in the busiest hour", "peak_retries_per_hour"],
    ["Time to recovery p50 (s)", "recovery_p50_s"], ["Time to recovery p99 (s)", "recovery_p99_s"],
    ["Cost ($)", "cost_usd"],
  ];
  async function showWhatIf(name, wanted, into) {
    into.replaceChildren(h("p", {}, "Replaying the last 7 days' failures…"));
    try {
      const r = await api("POST", `/policies/${encodeURIComponent(name)}/whatif`, { changes: wanted, since: "7d" });
      const cell = (v) => h("td", {}, v === null || v === undefined ? "–" : String(v));
      into.replaceChildren(
        h("h4", {}, `What-if: ${r.since} to ${r.until}`),
        h("table", { id: "policy-whatif-table" },
          h("thead", {}, h("tr", {}, h("th", { scope: "col" }, ""), h("th", { scope: "col" }, "Current"),
            h("th", { scope: "col" }, "Proposed"))),
          h("tbody", {}, WHATIF_ROWS.map(([label, key]) =>
            h("tr", { "data-key": key }, h("th", { scope: "row" }, label), cell(r.current[key]), cell(r.proposed[key]))))),
        h("p", {}, `Added cost over the window: ${r.added_cost_usd >= 0 ? "+" : ""}${r.added_cost_usd} $`),
        ...r.notes.map((n) => h("p", { class: "note" }, n)));
    } catch (error) {
      into.replaceChildren(h("p", { class: "bad" }, `What-if not available: ${error.message}`));
    }
  }

  /* ---------------------------------------------------------------- delivery retries */
  function deliveryRequest() {
    const f = new FormData($("deliveries-form"));
    const num = (k) => (String(f.get(k)).trim() === "" ? undefined : Number(f.get(k)));
    return {
      generated_by: String(f.get("generated_by") || "").trim() || null,
      retry_policy: {
        max_retry_attempts: num("max_retry_attempts"), retry_delay_minutes: num("retry_delay_minutes"),
        backoff_multiplier: num("backoff_multiplier"), allow_immediate_retry: f.get("allow_immediate_retry") === "on",
      },
    };
  }
  function showPlan(plan) {
    const c = plan.counts;
    $("deliveries-summary").textContent = `Plan at ${plan.generated_at}: ${c.retry || 0} to retry, ${c.wait || 0} to wait, ` +
      `${c.suppress || 0} suppressed.`;
    fill($("deliveries-list").tBodies[0], plan.deliveries.map((d) => h("tr", {}, h("td", {}, d.work_order_id),
      h("td", {}, d.channel), h("td", { class: d.decision === "retry" ? "ok" : d.decision === "wait" ? "warn" : "bad" },
        d.decision.toUpperCase()), h("td", {}, d.reason), h("td", { class: "num" }, d.attempts), h("td", {}, d.last_attempt_at))),
    "No failed deliveries.", 6);
  }
  async function deliveries(execute) {
    $("deliveries-error").textContent = "";
    try {
      if (!execute) { showPlan(await api("POST", "/notifications/retry-plan", deliveryRequest())); return; }
      const plan = await api("POST", "/notifications/retry-plan", deliveryRequest());
      if (!(await confirm("Retry deliveries?", `${plan.counts.retry || 0} failed deliveries would be retried now. Retry them?`))) {
        say("Nothing retried."); return;
      }
      const out = await api("POST", "/notifications/retry-plan/execute", deliveryRequest());
      showPlan(out.plan);
      say(`Deliveries retried: ${out.delivered} delivered, ${out.failed} failed again.`, out.failed ? "bad" : "ok");
    } catch (error) {
      $("deliveries-error").textContent = `Error: ${error.message}`;
    }
  }
  Rb.views.deliveries = {
    init() {
      $("deliveries-form").addEventListener("submit", (e) => { e.preventDefault(); act(() => deliveries(false)); });
      $("deliveries-execute").addEventListener("click", () => act(() => deliveries(true)));
    },
    async refresh(poll) {
      if (poll && $("deliveries-form").contains(document.activeElement)) return;
      showPlan(await api("POST", "/notifications/retry-plan", deliveryRequest()));
    },
  };

  /* ---------------------------------------------------------------- retry health */
  Rb.views.health = {
    init() { $("health-form").addEventListener("submit", (e) => { e.preventDefault(); Rb.refresh(false); }); },
    async refresh() {
      const r = await api("GET", "/health/retry" + query(formValues($("health-form"))));
      const summary = $("health-summary");
      summary.textContent = `Overall: ${String(r.status).toUpperCase()} (${r.healthy ? "healthy" : "unhealthy"}) at ${r.at}.`;
      summary.className = r.healthy ? "ok" : "bad";
      fill($("health-checks").tBodies[0], r.checks.map((c) => h("tr", {}, h("th", { scope: "row" }, c.name),
        h("td", { class: c.status === "ok" ? "ok" : c.status === "warn" ? "warn" : "bad" }, String(c.status).toUpperCase()),
        h("td", {}, c.summary))), "no checks", 3);
    },
  };
})();
