// weft web UI: confirmation prompts, file uploads through /ui/api, and the live job view (SSE).
"use strict";
document.addEventListener("submit", function (e) {
  var form = e.target;
  var msg = form.getAttribute("data-confirm") || (e.submitter && e.submitter.getAttribute("data-confirm"));
  if (msg && !window.confirm(msg)) { e.preventDefault(); }
});

document.querySelectorAll("form[data-upload]").forEach(function (form) {
  form.addEventListener("submit", function (e) {
    e.preventDefault();
    var name = form.querySelector("[name=rname]").value.trim();
    var file = form.querySelector("[type=file]").files[0];
    var out = form.querySelector(".upload-result");
    if (!name || !file) { out.textContent = "choose a name and a file"; return; }
    fetch(form.getAttribute("data-upload") + encodeURIComponent(name), {
      method: "POST", headers: { "X-Weft-UI": "1" }, body: file, credentials: "same-origin"
    }).then(function (r) {
      return r.text().then(function (t) {
        if (r.ok) { window.location.reload(); } else { out.textContent = "upload failed: " + t; }
      });
    });
  });
});

(function live() {
  var el = document.getElementById("cluster");
  if (!el || !window.EventSource) { return; }
  var id = el.getAttribute("data-cluster");
  var src = new EventSource("/ui/clusters/" + encodeURIComponent(id) + "/events");
  var shownJob = (document.getElementById("job") || el).getAttribute("data-job") || "";
  function set(id, text) { var n = document.getElementById(id); if (n) { n.textContent = text; } }
  src.addEventListener("state", function (e) {
    var s = JSON.parse(e.data);
    var st = document.getElementById("cluster-status");
    if (st) { st.textContent = s.status; st.className = "status status-" + s.status; }
    if (s.progress) {
      set("job-action", s.progress.action);
      set("job-status", s.progress.actionstatus);
      set("job-steps", s.progress.stepscompleted + "/" + s.progress.stepstotal);
      var p = document.getElementById("job-progress");
      if (p) { p.max = s.progress.stepstotal || 1; p.value = s.progress.stepscompleted; }
    }
    Object.keys(s.tasks || {}).forEach(function (t) {
      var n = document.querySelector('[data-task="' + t + '"]');
      if (!n) { return; }
      n.className = "task state-" + s.tasks[t];
      var label = n.querySelector(".st");
      if (label) { label.textContent = s.tasks[t].replace("_", " "); }
    });
    var live = document.getElementById("live");
    if (live) {
      if (s.job && s.job !== shownJob) {
        live.innerHTML = "";
        var a = document.createElement("a");
        a.href = window.location.pathname; a.textContent = "A new job started: show it";
        live.appendChild(a);
      } else if (s.progress && (s.progress.actionstatus === "complete" || s.progress.actionstatus === "failed")) {
        live.textContent = "Job " + s.progress.actionstatus + ".";
      } else {
        live.textContent = "";
      }
    }
  });
})();
