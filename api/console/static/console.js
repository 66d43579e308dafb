// The campaign page's live progress: polls its JSON endpoint every second and updates the bar
// and the counts in place (no reload, no library). Stops once the campaign can move no more.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live) { return; }
  var finished = ["done", "cancelled", "aborted"];
  function set(id, value) {
    var el = document.getElementById(id);
    if (el) { el.textContent = value; }
  }
  function tick() {
    fetch(live.dataset.url, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (p) {
        if (!p) { return; }
        document.getElementById("bar").value = p.percent;
        set("percent", p.percent);
        set("status", p.status);
        set("status-reason", p.status_reason || "");
        set("rate", p.rate_per_s);
        set("eta", p.eta_s === null ? "—" : p.eta_s);
        Object.keys(p.counts).forEach(function (k) { set("count-" + k, p.counts[k]); });
        if (finished.indexOf(p.status) < 0 || p.percent < 100) { setTimeout(tick, 1000); }
      })
      .catch(function () { setTimeout(tick, 3000); });
  }
  setTimeout(tick, 1000);
})();
