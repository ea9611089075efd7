// Live status: poll the JSON API (with the session cookie) while anything is queued/running.
(function () {
  "use strict";
  var PENDING = { queued: true, running: true };
  var LABELS = { awarded: "Awarded", not_awarded: "Not awarded", blocked: "Blocked" };
  var INTERVAL_MS = 2000;

  function getJSON(url) {
    return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.json(); });
  }

  function setStatus(el, status) {
    el.textContent = status;
    el.className = "status status-" + status;
  }

  function pollList(table) {
    var url = table.getAttribute("data-poll-list");
    function tick() {
      getJSON(url).then(function (data) {
        var pending = false;
        data.submissions.forEach(function (sub) {
          var row = table.querySelector('tr[data-id="' + sub.id + '"]');
          if (!row) { return; }
          setStatus(row.querySelector('[data-field="status"]'), sub.status);
          var result = row.querySelector('[data-field="result"]');
          result.textContent = "";
          var span = document.createElement("span");
          if (sub.decision) {
            span.className = "decision decision-" + sub.decision;
            span.textContent = LABELS[sub.decision] || sub.decision;
            result.appendChild(span);
          } else if (sub.reason) {
            span.className = "reason";
            span.textContent = sub.reason;
            result.appendChild(span);
          }
          if (PENDING[sub.status]) { pending = true; }
        });
        if (pending) { setTimeout(tick, INTERVAL_MS); }
      }).catch(function () { setTimeout(tick, INTERVAL_MS * 3); });
    }
    var anyPending = Array.prototype.some.call(
      table.querySelectorAll('[data-field="status"]'),
      function (el) { return PENDING[el.textContent.trim()]; });
    if (anyPending) { setTimeout(tick, INTERVAL_MS); }
  }

  function pollOne(section) {
    var url = section.getAttribute("data-poll-one");
    var badge = document.getElementById("status");
    function tick() {
      getJSON(url).then(function (sub) {
        if (PENDING[sub.status]) {
          setStatus(badge, sub.status);
          setTimeout(tick, INTERVAL_MS);
        } else {
          window.location.reload();  // the feedback is rendered by the server
        }
      }).catch(function () { setTimeout(tick, INTERVAL_MS * 3); });
    }
    if (PENDING[section.getAttribute("data-status")]) { setTimeout(tick, INTERVAL_MS); }
  }

  document.addEventListener("DOMContentLoaded", function () {
    var list = document.querySelector("[data-poll-list]");
    if (list) { pollList(list); }
    var one = document.querySelector("[data-poll-one]");
    if (one) { pollOne(one); }
  });
})();
