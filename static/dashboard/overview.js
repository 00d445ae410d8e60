/* /dashboard/: the gateway's figures, redrawn from the `snapshot` messages of its stream (sent
   when the ledger moves) and the `events` messages (new event_log rows). Charts are uPlot. */
"use strict";

(function () {
  const L = window.DuctileLive;
  const { el } = L;
  const EVENTS_SHOWN = 12;
  const CHART_HEIGHT = 170;
  let snapshot = null;
  let events = [];
  const charts = {};
  const scheduler = L.scheduler(render);
  // Read by the browser tests: how many messages arrived and how many renders they cost.
  window.ductileOverview = { stats: scheduler.stats, snapshot: () => snapshot };

  L.connect(L.config.stream, {
    snapshot(data) {
      snapshot = data;
      mergeEvents(data.recent_events);
      scheduler.request();
    },
    events(rows) {
      mergeEvents(rows);
      scheduler.request();
    },
  });

  function mergeEvents(rows) {
    const seen = new Set(events.map((row) => row.id));
    events = events.concat(rows.filter((row) => !seen.has(row.id)));
    events.sort((a, b) => b.id - a.id);
    events.length = Math.min(events.length, EVENTS_SHOWN);
  }

  function render() {
    if (!snapshot) return;
    renderQueue(snapshot);
    renderNodes(snapshot.nodes, snapshot.unserved);
    renderRunning(snapshot.running);
    renderThroughput(snapshot.throughput);
    renderLatency(snapshot.latency.plugins);
    L.fillTable(document.getElementById("failures-table"), snapshot.failures.map(failureRow));
    L.fillTable(document.getElementById("breakers-table"), snapshot.breakers.map(breakerRow));
    L.fillTable(document.getElementById("schedules-table"), snapshot.schedules.map(scheduleRow));
    L.fillTable(document.getElementById("pipelines-table"), snapshot.pipelines.map(pipelineRow));
    L.fillTable(document.getElementById("events-table"), events.map(eventRow));
  }

  function pill(status) {
    return el("span", { class: "dash-pill", dataset: { status } }, status.replace("_", " "));
  }

  function renderQueue(data) {
    for (const [status, count] of Object.entries(data.queue)) {
      const node = document.getElementById(`count-${status}`);
      if (node) node.textContent = count.toLocaleString();
    }
    document.getElementById("count-retry").textContent = data.retry_waiting.toLocaleString();
    document.getElementById("count-workers").textContent = data.workers.length;
    const threads = data.workers.reduce((sum, w) => sum + w.threads, 0);
    const line = document.getElementById("workers-line");
    line.replaceChildren(
      data.workers.length
        ? `${threads} worker slots on ${data.workers.length} live ${data.workers.length === 1 ? "node" : "nodes"} (listed under Nodes).`
        : "No live workers: queued jobs wait until runworkers (or system start) runs.",
    );
  }

  function renderNodes(nodes, unserved) {
    const live = nodes.filter((n) => n.liveness === "live").length;
    document.getElementById("nodes-count").textContent = nodes.length ? `${live} live, ${nodes.length - live} lost` : "";
    L.fillTable(
      document.getElementById("nodes-table"),
      nodes.map((n) =>
        el(
          "tr",
          { dataset: { node: n.id } },
          el("td", {}, n.hostname),
          el("td", { class: "dash-num" }, n.pid),
          el("td", {}, n.roles.join(", ")),
          el("td", {}, n.group || "–"),
          el("td", { class: "dash-quiet" }, n.roles.includes("workers") ? (n.plugins ? n.plugins.join(", ") : "every plugin") : "–"),
          el("td", {}, n.version || "–"),
          el("td", { class: "dash-num" }, n.slots),
          el("td", {}, L.relative(n.started_at)),
          el("td", {}, L.relative(n.heartbeat_at)),
          el("td", {}, el("span", { class: "dash-pill", dataset: { status: n.liveness } }, n.liveness)),
        ),
      ),
    );
    const warning = document.getElementById("unserved-warning");
    warning.hidden = unserved.length === 0;
    warning.replaceChildren(
      ...unserved.map((u) =>
        el(
          "p",
          { dataset: { plugin: u.plugin } },
          el("strong", {}, u.plugin),
          ` has ${u.queued.toLocaleString()} queued ${u.queued === 1 ? "job" : "jobs"} that no live node runs (the oldest `,
          L.relative(u.oldest_queued_at),
          "): start workers whose group includes it, or without a group.",
        ),
      ),
    );
  }

  function renderRunning(rows) {
    document.getElementById("running-count").textContent = rows.length ? String(rows.length) : "";
    L.fillTable(
      document.getElementById("running-table"),
      rows.map((job) =>
        el(
          "tr",
          { dataset: { job: job.job_id } },
          el("td", {}, L.jobLink(job.job_id)),
          el("td", {}, `${job.plugin}.${job.command}`),
          el("td", {}, `${job.attempt}/${job.max_attempts}`),
          el("td", { class: "dash-num" }, el("span", { dataset: { since: job.started_at } }, L.duration(job.elapsed_seconds))),
          el("td", { class: "dash-quiet" }, job.claimed_by || "–"),
        ),
      ),
    );
  }

  function failureRow(job) {
    return el(
      "tr",
      { dataset: { job: job.job_id } },
      el("td", {}, L.jobLink(job.job_id)),
      el("td", {}, `${job.plugin}.${job.command}`),
      el("td", {}, pill(job.status)),
      el("td", {}, L.relative(job.completed_at)),
      el("td", { class: "dash-error", title: job.last_error }, job.last_error || "–"),
    );
  }

  function breakerRow(b) {
    return el(
      "tr",
      {},
      el("td", {}, `${b.plugin}.${b.command}`),
      el("td", {}, pill(b.state)),
      el("td", { class: "dash-num" }, b.failure_count),
      el("td", {}, b.opened_at ? L.relative(b.opened_at) : "–"),
    );
  }

  function scheduleRow(s) {
    return el(
      "tr",
      {},
      el("td", {}, `${s.plugin}:${s.schedule_id}`),
      el("td", {}, s.command),
      el("td", {}, L.relative(s.next_run_at)),
      el("td", {}, s.last_fired_at ? L.relative(s.last_fired_at) : "never"),
    );
  }

  function pipelineRow(p) {
    const run = p.last_run;
    const href = document.querySelector(".dash-nav a[href$='/pipelines/']").getAttribute("href");
    return el(
      "tr",
      {},
      el("td", {}, el("a", { href: run ? `${href}?run=${encodeURIComponent(run.job_id)}` : href }, p.name)),
      el("td", { class: "dash-quiet" }, p.trigger),
      el("td", {}, run ? pill(run.status) : "never ran"),
      el("td", {}, run ? L.relative(run.started_at) : "–"),
    );
  }

  function eventRow(e) {
    return el(
      "tr",
      {},
      el("td", { class: "dash-num dash-quiet" }, e.id),
      el("td", {}, e.type),
      el("td", { class: "dash-quiet" }, e.source || "–"),
      el("td", {}, e.job_id ? L.jobLink(e.job_id) : "–"),
      el("td", {}, L.relative(e.created_at)),
    );
  }

  // -- charts ------------------------------------------------------------------------------

  function chart(id, options, data) {
    const box = document.getElementById(id);
    const plot = new uPlot({ ...options, width: box.clientWidth || 400, height: CHART_HEIGHT }, data, box);
    new ResizeObserver(() => plot.setSize({ width: box.clientWidth, height: CHART_HEIGHT })).observe(box);
    return plot;
  }

  function axis(extra) {
    const grid = L.cssVar("--hairline-color", "#e8e8e8");
    return { stroke: L.cssVar("--body-quiet-color", "#666"), grid: { stroke: grid }, ticks: { stroke: grid }, ...extra };
  }

  function renderThroughput(t) {
    const start = Date.parse(t.start) / 1000;
    const xs = t.finished.map((_, i) => start + i * t.bucket_seconds);
    const rate = t.finished.map((n, i) => (n ? (100 * t.failed[i]) / n : null));
    const ok = L.cssVar("--dash-ok", "#3b8c5a");
    const bad = L.cssVar("--dash-fail", "#c0392b");
    if (!charts.throughput) {
      const bars = uPlot.paths.bars({ size: [0.85, 14] });
      charts.throughput = chart(
        "chart-throughput",
        {
          scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(4, max)] } },
          axes: [axis(), axis({ values: (u, splits) => splits.map((v) => (Number.isInteger(v) ? v : "")) })],
          series: [
            {},
            // No outline: an outlined bar of 0 would draw a line along the axis.
            { label: "ended", stroke: ok, fill: ok, width: 0, paths: bars, points: { show: false } },
            { label: "failed", stroke: bad, fill: bad, width: 0, paths: bars, points: { show: false } },
          ],
        },
        [xs, t.finished, t.failed],
      );
      charts.failure = chart(
        "chart-failure",
        {
          scales: { x: { time: true }, y: { range: [0, 100] } },
          axes: [axis(), axis({ values: (u, splits) => splits.map((v) => `${v}%`) })],
          series: [
            {},
            {
              label: "failure rate",
              stroke: bad,
              width: 2,
              spanGaps: false,
              points: { show: true, size: 6, fill: bad },  // a minute alone between gaps is still seen
              value: (u, v) => (v === null || v === undefined ? "–" : `${v.toFixed(1)}%`),
            },
          ],
        },
        [xs, rate],
      );
    } else {
      charts.throughput.setData([xs, t.finished, t.failed]);
      charts.failure.setData([xs, rate]);
    }
    document.getElementById("throughput-line").textContent =
      `${t.finished_last_hour.toLocaleString()} jobs ended in the last hour (${t.jobs_per_minute} a minute).`;
    document.getElementById("failure-line").textContent =
      t.failure_rate === null
        ? "No job ended in the last hour."
        : `${t.failed_last_hour.toLocaleString()} failed: ${(100 * t.failure_rate).toFixed(1)}% of those that ended.`;
  }

  const PERCENTILES = ["p50", "p95", "p99"];

  function decades(u, axisIdx, min, max) {
    const out = [];
    for (let power = Math.round(Math.log10(min)); power <= Math.round(Math.log10(max)); power++) out.push(10 ** power);
    return out;
  }

  function renderLatency(plugins) {
    L.fillTable(
      document.getElementById("latency-table"),
      plugins.map((p) =>
        el(
          "tr",
          {},
          el("td", {}, p.plugin),
          el("td", { class: "dash-num" }, p.count),
          ...[...PERCENTILES, "max"].map((k) => el("td", { class: "dash-num" }, L.ms(p.plugin_time_ns[k]))),
        ),
      ),
    );
    const box = document.getElementById("chart-latency");
    box.hidden = plugins.length === 0;
    if (!plugins.length) return;
    const names = plugins.map((p) => p.plugin);
    const data = [names.map((_, i) => i), ...PERCENTILES.map((k) => plugins.map((p) => p.plugin_time_ns[k] / 1e6))];
    if (charts.latency && charts.latencyNames.join("\n") === names.join("\n")) {
      charts.latency.setData(data);
      return;
    }
    if (charts.latency) charts.latency.destroy();
    charts.latencyNames = names;
    const width = 0.8 / PERCENTILES.length;
    const grouped = (k) =>
      uPlot.paths.bars({
        disp: {
          x0: { unit: 1, values: (u) => u.data[0].map((x) => x - 0.4 + k * width) },
          size: { unit: 1, values: () => [width * 0.9] },
        },
      });
    charts.latency = chart(
      "chart-latency",
      {
        scales: {
          x: { time: false, range: [-0.5, names.length - 0.5] },
          // Whole decades around the data, so small and large plugins both show.
          y: { distr: 3, log: 10, range: (u, min, max) => [10 ** Math.floor(Math.log10(min)), 10 ** Math.ceil(Math.log10(max))] },
        },
        axes: [
          axis({ splits: () => names.map((_, i) => i), values: (u, splits) => splits.map((i) => names[i] ?? "") }),
          // Decades only: a log axis ruled at 2, 3, … 9 of each decade is unreadable.
          axis({ size: 64, splits: decades, values: (u, splits) => splits.map((v) => L.ms(v * 1e6)) }),
        ],
        cursor: { points: { show: false } },
        series: [
          { label: "plugin", value: (u, i) => names[i] ?? "–" },
          ...PERCENTILES.map((k, n) => {
            const colour = L.cssVar(`--dash-${k}`, ["#7fb3d5", "#2e86c1", "#1b4f72"][n]);
            const value = (u, v) => (v === null || v === undefined ? "–" : L.ms(v * 1e6));
            return { label: k, stroke: colour, fill: colour, paths: grouped(n), points: { show: false }, value };
          }),
        ],
      },
      data,
    );
  }
})();
