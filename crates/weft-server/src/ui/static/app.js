// weft web UI: confirmation prompts, file uploads through /ui/api, list filters, and the live
// cluster view (SSE).
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

// A select with data-reload (the create form's template) reloads its form for the new choice.
document.querySelectorAll("select[data-reload]").forEach(function (sel) {
  sel.addEventListener("change", function () {
    var name = document.getElementById("name");
    window.location = sel.getAttribute("data-reload") + "?template=" + encodeURIComponent(sel.value) +
      (name && name.value ? "&name=" + encodeURIComponent(name.value) : "");
  });
});

// Filter selects (data-autosubmit) apply at once.
document.querySelectorAll("select[data-autosubmit]").forEach(function (sel) {
  sel.addEventListener("change", function () { sel.form.submit(); });
});

// Editors: a select with data-shows reveals the field group of its choice; inputs with data-copy
// mirror into a form field; a form with data-preview posts itself (debounced) on every change and
// shows the answer (the live solve preview).
document.querySelectorAll("select[data-shows]").forEach(function (sel) {
  sel.addEventListener("change", function () {
    document.querySelectorAll('[data-group="' + sel.getAttribute("data-shows") + '"]').forEach(function (g) {
      g.hidden = g.getAttribute("data-for") !== sel.value;
    });
  });
});
document.querySelectorAll("[data-copy]").forEach(function (el) {
  function copy() {
    var to = document.getElementById(el.getAttribute("data-copy"));
    if (to) { to.value = el.value; to.dispatchEvent(new Event("change", { bubbles: true })); }
  }
  el.addEventListener("input", copy);
  el.addEventListener("change", copy);
});
document.querySelectorAll("form[data-preview]").forEach(function (form) {
  var out = document.getElementById(form.getAttribute("data-preview-target"));
  var timer = null, seq = 0;
  function update() {
    var n = ++seq;
    fetch(form.getAttribute("data-preview"), {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams(new FormData(form)).toString()
    }).then(function (r) { return r.text(); }).then(function (html) {
      if (n === seq && out) { out.innerHTML = html; out.setAttribute("data-updates", String(n)); }
    });
  }
  function later() { clearTimeout(timer); timer = setTimeout(update, 250); }
  form.addEventListener("input", later);
  form.addEventListener("change", later);
});

// Search boxes over a table (data-filter = the table's id) hide the rows lacking a typed word.
document.querySelectorAll("input[data-filter]").forEach(function (box) {
  var table = document.getElementById(box.getAttribute("data-filter"));
  if (!table) { return; }
  box.addEventListener("input", function () {
    var words = box.value.toLowerCase().split(/\s+/).filter(Boolean);
    table.querySelectorAll("tbody tr").forEach(function (tr) {
      var text = tr.textContent.toLowerCase();
      tr.hidden = !words.every(function (w) { return text.indexOf(w) >= 0; });
    });
  });
});

(function live() {
  var el = document.getElementById("cluster");
  if (!el || !window.EventSource) { return; }
  var id = el.getAttribute("data-cluster");
  var offset = el.getAttribute("data-offset") || "0";
  var src = new EventSource("/ui/clusters/" + encodeURIComponent(id) + "/events?offset=" + encodeURIComponent(offset));
  var jobEl = document.getElementById("job") || el;
  var shownJob = jobEl.getAttribute("data-job") || "";
  var latestJob = jobEl.getAttribute("data-latest") || "";
  function set(id, text) { var n = document.getElementById(id); if (n) { n.textContent = text; } }
  src.addEventListener("state", function (e) {
    var s = JSON.parse(e.data);
    var st = document.getElementById("cluster-status");
    if (st) { st.textContent = s.status; st.className = "status status-" + s.status; }
    if (s.progress && s.job === shownJob) {
      set("job-action", s.progress.action.toLowerCase().split("_").join(" "));
      set("job-status", s.progress.actionstatus);
      set("job-steps", s.progress.stepscompleted + "/" + s.progress.stepstotal);
      var p = document.getElementById("job-progress");
      if (p) { p.max = s.progress.stepstotal || 1; p.value = s.progress.stepscompleted; }
    }
    var jobShown = s.job === shownJob;
    Object.keys(jobShown ? (s.tasks || {}) : {}).forEach(function (t) {
      var n = document.querySelector('[data-task="' + t + '"]');
      if (!n) { return; }
      n.className = "task state-" + s.tasks[t];
      var label = n.querySelector(".st");
      if (label) { label.textContent = s.tasks[t].replace("_", " "); }
    });
    // The grid and the links arrive rendered (and escaped) by the server's templates.
    [["grid-box", s.grid_html, s.grid_rev], ["links-box", s.links_html, s.links_rev]].forEach(function (p) {
      var n = document.getElementById(p[0]);
      if (n && typeof p[1] === "string" && p[2] && n.getAttribute("data-rev") !== p[2]) {
        n.innerHTML = p[1];
        n.setAttribute("data-rev", p[2]);
      }
    });
    if (s.nodes_total !== undefined && s.nodes_total !== null) {
      document.querySelectorAll(".live-nodes-total").forEach(function (n) { n.textContent = String(s.nodes_total); });
    }
    document.querySelectorAll("[data-service-nodes]").forEach(function (n) {
      var count = (s.service_nodes || {})[n.getAttribute("data-service-nodes")];
      if (count !== undefined) { n.textContent = String(count); }
    });
    [["cluster-waiting", s.waiting], ["cluster-waiting-label", s.waiting]].forEach(function (w) {
      var n = document.getElementById(w[0]);
      if (n) {
        if (w[0] === "cluster-waiting") { n.textContent = w[1] || ""; }
        n.hidden = !w[1];
      }
    });
    var msg = document.getElementById("cluster-message");
    if (msg) {
      msg.textContent = s.message || "";
      msg.hidden = !s.message;
      var ml = document.getElementById("cluster-message-label");
      if (ml) { ml.hidden = !s.message; }
    }
    if (s.progress && jobShown) {
      var js = s.progress.actionstatus;
      [["pause", js !== "running"], ["resume", js !== "paused"],
       ["abort", js !== "running" && js !== "paused"]].forEach(function (b) {
        var n = document.getElementById(b[0]);
        if (n) { n.disabled = b[1]; }
      });
    }
    var live = document.getElementById("live");
    if (live) {
      if (s.job && s.job !== latestJob) {
        live.innerHTML = "";
        var a = document.createElement("a");
        a.href = window.location.pathname; a.textContent = "A new job started: show it";
        live.appendChild(a);
      } else if (jobShown && s.progress && (s.progress.actionstatus === "complete" || s.progress.actionstatus === "failed")) {
        live.textContent = "Job " + s.progress.actionstatus + ".";
      } else {
        live.textContent = "";
      }
    }
  });
})();
