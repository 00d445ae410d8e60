/* /dashboard/pipelines/: every pipeline drawn by mermaid from the same Mermaid text as
   `pipeline visualize`, and each diagram's steps coloured by the status of their jobs in one run:
   the one chosen in the card's menu, else the pipeline's latest run, updated live. */
"use strict";

(function () {
  const L = window.DuctileLive;
  const { el } = L;
  const cards = new Map(); // pipeline name -> {card, nodes: step -> mermaid id, graph: step -> svg node}
  let runs = {};
  let steps = {};
  const scheduler = L.scheduler(render);
  window.ductilePipelines = { stats: scheduler.stats, ready: false };

  function darkTheme() {
    const theme = document.documentElement.dataset.theme;
    return theme === "dark" || (theme !== "light" && matchMedia("(prefers-color-scheme: dark)").matches);
  }

  /* Mermaid names a node's SVG group after the node's id ("…-flowchart-<id>-<n>") and, in recent
     versions, says the id in data-id: either finds the step. */
  function nodeId(group) {
    if (group.dataset.id) return group.dataset.id;
    const found = /flowchart-(.+)-\d+$/.exec(group.id);
    return found ? found[1] : null;
  }

  async function draw() {
    mermaid.initialize({
      startOnLoad: false,
      securityLevel: "strict",
      theme: darkTheme() ? "dark" : "default",
      /* No text the diagrams draw may reconfigure them: a `%%{init: …}%%` directive or a front
         matter `config:` that got past the labels' escaping cannot touch these keys (Mermaid
         drops them from a diagram's own config, at any depth). */
      secure: [
        "secure", "securityLevel", "startOnLoad", "maxTextSize", "suppressErrorRendering", "maxEdges",
        "theme", "themeCSS", "themeVariables", "fontFamily", "altFontFamily", "fontSize", "darkMode",
        "look", "handDrawnSeed", "htmlLabels", "flowchart", "layout", "elk", "dompurifyConfig",
        "deterministicIds", "deterministicIDSeed", "wrap", "arrowMarkerAbsolute", "legacyMathML",
        "forceLegacyMathML", "markdownAutoWrap", "logLevel",
      ],
    });
    let index = 0;
    for (const card of document.querySelectorAll(".dash-pipeline")) {
      const nodes = JSON.parse(card.querySelector("script[type='application/json']").textContent);
      const stepOf = Object.fromEntries(nodes.map(([step, id]) => [id, step]));
      const box = card.querySelector(".dash-diagram");
      try {
        const { svg } = await mermaid.render(`pipeline-diagram-${index++}`, card.querySelector(".dash-mermaid-source").textContent);
        box.innerHTML = svg; // mermaid's own output, rendered with securityLevel "strict"
      } catch (error) {
        box.replaceChildren(el("p", { class: "dash-error" }, `The diagram could not be drawn: ${error.message || error}`));
      }
      const graph = {};
      for (const group of box.querySelectorAll("g.node")) {
        const step = stepOf[nodeId(group)];
        if (step !== undefined) {
          group.dataset.step = step;
          graph[step] = group;
        }
      }
      const select = card.querySelector(".dash-run-choice");
      select.addEventListener("change", choose);
      cards.set(card.dataset.pipeline, { card, nodes, graph, select });
    }
  }

  const baseUrl = L.config.stream;
  let stream = null;
  // The run each diagram shows: a root job id, or "latest". A run named in the page's address
  // (?run=, from the overview's pipelines table) is followed until its pipeline is known.
  const choice = new Map();
  let pending = L.config.run;

  function chosen() {
    const ids = [...choice.values()].filter((id) => id !== "latest");
    if (pending) ids.push(pending);
    return ids;
  }

  function url() {
    return baseUrl + chosen().map((id) => `&run=${encodeURIComponent(id)}`).join("");
  }

  function choose(event) {
    const name = event.target.closest(".dash-pipeline").dataset.pipeline;
    choice.set(name, event.target.value);
    stream.reopen(url());
    scheduler.request();
  }

  function claimPending() {
    if (!pending) return;
    for (const [name, run] of Object.entries(steps)) {
      if (run && run.job_id === pending) {
        choice.set(name, pending);
        pending = null;
        document.getElementById(cards.get(name)?.card.id || "")?.scrollIntoView({ block: "start" });
        return;
      }
    }
  }

  function render() {
    claimPending();
    for (const [name, { card, nodes, graph, select }] of cards) {
      const wanted = choice.get(name) || "latest";
      fillChoices(select, runs[name] || [], wanted);
      const run = steps[name] || null;
      const shown = run && (wanted === "latest" || wanted === run.job_id) ? run : null;
      for (const [step, group] of Object.entries(graph)) {
        group.dataset.status = shown && shown.steps[step] ? shown.steps[step].status : "none";
      }
      const status = card.querySelector(".dash-run-status");
      status.dataset.status = shown ? shown.status : "none";
      status.replaceChildren(shown ? `run ${shown.job_id.slice(0, 8)}: ${shown.status}` : "no run yet");
      const rows = nodes.map(([step, , label]) => {
        const job = shown && shown.steps[step];
        const state = job ? job.status : "none";
        return el(
          "tr",
          { dataset: { step } },
          el("td", {}, label),
          el("td", {}, job ? `${job.plugin}.${job.command}` : "–"),
          el("td", {}, el("span", { class: "dash-pill", dataset: { status: state } }, job ? state.replace("_", " ") : "not reached")),
          el("td", { class: "dash-num" }, job ? job.attempt : "–"),
          el("td", {}, job ? L.jobLink(job.job_id) : "–"),
        );
      });
      card.querySelector(".dash-steps").tBodies[0].replaceChildren(...rows);
    }
  }

  /* The menu: "latest run", then the pipeline's latest runs; a chosen run that has left the list
     stays in it. Rebuilt only when its entries change, so an open menu is not disturbed. */
  function fillChoices(select, list, wanted) {
    const options = [el("option", { value: "latest" }, "latest run")];
    for (const run of list) {
      const when = new Date(run.started_at).toLocaleString();
      options.push(el("option", { value: run.job_id }, `${when} · ${run.status} · ${run.job_id.slice(0, 8)}`));
    }
    if (wanted !== "latest" && !list.some((run) => run.job_id === wanted)) {
      options.push(el("option", { value: wanted }, `run ${wanted.slice(0, 8)}`));
    }
    const same =
      select.options.length === options.length &&
      options.every((option, i) => select.options[i].value === option.value && select.options[i].textContent === option.textContent);
    if (!same) select.replaceChildren(...options);
    if (select.value !== wanted) select.value = wanted;
  }

  draw().then(() => {
    stream = L.connect(url(), {
      runs(data) {
        runs = data;
        scheduler.request();
      },
      steps(data) {
        steps = data;
        scheduler.request();
      },
    });
    window.ductilePipelines.ready = true;
  });
})();
