// pglock console: refreshes the page's tables in place every data-refresh-ms, pausable. The
// pages work without it; it only saves a reload.
(function () {
  "use strict";
  var every = parseInt(document.body.dataset.refreshMs || "0", 10);
  var toggle = document.getElementById("refresh-toggle");
  if (!every || !toggle || !window.fetch || !window.DOMParser) {
    return;
  }
  var paused = false;
  var editing = false; // a form field was changed: a refresh would lose it
  document.addEventListener("input", function () { editing = true; });
  toggle.hidden = false;
  toggle.addEventListener("click", function () {
    paused = !paused;
    toggle.textContent = paused ? "Resume refresh" : "Pause refresh";
  });
  function refresh() {
    if (paused || editing || document.hidden) {
      return;
    }
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("refresh: " + response.status);
        }
        return response.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
        var live = document.getElementById("live");
        var focused = document.activeElement;
        if (fresh && live && !editing && !(focused && live.contains(focused) && focused.form)) {
          live.replaceWith(fresh); // not while someone is filling in a form
        }
      })
      .catch(function () { /* the next refresh tries again */ });
  }
  window.setInterval(refresh, every);
})();
