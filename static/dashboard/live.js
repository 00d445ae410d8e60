/* What every live view shares: its stream (EventSource, reconnecting), a render scheduler that
   coalesces bursts (at most one render per TICK_MS, in an animation frame), safe DOM building, and
   the time and duration formats. No build step: plain script, one global (DuctileLive). */
"use strict";

(function () {
  const TICK_MS = 250;
  const config = JSON.parse(document.getElementById("dash-config").textContent);

  /* Messages only mark the page dirty; the render runs at most every TICK_MS, so a burst of
     hundreds of events a second costs a few renders, not hundreds. `stats` is read by the
     browser tests. */
  function scheduler(render) {
    let pending = false;
    let last = -Infinity;
    const stats = { requests: 0, renders: 0 };
    function run() {
      pending = false;
      last = performance.now();
      stats.renders += 1;
      render();
    }
    function request() {
      stats.requests += 1;
      if (pending) return;
      pending = true;
      const wait = Math.max(0, last + TICK_MS - performance.now());
      setTimeout(() => requestAnimationFrame(run), wait);
    }
    return { request, stats };
  }

  /* One EventSource with a handler per event name. The browser reconnects by itself after a
     network error (the server asks for 2 s); an answer that is not 200 (a session that ended)
     closes it for good, so the page retries every 5 s and says why it is not live. */
  function connect(url, handlers) {
    const status = document.getElementById("dash-status");
    let source = null;
    let retry = null;
    function show(state, text) {
      status.dataset.state = state;
      status.textContent = text;
    }
    function open(target) {
      if (source) source.close();
      clearTimeout(retry);
      source = new EventSource(target);
      source.onopen = () => show("live", "live");
      source.onerror = () => {
        if (source.readyState === EventSource.CLOSED) {
          show("offline", "offline: retrying (log in again if your session ended)");
          retry = setTimeout(() => open(target), 5000);
        } else {
          show("connecting", "reconnecting…");
        }
      };
      for (const [name, handle] of Object.entries(handlers)) {
        source.addEventListener(name, (event) => {
          status.dataset.lastMessage = String(Date.now());
          handle(JSON.parse(event.data));
        });
      }
    }
    open(url);
    return { reopen: open };
  }

  /* el("td", {class: "x", title: "y"}, "text", child): text is always text, never markup. */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "dataset") Object.assign(node.dataset, value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function fillTable(table, rows) {
    const body = table.tBodies[0];
    body.replaceChildren(...rows);
    const empty = document.querySelector(`[data-empty-for="${table.id}"]`);
    table.hidden = rows.length === 0;
    if (empty) empty.hidden = rows.length !== 0;
  }

  function jobLink(jobId) {
    const href = config.jobUrl.replace(config.jobIdPlaceholder, encodeURIComponent(jobId));
    return el("a", { href, class: "dash-job", title: `job ${jobId} in the audit console` }, jobId.slice(0, 8));
  }

  function duration(seconds) {
    if (seconds === null || seconds === undefined || !isFinite(seconds)) return "–";
    const s = Math.max(0, Math.floor(seconds));
    if (s < 60) return `${s}s`;
    if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
    return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
  }

  function ms(ns) {
    if (ns === null || ns === undefined) return "–";
    const value = ns / 1e6;
    if (value >= 1000) return `${(value / 1000).toFixed(value >= 10000 ? 0 : 1)} s`;
    return `${value.toFixed(value >= 100 ? 0 : value >= 10 ? 1 : 2)} ms`;
  }

  /* A time as "12s ago" / "in 12s", kept current by the clock below (data-at on the element). */
  function relative(iso) {
    const node = el("time", { datetime: iso, title: iso, dataset: { at: iso } });
    node.textContent = relativeText(iso);
    return node;
  }

  function relativeText(iso) {
    if (!iso) return "–";
    const delta = (Date.parse(iso) - Date.now()) / 1000;
    return delta >= 0 ? `in ${duration(delta)}` : `${duration(-delta)} ago`;
  }

  /* Elapsed times (data-since) and relative times tick every second without a render. */
  function tickClock() {
    for (const node of document.querySelectorAll("[data-since]")) {
      node.textContent = duration((Date.now() - Date.parse(node.dataset.since)) / 1000);
    }
    for (const node of document.querySelectorAll("time[data-at]")) {
      node.textContent = relativeText(node.dataset.at);
    }
  }
  setInterval(tickClock, 1000);

  /* A colour variable as the canvas needs it (rgb(…)): resolved by the browser, light-dark() and
     all, on a probe element. */
  function cssVar(name, fallback) {
    const probe = el("span", { hidden: true });
    probe.style.color = `var(${name}, ${fallback})`;
    document.body.append(probe);
    const colour = getComputedStyle(probe).color;
    probe.remove();
    return colour || fallback;
  }

  window.DuctileLive = { config, scheduler, connect, el, fillTable, jobLink, duration, ms, relative, cssVar };
})();
