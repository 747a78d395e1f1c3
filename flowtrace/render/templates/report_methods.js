/* flowtrace report, --method all: the matrix's and the findings' method filters. Included only
   in a report that answers for several methods (a plain report's script is report.js alone).
   report.js's own filters run first (its listeners were added first); these then hide the
   lines and findings of the other methods. Like report.js: no data ever becomes markup. */
(function () {
  "use strict";

  var matrixMethod = document.getElementById("matrix-method");
  var findingMethod = document.getElementById("finding-method");
  var table = document.getElementById("matrix-table");
  var count = document.getElementById("matrix-count");
  var findingCount = document.getElementById("finding-count");

  function each(selector, fn) {
    Array.prototype.forEach.call(document.querySelectorAll(selector), fn);
  }

  /* After report.js's filter: hide the lines another method answers, count what is shown. */
  function filterLines() {
    if (!table) return;
    var want = matrixMethod ? matrixMethod.value : "";
    var rows = Array.prototype.slice.call(table.tBodies[0].rows);
    var shown = 0;
    rows.forEach(function (row) {
      if (want && row.getAttribute("data-method") !== want) row.hidden = true;
      if (!row.hidden) shown += 1;
    });
    if (count) count.textContent = shown + " of " + rows.length + " lines" + (want ? " (" + want + ")" : "");
  }

  /* After report.js's severity and rule filters: hide the findings of another method. */
  function filterFindings() {
    var want = findingMethod ? findingMethod.value : "";
    var items = Array.prototype.slice.call(document.querySelectorAll("li.finding"));
    var shown = 0;
    items.forEach(function (li) {
      if (want && li.getAttribute("data-method") !== want) li.hidden = true;
      if (!li.hidden) shown += 1;
    });
    each("section.rule", function (sec) { sec.hidden = !sec.querySelector("li.finding:not([hidden])"); });
    if (findingCount) findingCount.textContent = shown + " of " + items.length + " findings" + (want ? " (" + want + ")" : "");
  }

  /* Every control report.js filters on: re-apply after it (listeners run in the order added). */
  ["filter", "only-registered", "only-findings", "hide-unsupported"].forEach(function (id) {
    var el = document.getElementById(id);
    if (el) el.addEventListener(el.type === "checkbox" ? "change" : "input", filterLines);
  });
  ["finding-severity", "finding-rule"].forEach(function (id) {
    var el = document.getElementById(id);
    if (el) el.addEventListener("change", filterFindings);
  });
  each(".count-filter", function (badge) {
    badge.addEventListener("click", function () { filterFindings(); filterLines(); });
  });

  /* A method chosen: report.js's filter first (it shows what its own controls allow), then ours. */
  function rerun(id, type, after) {
    var el = document.getElementById(id);
    if (el) el.dispatchEvent(new Event(type));
    else after();
  }
  if (matrixMethod) matrixMethod.addEventListener("change", function () { rerun("filter", "input", filterLines); });
  if (findingMethod) findingMethod.addEventListener("change", function () { rerun("finding-severity", "change", filterFindings); });

  filterLines();
  filterFindings();
})();
