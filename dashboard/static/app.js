// jobfence dashboard: the little behaviour the pages need, loaded from a
// file (the Content-Security-Policy allows no inline script).
"use strict";

document.addEventListener("DOMContentLoaded", function () {
  // Forms with data-confirm ask before they post (delete, bulk actions).
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (ev) {
      if (!window.confirm(form.getAttribute("data-confirm"))) {
        ev.preventDefault();
      }
    });
  });

  // "Back" on an error page returns to the page the action came from.
  document.querySelectorAll("a.back").forEach(function (a) {
    a.addEventListener("click", function (ev) {
      if (window.history.length > 1) {
        ev.preventDefault();
        window.history.back();
      }
    });
  });

  // The overview refreshes itself every 5 s while the box is ticked; the
  // choice is remembered in this browser.
  var box = document.getElementById("auto-refresh");
  if (box) {
    var key = "jobfence-auto-refresh";
    box.checked = window.localStorage.getItem(key) === "1";
    var timer = null;
    var arm = function () {
      if (timer) {
        window.clearTimeout(timer);
        timer = null;
      }
      if (box.checked) {
        timer = window.setTimeout(function () { window.location.reload(); }, 5000);
      }
    };
    box.addEventListener("change", function () {
      window.localStorage.setItem(key, box.checked ? "1" : "0");
      arm();
    });
    arm();
  }
});
