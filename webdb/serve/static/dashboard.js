/* webdb serve: draws the charts of the overview and rounds views with uPlot.
   The data comes from the page's JSON block (#chart-data), never from inline script. */
"use strict";

(function () {
  const COLORS = ["#1f5f8b", "#2e8b57", "#c0392b", "#8e44ad", "#d68910", "#16a085", "#7f8c8d", "#34495e", "#e67e22"];
  window.webdbCharts = {};

  function width(el) {
    return Math.max(240, el.clientWidth || 600);
  }

  function lines(id, x, series, opts) {
    const el = document.getElementById(id);
    if (!el) return;
    const names = Object.keys(series);
    const chart = new uPlot(
      {
        width: width(el),
        height: (opts && opts.height) || 260,
        scales: { x: { time: false } },
        // Whole generations on the x axis: no 0.5 ticks between two commits.
        axes: [{ label: "generation", incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000] }, { size: 70 }],
        series: [{ label: "generation" }].concat(
          names.map((n, i) => ({ label: n, stroke: COLORS[i % COLORS.length], width: 2, points: { show: true } }))
        ),
      },
      [x].concat(names.map((n) => series[n])),
      el
    );
    window.webdbCharts[id] = chart;
  }

  function bars(id, pairs, label) {
    const el = document.getElementById(id);
    if (!el) return;
    // One empty slot on each side: the bars (even a single one) stand inside the plot.
    const x = [-1].concat(pairs.map((p, i) => i), [pairs.length]);
    const y = [null].concat(pairs.map((p) => p[1]), [null]);
    const ticks = pairs.map((p) => (p[0] === null ? "inf" : String(p[0])));
    const chart = new uPlot(
      {
        width: width(el),
        height: 220,
        scales: { x: { time: false } },
        axes: [
          { label: label, values: (u, vals) => vals.map((v) => (Number.isInteger(v) && ticks[v] !== undefined ? ticks[v] : "")) },
          { size: 60 },
        ],
        series: [
          { label: label, value: (u, v) => (v === null || ticks[v] === undefined ? "-" : ticks[v]) },
          { label: "pages", fill: "#1f5f8b88", stroke: "#1f5f8b", paths: uPlot.paths.bars({ size: [0.8, 40] }), points: { show: false } },
        ],
      },
      [x, y],
      el
    );
    window.webdbCharts[id] = chart;
  }

  function draw() {
    const block = document.getElementById("chart-data");
    if (!block) return;
    const data = JSON.parse(block.textContent);
    const view = document.body.dataset.view;
    if (view === "rounds") {
      const s = data.series;
      const statuses = {};
      Object.keys(s).forEach((k) => {
        if (k !== "links" && k !== "pages" && s[k].some((v) => v > 0)) statuses[k] = s[k];
      });
      lines("chart-rounds", data.x, Object.assign({ pages: s.pages }, statuses), { height: 300 });
      lines("chart-links", data.x, { links: s.links });
      lines("chart-bytes", data.x, { bytes: data.bytes });
    } else if (view === "overview") {
      bars("chart-score", data.score, "score");
      bars("chart-interval", data.interval, "days");
    }
    document.body.dataset.charts = "drawn";
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
  else draw();
})();
