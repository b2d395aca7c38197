// The live job page of `hetero-emu serve` (emulator/serve/page.py): follows the job's server-sent
// events and keeps the status, the hosts table, the timeline, the metrics and the log panes up to date.
// Plain JavaScript, no library: the page works with no internet. Text from the job (log lines, names)
// only ever goes into the page through textContent or SVG text nodes, never as HTML.
"use strict";

(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const MAX_LINES = 3000; // per log pane: older lines leave the page (the file keeps them)
  const PHASE_COLOURS = {
    toolkit: "#dfe3e8",
    requirements: "#f5b971",
    waiting: "url(#hatch-waiting)",
    script: null, // the host's group colour
    "mpi wait": "#aab3bd",
    upload: "#8fb5e0",
  };
  const data = JSON.parse(document.getElementById("job-data").textContent);
  const hosts = new Map(); // host -> its latest state (HostState.to_json)
  let phases = {}; // host -> [[name, start, end|null], ...]
  const points = []; // metric points {host, name, value, at}
  let skew = 0; // server clock - this browser's clock, ms
  let ended = false;
  let status = data.status;

  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function colour(group) {
    return data.groups[group] || { fill: "#dddddd", stroke: "#5f6670" };
  }

  function now() {
    return Date.now() + skew;
  }

  function seconds(ms) {
    const s = ms / 1000;
    return s < 100 ? s.toFixed(1) + " s" : Math.round(s) + " s";
  }

  // ---- status and stop button

  function showStatus(s) {
    status = s;
    const badge = document.getElementById("status");
    badge.textContent = s.status;
    badge.className = "status status-" + s.status.toLowerCase();
    document.getElementById("secondary").textContent = s.secondary;
    document.getElementById("message").textContent = s.message;
    const failure = document.getElementById("failure");
    failure.textContent = s.failure;
    failure.hidden = !s.failure;
    if (["Completed", "Failed", "Stopped"].includes(s.status)) {
      document.getElementById("stop").disabled = true;
    }
  }

  document.getElementById("stop-form").addEventListener("submit", function (event) {
    event.preventDefault();
    const result = document.getElementById("stop-result");
    if (!window.confirm("Stop job " + data.job + "? Its hosts get SIGTERM, as StopTrainingJob does.")) return;
    const button = document.getElementById("stop");
    button.disabled = true;
    result.textContent = "stopping…";
    // The server's stop token, in a header no other site's page can send (emulator/serve/page.py).
    const headers = { Accept: "application/json", "X-Hetero-Emu-Stop-Token": data.stopToken };
    fetch(data.stop, { method: "POST", headers: headers, credentials: "same-origin" })
      .then(function (response) {
        return response.json().then(function (body) {
          if (response.ok) {
            result.textContent = "StopTrainingJob sent: the job is stopping.";
          } else {
            result.textContent = body.error || "not stopped (" + response.status + ")";
            button.disabled = ended;
          }
        });
      })
      .catch(function () {
        result.textContent = "the server did not answer";
        button.disabled = ended;
      });
  });

  // ---- hosts table

  function hostRow(h) {
    const body = document.querySelector("#hosts tbody");
    let row = Array.from(body.rows).find((r) => r.dataset.host === h.host);
    if (!row) {
      row = el("tr", { "data-host": h.host });
      row.appendChild(el("td", { class: "host" }, h.host));
      const group = el("td");
      const chip = el("span", { class: "group-chip" }, h.group);
      chip.style.background = colour(h.group).fill;
      chip.style.borderColor = colour(h.group).stroke;
      group.appendChild(chip);
      row.appendChild(group);
      row.appendChild(el("td", {}, h.instance_type));
      row.appendChild(el("td", { class: "state" }));
      row.appendChild(el("td", { class: "num exit" }));
      body.appendChild(row);
    }
    return row;
  }

  function showHosts(list) {
    for (const h of list) {
      hosts.set(h.host, h);
      const row = hostRow(h);
      const state = row.querySelector(".state");
      state.textContent = h.state;
      state.className = "state state-" + h.state;
      const exit = row.querySelector(".exit");
      exit.textContent = h.exit_code === null ? "" : String(h.exit_code);
      exit.classList.toggle("failed", h.exit_code !== null && h.exit_code !== 0);
      logPane(h.host, h.group);
    }
  }

  // ---- log panes

  function logPane(host, group) {
    const logs = document.getElementById("logs");
    let pane = Array.from(logs.children).find((p) => p.dataset.host === host);
    if (!pane) {
      pane = el("div", { class: "log-pane", "data-host": host });
      pane.style.borderColor = colour(group).stroke;
      const title = el("div", { class: "log-title" }, host + " ");
      title.style.background = colour(group).fill;
      title.appendChild(el("span", { class: "muted" }, "(" + group + ")"));
      pane.appendChild(title);
      pane.appendChild(el("div", { class: "log", tabindex: "0" }));
      logs.appendChild(pane);
    }
    return pane.querySelector(".log");
  }

  function megabytes(bytes) {
    return bytes < 1e6 ? Math.round(bytes / 1e3) + " kB" : (bytes / 1e6).toFixed(1) + " MB";
  }

  function note(box, text) {
    const line = el("div", { class: "log-note" }, text);
    box.insertBefore(line, box.firstChild);
    return line;
  }

  function showLog(event) {
    const h = hosts.get(event.host);
    const group = h ? h.group : "?";
    const box = logPane(event.host, group);
    const follow = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
    if (event.skipped) {
      note(box, "… the first " + megabytes(event.skipped) + " of this log are not shown (logs/" + event.host + ".log has them)");
    }
    const stroke = colour(group).stroke;
    const part = document.createDocumentFragment();
    for (const text of event.lines) {
      const line = el("div", { class: "line" });
      line.style.borderLeftColor = stroke;
      const prefix = el("span", { class: "prefix" }, event.host + " │ ");
      prefix.style.color = stroke;
      line.appendChild(prefix);
      line.appendChild(document.createTextNode(text));
      part.appendChild(line);
    }
    box.appendChild(part);
    const lines = box.querySelectorAll(":scope > .line");
    let extra = lines.length - MAX_LINES;
    if (extra > 0) {
      for (let i = 0; i < extra; i++) lines[i].remove();
      const dropped = Number(box.dataset.dropped || 0) + extra;
      box.dataset.dropped = String(dropped);
      const old = box.querySelector(":scope > .log-note.dropped");
      const mark = old || note(box, "");
      mark.classList.add("dropped");
      mark.textContent = "… " + dropped + " earlier lines left this page (logs/" + event.host + ".log has them)";
    }
    if (follow) box.scrollTop = box.scrollHeight;
  }

  // ---- timeline

  function niceStep(total) {
    const raw = Math.max(total, 1e-3) / 6;
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (m * power >= raw) return m * power;
    return 10 * power;
  }

  function time(text) {
    return text ? Date.parse(text) : null;
  }

  function drawTimeline() {
    const box = document.getElementById("timeline");
    const list = Array.from(hosts.values()).filter((h) => h.started);
    if (!list.length) return;
    const t0 = Math.min(...list.map((h) => time(h.started)));
    let last = t0 + 1000;
    for (const h of list) {
      last = Math.max(last, h.finished ? time(h.finished) : now());
      for (const p of phases[h.host] || []) last = Math.max(last, p[2] ? time(p[2]) : now());
    }
    const total = (last - t0) / 1000;
    const step = niceStep(total);
    const axisEnd = Math.ceil(total / step - 1e-9) * step || step;
    const rowH = 28, barH = 18, left = 170, top = 8;
    const width = Math.max(box.clientWidth || 800, 520);
    const plot = width - left - 120;
    const x = (ms) => left + ((ms - t0) / 1000 / axisEnd) * plot;
    const height = top + list.length * rowH + 36;
    const chart = svg("svg", { width: width, height: height, viewBox: "0 0 " + width + " " + height, class: "timeline-svg" });
    const defs = svg("defs");
    const hatch = svg("pattern", { id: "hatch-waiting", width: 6, height: 6, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" });
    hatch.appendChild(svg("rect", { width: 6, height: 6, fill: "#ffffff" }));
    hatch.appendChild(svg("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#8a939c", "stroke-width": 2 }));
    defs.appendChild(hatch);
    chart.appendChild(defs);
    const ticks = Math.round(axisEnd / step);
    const bottom = top + list.length * rowH;
    for (let k = 0; k <= ticks; k++) {
      const tx = left + (k * step / axisEnd) * plot;
      chart.appendChild(svg("line", { x1: tx, y1: top, x2: tx, y2: bottom + 4, stroke: k ? "#e2e5e9" : "#5f6670" }));
      chart.appendChild(svg("text", { x: tx, y: bottom + 18, "text-anchor": "middle", class: "tick" }, String(+(k * step).toFixed(3))));
    }
    chart.appendChild(svg("text", { x: left + plot / 2, y: bottom + 32, "text-anchor": "middle", class: "tick" },
      "seconds since the first host started"));
    list.forEach(function (h, i) {
      const y = top + i * rowH;
      const c = colour(h.group);
      chart.appendChild(svg("text", { x: left - 10, y: y + rowH / 2 + 4, "text-anchor": "end", class: "row-label" },
        h.host + " (" + h.group + ")"));
      const start = time(h.started);
      const end = h.finished ? time(h.finished) : now();
      const failed = h.exit_code !== null && h.exit_code !== 0;
      const bar = svg("rect", { x: x(start), y: y + (rowH - barH) / 2, width: Math.max(x(end) - x(start), 2), height: barH, rx: 3,
        fill: c.fill, stroke: failed ? data.failure : c.stroke, "stroke-width": failed ? 2.5 : 1 });
      if (!h.finished) bar.setAttribute("stroke-dasharray", "4 3");
      bar.appendChild(svg("title", {}, h.host + ": " + h.state + ", started " + seconds(start - t0) +
        (h.finished ? ", exited after " + seconds(end - start) : ", running for " + seconds(end - start))));
      chart.appendChild(bar);
      for (const p of phases[h.host] || []) {
        const ps = time(p[1]);
        const pe = p[2] ? time(p[2]) : now();
        const fill = PHASE_COLOURS[p[0]] === null ? c.fill : PHASE_COLOURS[p[0]] || "#cccccc";
        const rect = svg("rect", { x: x(ps), y: y + (rowH - barH) / 2 + 4, width: Math.max(x(pe) - x(ps), 1), height: barH - 8,
          fill: fill, stroke: c.stroke, "stroke-width": 0.5, class: "phase" });
        rect.appendChild(svg("title", {}, h.host + " " + p[0] + ": " + seconds(ps - t0) + " to " + seconds(pe - t0) +
          " (" + seconds(pe - ps) + ")"));
        chart.appendChild(rect);
      }
      let tail = h.state;
      if (h.exit_code !== null) tail = "exit " + h.exit_code;
      const label = svg("text", { x: Math.max(x(end), ...((phases[h.host] || []).map((p) => x(p[2] ? time(p[2]) : now())))) + 8,
        y: y + rowH / 2 + 4, class: failed ? "tail failed" : "tail" }, tail);
      chart.appendChild(label);
    });
    box.replaceChildren(chart);
  }

  // ---- metrics

  function drawMetrics() {
    if (!points.length) return;
    document.getElementById("metrics-panel").hidden = false;
    const box = document.getElementById("metrics");
    const names = [...new Set(points.map((p) => p.name))];
    const started = Array.from(hosts.values()).filter((h) => h.started).map((h) => time(h.started) / 1000);
    const t0 = started.length ? Math.min(...started) : Math.min(...points.map((p) => p.at));
    const charts = [];
    for (const name of names) {
      const mine = points.filter((p) => p.name === name);
      const w = 360, h = 190, l = 56, r = 12, t = 26, b = 30;
      const xs = mine.map((p) => p.at - t0), ys = mine.map((p) => p.value);
      const xmax = Math.max(...xs, 1e-3), xmin = Math.min(0, ...xs);
      let ymin = Math.min(...ys), ymax = Math.max(...ys);
      if (ymin === ymax) { ymin -= 1; ymax += 1; }
      const px = (v) => l + ((v - xmin) / (xmax - xmin)) * (w - l - r);
      const py = (v) => t + (1 - (v - ymin) / (ymax - ymin)) * (h - t - b);
      const chart = svg("svg", { width: w, height: h, viewBox: "0 0 " + w + " " + h, class: "metric-svg" });
      chart.appendChild(svg("text", { x: l, y: 16, class: "metric-title" }, name));
      chart.appendChild(svg("line", { x1: l, y1: h - b, x2: w - r, y2: h - b, stroke: "#5f6670" }));
      chart.appendChild(svg("line", { x1: l, y1: t, x2: l, y2: h - b, stroke: "#5f6670" }));
      for (const v of [ymin, (ymin + ymax) / 2, ymax]) {
        chart.appendChild(svg("text", { x: l - 6, y: py(v) + 4, "text-anchor": "end", class: "tick" }, String(+v.toPrecision(4))));
      }
      chart.appendChild(svg("text", { x: w - r, y: h - 8, "text-anchor": "end", class: "tick" }, seconds(xmax * 1000)));
      chart.appendChild(svg("text", { x: l, y: h - 8, class: "tick" }, seconds(xmin * 1000)));
      const byHost = new Map();
      for (const p of mine) {
        if (!byHost.has(p.host)) byHost.set(p.host, []);
        byHost.get(p.host).push(p);
      }
      let dash = 0;
      for (const [host, list] of byHost) {
        const hs = hosts.get(host);
        const stroke = colour(hs ? hs.group : "?").stroke;
        const line = svg("polyline", { points: list.map((p) => px(p.at - t0) + "," + py(p.value)).join(" "), fill: "none",
          stroke: stroke, "stroke-width": 1.8, "stroke-dasharray": ["", "5 3", "2 2", "8 3 2 3"][dash++ % 4] });
        line.appendChild(svg("title", {}, host + ": last " + list[list.length - 1].value));
        chart.appendChild(line);
        if (list.length <= 40) {
          for (const p of list) chart.appendChild(svg("circle", { cx: px(p.at - t0), cy: py(p.value), r: 2, fill: stroke }));
        }
      }
      const figure = el("figure", { class: "metric" });
      figure.appendChild(chart);
      const legend = el("figcaption", { class: "muted" });
      legend.textContent = Array.from(byHost.keys()).map((host) => host + " " + byHost.get(host).slice(-1)[0].value).join(" · ");
      figure.appendChild(legend);
      charts.push(figure);
    }
    box.replaceChildren(...charts);
  }

  // ---- the events

  const connection = document.getElementById("connection");
  const source = new EventSource(data.events);
  source.addEventListener("open", function () {
    connection.textContent = ended ? "" : "live";
  });
  source.addEventListener("error", function () {
    if (!ended) connection.textContent = "connection lost: reconnecting…";
  });
  source.addEventListener("status", function (e) {
    showStatus(JSON.parse(e.data));
  });
  source.addEventListener("hosts", function (e) {
    const body = JSON.parse(e.data);
    if (body.now) skew = Date.parse(body.now) - Date.now();
    showHosts(body.hosts);
    drawTimeline();
  });
  source.addEventListener("log", function (e) {
    showLog(JSON.parse(e.data));
  });
  source.addEventListener("phases", function (e) {
    phases = JSON.parse(e.data).phases;
    drawTimeline();
  });
  source.addEventListener("metrics", function (e) {
    points.push(...JSON.parse(e.data).points);
    drawMetrics();
  });
  source.addEventListener("end", function () {
    ended = true;
    source.close();
    document.getElementById("stop").disabled = true;
    connection.textContent = "The job has ended (" + status.status + "): everything was received.";
    drawTimeline();
  });

  showHosts(data.hosts);
  window.setInterval(function () {
    if (!ended) drawTimeline();
  }, 1000);
  window.addEventListener("resize", drawTimeline);
})();
