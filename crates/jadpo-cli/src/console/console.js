// Jadpo's console: refreshes the numbers of a page without a reload. The
// page works without it: every number is in the HTML the server sends.
// Every few seconds (the main element's data-live, 0 for never) it fetches
// the same page and swaps its <main> in, unless a form field has focus
// (so nothing being typed is lost) or the page is hidden.
(function () {
  "use strict";
  var main = document.getElementById("main");
  if (!main) { return; }
  var every = parseInt(main.getAttribute("data-live") || "0", 10);
  if (!every) { return; }
  function busy() {
    var a = document.activeElement;
    return a && /^(INPUT|SELECT|TEXTAREA|BUTTON)$/.test(a.tagName);
  }
  function refresh() {
    if (document.hidden || busy()) { return; }
    fetch(location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (!text || busy()) { return; }
        var next = new DOMParser().parseFromString(text, "text/html").getElementById("main");
        if (next) { main.innerHTML = next.innerHTML; }
      })
      .catch(function () { /* the next refresh tries again */ });
  }
  setInterval(refresh, every * 1000);
})();
