/* flowtrace report behaviour: matrix sort/filter, model inspector, j/k finding navigation.
   Vanilla JS, no network, and no data ever becomes markup: only classList, hidden,
   textContent and attribute reads are used. */
(function () {
  "use strict";

  var dataEl = document.getElementById("flowtrace-data");
  var data = {};
  try {
    data = JSON.parse(dataEl ? dataEl.textContent : "{}");
  } catch (err) {
    data = {};
  }
  var ui = data.ui || {};
  window.flowtrace = { data: data };

  /* The element id named by the URL hash ("" when none or malformed). */
  function hashId() {
    try {
      return decodeURIComponent(location.hash.slice(1));
    } catch (err) {
      return "";
    }
  }

  /* ---------------- model matrix: filter, toggles, sort ---------------- */
  var table = document.getElementById("matrix-table");
  var tbody = table ? table.tBodies[0] : null;
  var rows = tbody ? Array.prototype.slice.call(tbody.rows) : [];
  var filter = document.getElementById("filter");
  var onlyRegistered = document.getElementById("only-registered");
  var onlyFindings = document.getElementById("only-findings");
  var hideUnsupported = document.getElementById("hide-unsupported");
  var count = document.getElementById("matrix-count");

  var onlySupport = "";  /* a support count badge clicked in the summary ("" = every row) */
  var onlySeverity = "";  /* a severity count badge clicked: rows a finding of that severity concerns */

  function applyFilter() {
    var terms = (filter && filter.value ? filter.value : "").toLowerCase().split(/\s+/).filter(Boolean);
    var shown = 0;
    rows.forEach(function (row) {
      var text = row.getAttribute("data-search") || "";
      var ok = terms.every(function (t) { return text.indexOf(t) !== -1; });
      if (ok && onlySupport) ok = row.getAttribute("data-support") === onlySupport;
      if (ok && onlySeverity) ok = (" " + (row.getAttribute("data-severities") || "") + " ").indexOf(" " + onlySeverity + " ") !== -1;
      if (ok && onlyRegistered && onlyRegistered.checked) ok = row.getAttribute("data-registered") === "1";
      if (ok && onlyFindings && onlyFindings.checked) ok = row.getAttribute("data-findings") !== "0";
      if (ok && hideUnsupported && hideUnsupported.checked) ok = row.getAttribute("data-support") !== "none";
      row.hidden = !ok;
      if (ok) shown += 1;
    });
    if (count) count.textContent = shown + " of " + rows.length + " classes" + (onlySeverity ? " (with " + onlySeverity + " findings)" : "");
  }
  [filter, onlyRegistered, onlyFindings, hideUnsupported].forEach(function (el) {
    if (el) el.addEventListener(el.type === "checkbox" ? "change" : "input", applyFilter);
  });

  /* ---------------- findings: severity and rule filters ---------------- */
  var sevSelect = document.getElementById("finding-severity");
  var ruleSelect = document.getElementById("finding-rule");
  var findingCount = document.getElementById("finding-count");
  var findingItems = Array.prototype.slice.call(document.querySelectorAll("li.finding"));

  function applyFindingFilter() {
    var sev = sevSelect ? sevSelect.value : "";
    var rule = ruleSelect ? ruleSelect.value : "";
    var shown = 0;
    findingItems.forEach(function (li) {
      var ok = (!sev || li.getAttribute("data-severity") === sev) && (!rule || li.getAttribute("data-rule") === rule);
      li.hidden = !ok;
      if (ok) shown += 1;
    });
    Array.prototype.forEach.call(document.querySelectorAll("section.rule"), function (sec) {
      sec.hidden = !sec.querySelector("li.finding:not([hidden])");
    });
    if (findingCount) findingCount.textContent = shown + " of " + findingItems.length + " findings";
  }
  [sevSelect, ruleSelect].forEach(function (el) { if (el) el.addEventListener("change", applyFindingFilter); });

  /* Count badges in the summary filter what they count; a second click shows everything. */
  Array.prototype.forEach.call(document.querySelectorAll(".count-filter"), function (badge) {
    badge.addEventListener("click", function () {
      var support = badge.getAttribute("data-filter-support");
      var severity = badge.getAttribute("data-filter-severity");
      var wasActive = badge.classList.contains("active");
      Array.prototype.forEach.call(document.querySelectorAll(".count-filter"), function (b) {
        if ((support !== null) === b.hasAttribute("data-filter-support")) b.classList.remove("active");
      });
      if (!wasActive) badge.classList.add("active");
      if (support !== null) {
        onlySupport = wasActive ? "" : support;
        applyFilter();
      } else if (severity !== null) {
        /* the findings of that severity, and the matrix rows they concern: the same set */
        onlySeverity = wasActive ? "" : severity;
        if (sevSelect) sevSelect.value = onlySeverity;
        applyFindingFilter();
        applyFilter();
      }
    });
  });

  function cellKey(row, col, numeric) {
    var cell = row.cells[col];
    if (!cell) return numeric ? 0 : "";
    var v = cell.hasAttribute("data-sort") ? cell.getAttribute("data-sort") : cell.textContent;
    if (numeric) {
      var n = parseFloat(v);
      return isNaN(n) ? 0 : n;
    }
    return v.toLowerCase();
  }

  if (table) {
    Array.prototype.forEach.call(table.querySelectorAll("th button.sort"), function (btn) {
      btn.addEventListener("click", function () {
        var th = btn.parentNode;
        var col = parseInt(btn.getAttribute("data-col"), 10);
        var numeric = btn.getAttribute("data-type") === "num";
        var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
        Array.prototype.forEach.call(table.querySelectorAll("th"), function (h) { h.setAttribute("aria-sort", "none"); });
        th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
        var keyed = rows.map(function (row, i) { return { row: row, key: cellKey(row, col, numeric), i: i }; });
        keyed.sort(function (a, b) {
          if (a.key < b.key) return -dir;
          if (a.key > b.key) return dir;
          return a.i - b.i;
        });
        var frag = document.createDocumentFragment();
        keyed.forEach(function (k) { frag.appendChild(k.row); });
        tbody.appendChild(frag);
        rows = keyed.map(function (k) { return k.row; });
      });
    });
  }

  /* ---------------- model inspector ---------------- */
  var select = document.getElementById("model-select");
  var current = null;

  function showModel(id, scroll) {
    var article = id ? document.getElementById(id) : null;
    if (!article || !article.classList.contains("model-detail")) return false;
    if (current && current !== article) current.classList.remove("active");
    article.classList.add("active");
    current = article;
    if (select && select.value !== id) select.value = id;
    rows.forEach(function (row) { row.classList.toggle("selected", row.getAttribute("data-model") === id); });
    if (scroll) article.scrollIntoView({ block: "start" });
    return true;
  }
  current = document.querySelector(".model-detail.active");
  if (select) {
    select.addEventListener("change", function () {
      showModel(select.value, false);
      if (history.replaceState) history.replaceState(null, "", "#" + select.value);
    });
  }

  /* ---------------- findings: j / k ---------------- */
  var findingIds = Array.isArray(ui.findings) ? ui.findings : [];

  /* Next/previous relative to the finding in the URL hash; without one, relative to what is
     on screen (j from the top of the page goes to the first finding). */
  function goFinding(step) {
    if (!findingIds.length) return;
    var at = findingIds.indexOf(hashId());
    var next;
    if (at !== -1) {
      next = Math.min(findingIds.length - 1, Math.max(0, at + step));
    } else {
      var tops = findingIds.map(function (id) {
        var el = document.getElementById(id);
        return el ? el.getBoundingClientRect().top : 0;
      });
      next = step > 0 ? findingIds.length - 1 : 0;
      if (step > 0) {
        for (var i = 0; i < tops.length; i++) { if (tops[i] > 1) { next = i; break; } }
      } else {
        for (var j = tops.length - 1; j >= 0; j--) { if (tops[j] < -1) { next = j; break; } }
      }
    }
    var id = findingIds[next];
    location.hash = id;
    var target = document.getElementById(id);
    if (target) {
      target.scrollIntoView({ block: "center" });
      target.focus({ preventScroll: true });
    }
  }

  document.addEventListener("keydown", function (ev) {
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    var t = ev.target;
    var typing = t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT" || t.isContentEditable);
    if (typing) {
      if (ev.key === "Escape" && t.blur) t.blur();
      return;
    }
    if (ev.key === "j") { goFinding(1); ev.preventDefault(); }
    else if (ev.key === "k") { goFinding(-1); ev.preventDefault(); }
    else if (ev.key === "/" && filter) { filter.focus(); filter.select(); ev.preventDefault(); }
  });

  /* ---------------- hash routing ---------------- */
  function onHash(scroll) {
    var id = hashId();
    if (!id) return;
    showModel(id, scroll);
  }
  window.addEventListener("hashchange", function () { onHash(true); });
  onHash(true);

  /* ---------------- print: open collapsed lists ---------------- */
  var opened = [];
  window.addEventListener("beforeprint", function () {
    opened = Array.prototype.filter.call(document.querySelectorAll("details"), function (d) { return !d.open; });
    opened.forEach(function (d) { d.open = true; });
  });
  window.addEventListener("afterprint", function () {
    opened.forEach(function (d) { d.open = false; });
    opened = [];
  });

  applyFilter();
})();
