/* The tasks view: every task the caller may see, with its schedule and state; a task's page
   (#task/<task id>) shows its next fires and its latest runs, and pauses, resumes or runs it now. */
"use strict";
(() => {
  const { api, h, fill, say, confirm, act } = Rb;
  const $ = (id) => document.getElementById(id);
  const path = (taskId) => `/tasks/${encodeURIComponent(taskId)}`;
  let openTaskId = null;

  function openTask(taskId) {
    openTaskId = taskId;
    Rb.show("tasks", false, "task/" + encodeURIComponent(taskId));
  }
  Rb.routes.task = openTask;

  async function change(taskId, verb, method) {
    if (verb !== "run" && !(await confirm(`${verb === "pause" ? "Pause" : "Resume"} ${taskId}?`,
        verb === "pause" ? "Its schedules stop firing until it is resumed." : "Its schedules fire again."))) return;
    await act(async () => {
      try {
        const done = await api(method, `${path(taskId)}/${verb}`, verb === "run" ? {} : { reason: "from the console" });
        say(verb === "run" ? `Run ${done.run_id} queued.` : `Task ${taskId}: ${done.state}.`, "ok");
      } catch (error) { say(`${verb} of ${taskId} failed: ${error.message}`, "bad"); }
    });
    await Rb.refresh(false);
  }

  function actions(t) {
    return [
      h("button", { type: "button", onclick: () => openTask(t.id), "aria-label": `Details of ${t.id}` }, "Details"), " ",
      t.state === "paused"
        ? h("button", { type: "button", onclick: () => change(t.id, "resume", "PUT"), "aria-label": `Resume ${t.id}` }, "Resume")
        : h("button", { type: "button", onclick: () => change(t.id, "pause", "PUT"), "aria-label": `Pause ${t.id}` }, "Pause"),
      " ",
      h("button", { type: "button", onclick: () => change(t.id, "run", "POST"), "aria-label": `Run ${t.id} now` }, "Run now"),
    ];
  }

  async function detail(taskId) {
    const d = await api("GET", path(taskId));
    const t = d.task;
    const last = d.recent_runs[0];
    $("task-detail").replaceChildren(
      h("h3", {}, `Task ${t.id}`),
      h("dl", { class: "fields" }, ...[["Tenant", t.tenant], ["State", t.state], ["Schedule", t.trigger],
        ["Target", t.target], ["Retry policy", t.retry_policy], ["Timeout", `${t.timeout_s} s`],
        ["Last run", last ? `${last.run_id}: ${last.state}` : "none yet"]].flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v ?? "—")])),
      h("h4", {}, "Next fires"),
      d.next_fires.length
        ? h("ol", { "aria-label": "Next fires" }, d.next_fires.slice(0, 5).map((f) => h("li", {}, `${f.at} (${f.local})`)))
        : h("p", {}, "No fire is due (paused, or an event task)."),
      h("h4", {}, "Latest runs"),
      h("ul", { "aria-label": "Latest runs" }, d.recent_runs.slice(0, 5).map((r) =>
        h("li", {}, h("button", { type: "button", onclick: () => Rb.openRun(r.run_id) }, r.run_id), ` ${r.state}`))),
      h("div", { class: "row" }, ...actions(t)));
    $("task-detail").hidden = false;
  }

  Rb.views.tasks = {
    reset() { openTaskId = null; $("task-detail").hidden = true; },
    async refresh() {
      const tasks = await api("GET", "/tasks");
      fill($("tasks-list").tBodies[0], tasks.map((t) => h("tr", {},
        h("td", {}, t.id), h("td", {}, t.tenant), h("td", { class: t.state === "paused" ? "warn" : "" }, t.state),
        h("td", {}, t.trigger), h("td", {}, ...actions(t)))), "No task yet: rebound tasks apply -f FILE.", 5);
      if (openTaskId && !$("task-detail").contains(document.activeElement)) await detail(openTaskId);
    },
  };
})();
