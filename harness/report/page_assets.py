"""The HTML report's style sheet and its one small script, inlined into the page (it must open without a
network, from a CI artifact or an e-mail attachment).

The script does three things, all optional to reading the page: it filters the test rows and failure cards by
outcome, profile and feature (the elements carry ``data-outcome``, ``data-profile`` and ``data-feature``);
it draws a chart written for a collapsed section when the section is opened; and it re-fits a chart to its
section when one is opened. Without JavaScript every row and message is still there.
"""

from __future__ import annotations

__all__ = ["PAGE_SCRIPT", "PAGE_STYLE"]

PAGE_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em auto; max-width: 84em;
       padding: 0 1em; color: #1d2330; line-height: 1.4; }
h1 { margin-bottom: 0.1em; }
h2 { margin-top: 1.6em; border-bottom: 1px solid #d7dce5; padding-bottom: 0.2em; }
[hidden] { display: none !important; }
table { border-collapse: collapse; margin: 0.6em 0 1.2em 0; }
th, td { border: 1px solid #cfd5df; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #eef1f6; }
table.meta th { width: 11em; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { margin: 0; white-space: pre-wrap; word-break: break-word; font-size: 0.85em; background: #f7f7f9;
      padding: 0.5em; max-height: 30em; overflow: auto; }
.verdict { display: inline-block; padding: 0.35em 0.9em; border-radius: 4px; font-weight: bold; }
.verdict.pass { background: #d8f3dc; color: #1b5e20; }
.verdict.fail { background: #fde0e0; color: #8e1c1c; }
.passed, .success, tr.inside { background: #e3f6e6; }
.failed, .failure, tr.outside { background: #fde4e4; }
.skipped, .partial { background: #fff4d6; }
.notRun { background: #eeeeee; }
.unsupported, .notApplicable { background: #eeeeee; color: #555c68; }
tr.detail td, tr.evidence-row td { background: #ffffff; }
.muted { color: #667085; }
.who { font-size: 1.1em; margin: 0 0 0.6em 0; }
#verdicts { display: flex; flex-wrap: wrap; gap: 0.8em; margin: 1em 0; }
.card { border: 1px solid #cfd5df; border-left: 6px solid #9aa3b2; border-radius: 6px; padding: 0.6em 0.9em;
        min-width: 17em; background: #fbfcfd; }
.card.success { border-left-color: #3a9d5d; background: #fbfcfd; }
.card.failure { border-left-color: #b8433e; background: #fbfcfd; }
.card.partial { border-left-color: #d9822b; background: #fbfcfd; }
.card.notRun { background: #fbfcfd; }
.card h3 { margin: 0 0 0.3em 0; }
.card table { margin: 0.2em 0; }
.card td, .card th { border: none; padding: 0.1em 0.5em 0.1em 0; background: transparent; }
.card .result { font-weight: bold; border-radius: 3px; padding: 0 0.4em; }
.card p { margin: 0.3em 0 0 0; font-size: 0.9em; }
#filters { position: sticky; top: 0; z-index: 5; background: #ffffff; border: 1px solid #cfd5df;
           border-radius: 6px; padding: 0.5em 0.8em; display: flex; flex-wrap: wrap; gap: 0.4em 1.4em;
           align-items: center; }
#filters fieldset { border: none; margin: 0; padding: 0; display: flex; gap: 0.7em; align-items: center; }
#filters legend { float: left; font-weight: bold; margin-right: 0.4em; padding: 0; }
#filter-count { margin-left: auto; }
article.failure-card { border: 1px solid #e3b5b5; border-left: 6px solid #b8433e; border-radius: 6px;
                       padding: 0.6em 1em; margin: 1em 0; background: #ffffff; }
article.failure-card h3 { margin: 0.1em 0 0.3em 0; font-family: ui-monospace, monospace; }
.badge { display: inline-block; font-size: 0.75em; padding: 0.05em 0.5em; border-radius: 3px; background: #eef1f6;
         font-family: system-ui, sans-serif; vertical-align: middle; margin-right: 0.4em; }
.badge.core, .badge.demo { background: #fde0e0; color: #8e1c1c; }
ul.statements { margin: 0.3em 0 0.6em 0; padding-left: 1.2em; }
ul.statements q { font-style: italic; }
details > summary { cursor: pointer; color: #2f5d9b; margin: 0.4em 0; }
.evidence { margin: 0.5em 0; }
.evidence .plotly-graph-div, .evidence .plotly-lazy { margin: 0.4em 0; }
table.numbers { font-size: 0.9em; }
table.tests { width: 100%; }
"""

PAGE_SCRIPT = """
(function () {
  "use strict";
  function drawLazy(root) {
    root.querySelectorAll("div.plotly-lazy:not([data-drawn])").forEach(function (div) {
      var source = document.querySelector('script[data-figure-for="' + div.id + '"]');
      if (!source || !window.Plotly) { return; }
      var spec = JSON.parse(source.textContent);
      div.setAttribute("data-drawn", "1");
      window.Plotly.newPlot(div, spec.figure.data || [], spec.figure.layout || {}, spec.config || {});
    });
  }
  document.addEventListener("toggle", function (event) {
    var section = event.target;
    if (!section.open || !window.Plotly) { return; }
    drawLazy(section);
    section.querySelectorAll(".plotly-graph-div").forEach(function (div) { window.Plotly.Plots.resize(div); });
  }, true);

  var form = document.getElementById("filters");
  if (!form) { return; }
  function apply() {
    var outcomes = {};
    form.querySelectorAll('input[name="outcome"]').forEach(function (box) { outcomes[box.value] = box.checked; });
    var profile = form.elements.namedItem("profile").value;
    var feature = form.elements.namedItem("feature").value;
    var shown = 0, total = 0;
    document.querySelectorAll("[data-test]").forEach(function (el) {
      var d = el.dataset;
      var visible = outcomes[d.outcome] !== false && (!profile || d.profile === profile) &&
                    (!feature || d.feature === feature);
      el.hidden = !visible;
      if (el.classList.contains("test-row")) { total += 1; if (visible) { shown += 1; } }
    });
    document.querySelectorAll("[data-profile-section]").forEach(function (el) {
      el.hidden = Boolean(profile) && el.getAttribute("data-profile-section") !== profile;
    });
    var none = document.getElementById("no-failure-shown");
    if (none) {
      none.hidden = document.querySelectorAll("article.failure-card:not([hidden])").length > 0 ||
                    document.querySelectorAll("article.failure-card").length === 0;
    }
    document.getElementById("filter-count").textContent = shown + " of " + total + " tests shown";
  }
  form.addEventListener("change", apply);
  form.addEventListener("input", apply);
  form.addEventListener("reset", function () { window.setTimeout(apply, 0); });
  apply();
}());
"""
