"""The HTML page's fixed parts: its stylesheet and its script, written for this page.

The page works with no network at all: no fonts, stylesheets or scripts
from elsewhere, only what is inlined here. The script adds interaction to
HTML that ``html.py`` has already drawn (so the steps still show, and print,
without it); it reads the embedded trace only to show a tensor's full record,
and it builds everything it shows with ``textContent``, never by parsing
markup, so nothing a scenario wrote can run.

The DOM contract (``docs/html.md``): ``document.body.dataset.step`` is the
current step's index (``dataset.scenario`` its scenario, from 1), every tensor
cell has ``data-tensor`` and ``data-storage``, and a highlighted element has
the class ``tt-highlight``.
"""

from __future__ import annotations

import json
import re

# Written as JSON escapes inside the data block: the characters that could end
# or comment the block (``<``, ``>``, ``&``), U+2028/2029, and every control
# character the other formats spell out (C1, bidirectional, lone surrogates),
# so the page's source holds none of them raw. JSON has already escaped C0.
_UNSAFE_IN_SCRIPT = re.compile(
    "[<>&\u2028\u2029\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)

CSS = """
:root{color-scheme:light dark;--bg:#fff;--fg:#1d1f21;--muted:#5f6368;--line:#d0d4d9;--card:#f6f8fa;
--accent:#0b63c5;--changed:#fff1b8;--new:#e3f4e1;--hl:#ffd166;--bad:#b3261e;--badbg:#fdecea;
--ok:#1e7b34;
--warnbg:#fff6d6;--node:#eef1f4;--leaf:#d7ecff;--root:#ffe8c2}
@media (prefers-color-scheme:dark){:root{--bg:#16181b;--fg:#e4e6e8;--muted:#9aa0a6;--line:#3a3f45;
--card:#1f2226;--accent:#7cb7ff;--changed:#4a3f12;--new:#173a1c;--hl:#8a6a00;--bad:#ff8a80;
--badbg:#3b1a18;
--ok:#7fd48a;--warnbg:#3a3212;--node:#262a2f;--leaf:#17324d;--root:#4a3514}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);
font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif}
code,pre,.tt-table,.tt-graph text{
font-family:ui-monospace,"SFMono-Regular",Menlo,Consolas,monospace}
header.tt-top{padding:.8rem 1rem;border-bottom:1px solid var(--line)}
header.tt-top h1{font-size:1.25rem;margin:0 0 .2rem}
.tt-meta{color:var(--muted);font-size:.85rem;margin:0}
.tt-layout{display:grid;grid-template-columns:minmax(12rem,18rem) 1fr;gap:1rem;padding:1rem}
nav.tt-steps{position:sticky;top:.5rem;align-self:start;max-height:calc(100vh - 1rem);overflow:auto}
nav.tt-steps h2{font-size:.95rem;margin:.6rem 0 .3rem}
nav.tt-steps ol{list-style:none;margin:0;padding:0}
nav.tt-steps a{display:block;padding:.25rem .45rem;border-radius:4px;color:inherit;
text-decoration:none;
white-space:nowrap;overflow:hidden;text-overflow:ellipsis;font-size:.88rem}
nav.tt-steps a:hover{background:var(--card)}
nav.tt-steps a[aria-current=step]{background:var(--accent);color:var(--bg)}
nav.tt-steps a.tt-bad::after{content:" ✗";color:var(--bad)}
.tt-buttons{display:none;gap:.5rem;align-items:center;margin-bottom:.6rem}
.tt-js .tt-buttons{display:flex;position:sticky;top:0;z-index:5;background:var(--bg);
padding:.4rem 0;
border-bottom:1px solid var(--line)}
.tt-buttons button{white-space:nowrap;font:inherit;padding:.3rem .8rem;border:1px solid var(--line);
border-radius:5px;
background:var(--card);color:inherit;cursor:pointer}
.tt-buttons button:disabled{opacity:.45;cursor:default}
#tt-position{color:var(--muted);font-size:.9rem;white-space:nowrap}
.tt-js section.tt-step{display:none}
.tt-js section.tt-step.tt-current{display:block}
.tt-js .tt-scenario-head{display:none}
.tt-js .tt-scenario-head.tt-current{display:block}
section.tt-step{border-top:1px solid var(--line);padding-top:.4rem;margin-bottom:1.2rem;
scroll-margin-top:3.5rem}
.tt-step h3{font-size:1.05rem;margin:.3rem 0}
.tt-scenario-head h2{font-size:1.15rem;margin:.2rem 0}
.tt-desc{white-space:pre-wrap;color:var(--muted);margin:.2rem 0 .6rem}
.tt-variants{display:grid;gap:1rem;
grid-template-columns:repeat(auto-fit,minmax(min(100%,40rem),1fr))}
.tt-variant{min-width:0}
.tt-variant .tt-table td{white-space:normal}
.tt-variant h4{margin:.4rem 0;font-size:.95rem;color:var(--accent)}
pre{background:var(--card);border:1px solid var(--line);border-radius:6px;padding:.5rem .7rem;
overflow:auto;
margin:.4rem 0;white-space:pre-wrap;word-break:break-word}
.tt-note{margin:.4rem 0;font-style:italic}
.tt-table-wrap{overflow-x:auto;margin:.4rem 0}
table{border-collapse:collapse;font-size:.84rem}
th,td{border:1px solid var(--line);padding:.2rem .45rem;text-align:left;vertical-align:top}
.tt-table td{white-space:nowrap}
th{background:var(--card);font-weight:600}
td.tt-changed{background:var(--changed)}
td.tt-changed::after{content:" •";color:var(--accent)}
tr.tt-new td.tt-name{background:var(--new)}
td[data-storage]{cursor:pointer}
td.tt-cell-name,td.tt-cell-storage{text-decoration:underline dotted}
.tt-highlight{outline:2px solid var(--accent);outline-offset:-2px;background:var(--hl)!important}
.tt-storage-label{cursor:pointer;border-bottom:1px dotted}
.tt-box{border-left:4px solid var(--line);padding:.3rem .6rem;margin:.45rem 0;
background:var(--card);border-radius:4px}
.tt-error{border-color:var(--bad);background:var(--badbg)}
.tt-warn{border-color:#c99400;background:var(--warnbg)}
.tt-fail{color:var(--bad)}
.tt-pass{color:var(--ok)}
ul.tt-list{margin:.2rem 0;padding-left:1.2rem}
.tt-status{font-size:.85rem;color:var(--muted)}
.tt-graph-wrap{overflow-x:auto}
svg.tt-graph{max-width:none;display:block}
.tt-graph text{font-size:12px;fill:var(--fg)}
.tt-graph rect{fill:var(--node);stroke:var(--line)}
.tt-g-tensor rect{fill:var(--root)}
.tt-g-leaf rect{fill:var(--leaf)}
.tt-g-chain rect{stroke-dasharray:4 2}
.tt-g-more rect,.tt-g-hidden rect,.tt-g-missing rect{fill:none;stroke-dasharray:2 3}
.tt-g-stale rect{stroke:var(--bad);stroke-width:2}
.tt-g-edge{fill:none;stroke:var(--muted);stroke-width:1.2}
.tt-g-again{stroke-dasharray:5 3}
.tt-g-head{fill:var(--muted)}
.tt-graph-caption{font-size:.8rem;color:var(--muted);margin:.1rem 0 .6rem}
#tt-tip{position:fixed;z-index:10;max-width:min(32rem,92vw);background:var(--bg);color:var(--fg);
border:1px solid var(--line);border-radius:6px;box-shadow:0 4px 16px rgba(0,0,0,.25);
padding:.45rem .6rem;
font-size:.8rem;pointer-events:none}
#tt-tip dl{display:grid;grid-template-columns:auto 1fr;gap:.1rem .7rem;margin:0}
#tt-tip dt{color:var(--muted)}
#tt-tip dd{margin:0;font-family:ui-monospace,Menlo,Consolas,monospace;word-break:break-all}
#tt-tip[hidden]{display:none}
@media (max-width:720px){.tt-layout{grid-template-columns:1fr;padding:.6rem}
nav.tt-steps{position:static;max-height:12rem}.tt-buttons .tt-status{display:none}}
@media print{nav.tt-steps,.tt-buttons,#tt-tip{display:none!important}
.tt-layout{display:block}
.tt-js section.tt-step,.tt-js .tt-scenario-head{display:block!important}
section.tt-step{break-inside:avoid-page}
body{background:#fff;color:#000}}
"""

# The script: navigation (buttons, arrow keys, the URL's #hash), highlighting
# by storage, and the hover card of a tensor's record read from the embedded JSON.
JS = r"""
(function () {
  "use strict";
  var doc = document, body = doc.body;
  doc.documentElement.className += " tt-js";
  var steps = [].slice.call(doc.querySelectorAll("section.tt-step"));
  var heads = [].slice.call(doc.querySelectorAll(".tt-scenario-head"));
  var links = [].slice.call(doc.querySelectorAll("nav.tt-steps a"));
  var prev = doc.getElementById("tt-prev"), next = doc.getElementById("tt-next");
  var position = doc.getElementById("tt-position"), tip = doc.getElementById("tt-tip");
  var traces = [];
  try {
    var data = JSON.parse(doc.getElementById("tt-data").textContent);
    traces = data.traces || [data];
  } catch (e) { traces = []; }
  var current = -1, active = null;

  function indexOf(id) {
    for (var i = 0; i < steps.length; i++) if (steps[i].id === id) return i;
    return -1;
  }
  function show(i, record) {
    if (!steps.length) return;
    i = Math.max(0, Math.min(steps.length - 1, i));
    var step = steps[i];
    if (current >= 0) steps[current].classList.remove("tt-current");
    step.classList.add("tt-current");
    current = i;
    body.dataset.step = step.dataset.step;
    body.dataset.scenario = step.dataset.scenario;
    heads.forEach(function (h) {
      h.classList.toggle("tt-current", h.dataset.scenario === step.dataset.scenario);
    });
    links.forEach(function (a) {
      if (a.getAttribute("href") === "#" + step.id) a.setAttribute("aria-current", "step");
      else a.removeAttribute("aria-current");
    });
    prev.disabled = i === 0;
    next.disabled = i === steps.length - 1;
    position.textContent = (i + 1) + " of " + steps.length;
    if (record && location.hash !== "#" + step.id) history.pushState(null, "", "#" + step.id);
    if (record && step.getBoundingClientRect().top < 0) step.scrollIntoView();
  }
  function fromHash() {
    var id = location.hash.slice(1);
    try { id = decodeURIComponent(id); } catch (e) { return -1; }
    return indexOf(id);
  }

  function highlight(cell) {
    var trace = cell.dataset.trace, storage = cell.dataset.storage, name = cell.dataset.tensor;
    var key = storage ? trace + "/" + storage : trace + "#" + name;
    [].slice.call(doc.querySelectorAll(".tt-highlight")).forEach(function (el) {
      el.classList.remove("tt-highlight");
    });
    if (active === key) { active = null; return; }
    active = key;
    [].slice.call(doc.querySelectorAll("[data-storage]")).forEach(function (el) {
      if (el.dataset.trace !== trace) return;
      if (storage ? el.dataset.storage === storage : el.dataset.tensor === name) {
        el.classList.add("tt-highlight");
      }
    });
  }

  function record(cell) {
    var trace = traces[+cell.dataset.trace], section = cell.closest("section.tt-step");
    if (!trace || !section) return null;
    var all = (trace.setup ? [trace.setup] : []).concat(trace.steps || []);
    for (var i = 0; i < all.length; i++) {
      if (String(all[i].index) !== section.dataset.step) continue;
      var t = (all[i].tensors || [])[+cell.dataset.i] || null;
      return Array.isArray(t) ? referred(all, t) : t;
    }
    return null;
  }
  // [name, index]: the record of tensor name in the step with that index (format version 4)
  function referred(all, ref) {
    for (var k = 0; k < all.length; k++) {
      if (all[k].index !== ref[1]) continue;
      var ts = all[k].tensors || [];
      for (var j = 0; j < ts.length; j++) {
        if (ts[j] && !Array.isArray(ts[j]) && ts[j].name === ref[0]) return ts[j];
      }
    }
    return null;
  }
  function values(v) {
    if (!v) return "None";
    if (v.kind === "exact") return JSON.stringify(v.data);
    if (v.kind === "summary" && v.summary) {
      var s = v.summary;
      return s.numel + " elements, min " + s.min + ", max " + s.max + ", mean " + s.mean +
        ", std " + s.std + ", first " + JSON.stringify(s.head);
    }
    return v.reason || v.kind;
  }
  function py(value) {
    return value === null || value === undefined ? "None" : value === true ? "True" :
      value === false ? "False" : String(value);
  }
  function tuple(list) {
    return "(" + (list || []).join(", ") + ((list || []).length === 1 ? ",)" : ")");
  }
  function showTip(cell, x, y) {
    var t = record(cell);
    if (!t) return;
    var rows = [
      ["tensor", t.name + (t.kind && t.kind !== "tensor" ? " (" + t.kind + ")" : "")],
      ["shape", tuple(t.shape)], ["stride", tuple(t.stride)], ["offset", String(t.storage_offset)],
      ["dtype", t.dtype], ["device", t.device],
      ["storage", (t.storage || "none") +
        (t.storage_nbytes != null ? ", " + t.storage_nbytes + " bytes" : "")],
      ["version", py(t.version)], ["requires_grad", py(t.requires_grad)],
      ["is_leaf", py(t.is_leaf)], ["grad_fn", py(t.grad_fn)],
      ["values", values(t.values)]
    ];
    if (t.grad) rows.push(["grad", values(t.grad)]);
    if (t.is_view) rows.push(["view of", t.base || "an unnamed tensor"]);
    if (t.same_as) rows.push(["same object as", t.same_as]);
    (t.unavailable || []).forEach(function (u) { rows.push([u[0] + " refused", u[1]]); });
    var dl = doc.createElement("dl");
    rows.forEach(function (r) {
      var dt = doc.createElement("dt"), dd = doc.createElement("dd");
      dt.textContent = r[0];
      dd.textContent = r[1];
      dl.appendChild(dt);
      dl.appendChild(dd);
    });
    tip.textContent = "";
    tip.appendChild(dl);
    tip.hidden = false;
    var w = tip.offsetWidth, h = tip.offsetHeight, box = cell.getBoundingClientRect();
    tip.style.left = Math.max(4, Math.min(x + 12, innerWidth - w - 4)) + "px";
    var tipTop = box.bottom + 6 + h > innerHeight ? Math.max(4, box.top - h - 6) : box.bottom + 6;
    tip.style.top = tipTop + "px";
  }

  prev.addEventListener("click", function () { show(current - 1, true); });
  next.addEventListener("click", function () { show(current + 1, true); });
  doc.addEventListener("keydown", function (e) {
    if (e.altKey || e.ctrlKey || e.metaKey) return;
    if (/^(INPUT|TEXTAREA|SELECT)$/.test(e.target.tagName)) return;
    var moves = {ArrowRight: current + 1, ArrowLeft: current - 1, Home: 0, End: steps.length - 1};
    var to = moves[e.key];
    if (to === undefined) return;
    e.preventDefault();
    show(to, true);
  });
  window.addEventListener("hashchange", function () {
    var i = fromHash();
    if (i >= 0) show(i, false);
  });
  links.forEach(function (a) {
    a.addEventListener("click", function (e) {
      var i = indexOf(a.getAttribute("href").slice(1));
      if (i < 0) return;
      e.preventDefault();
      show(i, true);
    });
  });
  doc.addEventListener("click", function (e) {
    var cell = e.target.closest && e.target.closest("[data-storage]");
    if (cell) highlight(cell);
  });
  doc.addEventListener("keydown", function (e) {
    var storage = e.target.dataset && e.target.dataset.storage;
    if ((e.key === "Enter" || e.key === " ") && storage !== undefined) {
      e.preventDefault();
      highlight(e.target);
    }
  });
  doc.addEventListener("mouseover", function (e) {
    var cell = e.target.closest && e.target.closest("td[data-tensor]");
    if (cell) showTip(cell, e.clientX, e.clientY); else tip.hidden = true;
  });
  doc.addEventListener("focusin", function (e) {
    if (e.target.matches && e.target.matches("td[data-tensor]")) {
      var r = e.target.getBoundingClientRect();
      showTip(e.target, r.left, r.bottom - 10);
    }
  });
  doc.addEventListener("focusout", function () { tip.hidden = true; });
  var first = fromHash();
  show(first >= 0 ? first : 0, false);
})();
"""


def script_json(data: object) -> str:
    """JSON that is safe inside ``<script type="application/json">``.

    ``<``, ``>`` and ``&`` are written as JSON escapes, so neither
    ``</script>`` nor ``<!--`` can end or change the block, and U+2028/2029
    (line ends to some JavaScript parsers) are escaped as well; ``JSON.parse``
    reads all of them back as the same characters. So are C1 and bidirectional
    controls and lone surrogates, which the page's source then never holds raw.
    """
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return _UNSAFE_IN_SCRIPT.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


__all__ = ["CSS", "JS", "script_json"]
