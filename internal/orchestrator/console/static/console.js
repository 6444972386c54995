// The console's own script: the live log of a deployment page. It is a file (the
// Content-Security-Policy runs no inline script) and uses no eval.
//
// The log comes over server-sent events: each "log" event carries the next piece of the log as
// HTML (escaped and coloured by the server) and, as its id, the byte offset after it. When the
// connection drops, EventSource reconnects by itself and sends that id as Last-Event-ID, so the
// server resumes exactly where the page stopped; "end" says the whole log arrived.
(function () {
  "use strict";

  function followLog(pre) {
    var follow = document.getElementById("follow");
    var source = new EventSource(pre.dataset.stream);
    source.addEventListener("log", function (e) {
      pre.insertAdjacentHTML("beforeend", e.data);
      pre.dataset.offset = e.lastEventId;
      if (!follow || follow.checked) {
        pre.scrollTop = pre.scrollHeight;
      }
    });
    source.addEventListener("end", function (e) {
      source.close();
      pre.dataset.offset = e.lastEventId;
      pre.dataset.complete = "true";
    });
    if (follow) {
      follow.addEventListener("change", function () {
        if (follow.checked) {
          pre.scrollTop = pre.scrollHeight;
        }
      });
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    var pre = document.getElementById("log");
    if (pre && pre.dataset.stream) {
      followLog(pre);
    }
  });
})();
