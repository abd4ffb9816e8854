/* podres-exporter CPU map: draws every online CPU of the node, grouped by NUMA node and
 * physical core, coloured by pool (docs/design.md#cpu-pools), with the pods table and the anomalies of the
 * ledger (docs/design.md#ownership). Plain DOM, no framework; all text goes through textContent (pod and
 * container names come from the kubelet and are never interpreted as HTML).
 *
 * Data: GET api/v1/cpumap  {"node": str, "cpus": [{"id", "core", "socket", "numa_node",
 *                                                  "pool", "owner"}]}
 *       GET api/v1/ledger  the ledger JSON
 *       GET api/v1/cpuload {"cpus": {"<id>": busy share}} (optional: 404 without /proc/stat)
 * Both relative to the page, so the map also works behind a path prefix (kubectl proxy).
 */
(function () {
  "use strict";

  var REFRESH_MS = 15000;
  var POOLS = [
    ["reserved", "Reserved", "kept for system daemons (reservedSystemCPUs)"],
    ["node_shared", "Node shared", "the node's default pool, shared by every non-exclusive container"],
    ["node_exclusive", "Node exclusive", "pinned to one container by the classic per-container model"],
    ["pod_exclusive", "Pod exclusive", "a container's exclusive slice of its pod's block"],
    ["pod_shared", "Pod shared", "the rest of a pod's block, shared by its non-exclusive containers"],
    ["pod_idle", "Pod idle", "reserved for a pod that has no container to use it"]
  ];
  var POOL_LABEL = {};
  var POOL_HELP = {};
  POOLS.forEach(function (p) { POOL_LABEL[p[0]] = p[1]; POOL_HELP[p[0]] = p[2]; });

  var state = { cpumapText: null, ledgerText: null, updated: null, linked: false };

  function $(id) { return document.getElementById(id); }

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (name) {
        if (attrs[name] !== null && attrs[name] !== undefined) node.setAttribute(name, String(attrs[name]));
      });
    }
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }

  function poolLabel(pool) { return POOL_LABEL[pool] || String(pool || "unknown"); }

  function isNum(v) { return typeof v === "number" && isFinite(v); }

  function byNumberNullLast(a, b) {
    if (a === b) return 0;
    if (!isNum(a)) return 1;
    if (!isNum(b)) return -1;
    return a - b;
  }

  function podOf(owner) {
    if (!owner) return "";
    var parts = String(owner).split("/");
    return parts.length >= 2 ? parts[0] + "/" + parts[1] : String(owner);
  }

  function describe(cpu) {
    var where = ["CPU " + cpu.id];
    if (isNum(cpu.core)) where.push("core " + cpu.core);
    if (isNum(cpu.socket)) where.push("socket " + cpu.socket);
    if (isNum(cpu.numa_node)) where.push("NUMA node " + cpu.numa_node);
    return where.join(" · ") + " — " + poolLabel(cpu.pool) + " — " +
      (cpu.owner ? cpu.owner : "no owner");
  }

  function countPools(cpus) {
    var counts = {};
    cpus.forEach(function (c) { counts[c.pool] = (counts[c.pool] || 0) + 1; });
    return counts;
  }

  function orderedPools(counts) {
    var known = POOLS.map(function (p) { return p[0]; }).filter(function (p) { return counts[p]; });
    var other = Object.keys(counts).filter(function (p) { return !POOL_LABEL[p]; }).sort();
    return known.concat(other);
  }

  /* ------------------------------------------------------------------ CPU map */

  function renderLegend(counts) {
    var legend = $("legend");
    clear(legend);
    orderedPools(counts).forEach(function (pool) {
      var item = el("li", { "class": "legend-item", "data-pool": pool });
      item.appendChild(el("span", { "class": "swatch", "data-pool": pool, "aria-hidden": "true" }));
      item.appendChild(el("span", { "class": "legend-label" }, poolLabel(pool)));
      item.appendChild(el("span", { "class": "legend-count" }, counts[pool]));
      if (POOL_HELP[pool]) item.setAttribute("title", POOL_HELP[pool]);
      legend.appendChild(item);
    });
  }

  function groupCpus(cpus) {
    var numas = {};
    cpus.forEach(function (cpu) {
      var numaKey = isNum(cpu.numa_node) ? String(cpu.numa_node) : "?";
      var numa = numas[numaKey] || (numas[numaKey] = { id: cpu.numa_node, cores: {}, cpus: [] });
      numa.cpus.push(cpu);
      // "core" is the kubelet's CoreID, unique on the node (docs/design.md#topology).
      var coreKey = isNum(cpu.core) ? "core:" + cpu.core : "cpu:" + cpu.id;
      var core = numa.cores[coreKey] ||
        (numa.cores[coreKey] = { core: cpu.core, socket: cpu.socket, cpus: [] });
      core.cpus.push(cpu);
    });
    return Object.keys(numas).map(function (k) { return numas[k]; })
      .sort(function (a, b) { return byNumberNullLast(a.id, b.id); })
      .map(function (numa) {
        numa.coreList = Object.keys(numa.cores).map(function (k) { return numa.cores[k]; });
        numa.coreList.forEach(function (core) {
          core.cpus.sort(function (a, b) { return a.id - b.id; });
        });
        numa.coreList.sort(function (a, b) {
          return byNumberNullLast(a.socket, b.socket) || byNumberNullLast(a.core, b.core) ||
            a.cpus[0].id - b.cpus[0].id;
        });
        return numa;
      });
  }

  function showDetail(cell) {
    $("cpu-detail").textContent = cell ? cell.getAttribute("data-detail") : "No CPU selected.";
    var pod = cell ? cell.getAttribute("data-pod") : "";
    var cells = document.querySelectorAll("#cpumap .cpu");
    for (var i = 0; i < cells.length; i++) {
      var same = pod !== "" && cells[i].getAttribute("data-pod") === pod;
      cells[i].classList.toggle("same-owner", same);
    }
  }

  function renderMap(data) {
    var map = $("cpumap");
    var focusedId = document.activeElement && document.activeElement.classList &&
      document.activeElement.classList.contains("cpu") ?
      document.activeElement.getAttribute("data-cpu") : null;
    clear(map);
    var cpus = Array.isArray(data.cpus) ? data.cpus.slice() : [];
    var counts = countPools(cpus);
    renderLegend(counts);
    if (!cpus.length) {
      map.appendChild(el("p", { "class": "empty" }, "The exporter reported no CPUs."));
      return;
    }
    groupCpus(cpus).forEach(function (numa) {
      var section = el("section", { "class": "numa", "data-numa": isNum(numa.id) ? numa.id : "" });
      var title = isNum(numa.id) ? "NUMA node " + numa.id : "NUMA node unknown";
      var sockets = {};
      numa.cpus.forEach(function (c) { if (isNum(c.socket)) sockets[c.socket] = true; });
      var socketIds = Object.keys(sockets);
      if (socketIds.length) title += " · socket " + socketIds.join(", ");
      var heading = el("h3", null, title);
      var numaCounts = countPools(numa.cpus);
      heading.appendChild(el("span", { "class": "numa-counts" },
        " " + numa.cpus.length + " CPUs: " + orderedPools(numaCounts).map(function (p) {
          return numaCounts[p] + " " + poolLabel(p).toLowerCase();
        }).join(", ")));
      section.appendChild(heading);
      var cores = el("ul", { "class": "cores", "aria-label": title + ", physical cores" });
      numa.coreList.forEach(function (core) {
        var coreLabel = isNum(core.core) ? "Core " + core.core : "CPU " + core.cpus[0].id;
        var coreItem = el("li", { "class": "core", "title": coreLabel });
        coreItem.appendChild(el("span", { "class": "core-label", "aria-hidden": "true" },
          isNum(core.core) ? "c" + core.core : ""));
        var list = el("ul", { "class": "threads", "aria-label": coreLabel });
        core.cpus.forEach(function (cpu) {
          var detail = describe(cpu);
          var cell = el("li", {
            "class": "cpu",
            "data-pool": cpu.pool,
            "data-cpu": cpu.id,
            "data-pod": podOf(cpu.owner),
            "data-detail": detail,
            "tabindex": "0",
            "title": detail,
            "aria-label": "CPU " + cpu.id + ", " + poolLabel(cpu.pool) +
              (cpu.owner ? ", owner " + cpu.owner : ", no owner")
          }, cpu.id);
          list.appendChild(cell);
        });
        coreItem.appendChild(list);
        cores.appendChild(coreItem);
      });
      section.appendChild(cores);
      map.appendChild(section);
    });
    if (focusedId === null && !state.linked) {
      // A link to one CPU (…/#cpu-12) selects it on the first draw.
      state.linked = true;
      var match = /^#cpu-([0-9]+)$/.exec(window.location.hash || "");
      if (match) focusedId = match[1];
    }
    if (focusedId !== null) {
      var again = map.querySelector('.cpu[data-cpu="' + focusedId.replace(/[^0-9]/g, "") + '"]');
      if (again) { again.focus(); showDetail(again); }
    }
  }

  function onMapEvent(event) {
    var cell = event.target && event.target.closest ? event.target.closest(".cpu") : null;
    if (cell) showDetail(cell);
  }

  function onMapKey(event) {
    var cell = event.target && event.target.closest ? event.target.closest(".cpu") : null;
    if (!cell) return;
    var step = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 }[event.key];
    if (event.key === "Home" || event.key === "End" || step) {
      var cells = Array.prototype.slice.call(document.querySelectorAll("#cpumap .cpu"));
      var index = cells.indexOf(cell);
      var next = event.key === "Home" ? 0 : event.key === "End" ? cells.length - 1 :
        Math.max(0, Math.min(cells.length - 1, index + step));
      cells[next].focus();
      event.preventDefault();
    }
  }

  /* ------------------------------------------------------------------ ledger */

  function cell(row, text, cls) {
    var td = el("td", cls ? { "class": cls } : null, text === null || text === undefined ? "—" : text);
    row.appendChild(td);
    return td;
  }

  /* Linux list format ("0-3,8") to ids and back, for the CPUs a pod holds without a block. */
  function parseCpuset(text) {
    var ids = [];
    String(text || "").split(",").forEach(function (part) {
      var m = /^\s*(\d+)(?:-(\d+))?\s*$/.exec(part);
      if (!m) return;
      var lo = Number(m[1]), hi = m[2] === undefined ? lo : Number(m[2]);
      for (var i = lo; i <= hi && i - lo < 4096; i++) ids.push(i);
    });
    return ids;
  }

  function formatCpuset(ids) {
    var sorted = ids.slice().sort(function (a, b) { return a - b; });
    var out = [], start = null, prev = null;
    sorted.forEach(function (id) {
      if (id === prev) return;
      if (start === null) { start = prev = id; return; }
      if (id === prev + 1) { prev = id; return; }
      out.push(start === prev ? String(start) : start + "-" + prev);
      start = prev = id;
    });
    if (start !== null) out.push(start === prev ? String(start) : start + "-" + prev);
    return out.join(",");
  }

  /* The CPUs a pod holds: its block when it has one, else the node-exclusive sets of its
     containers (a pod without a pod-level budget reports no block). */
  function podCpus(pod, containers) {
    if (pod.cpus) return pod.cpus;
    var ids = [];
    containers.forEach(function (c) {
      if (c.namespace === pod.namespace && c.pod === pod.name && c.assignment === "node_exclusive") {
        ids = ids.concat(parseCpuset(c.cpus));
      }
    });
    return formatCpuset(ids);
  }

  function renderPods(ledger) {
    var body = $("pods").querySelector("tbody");
    clear(body);
    var containers = Array.isArray(ledger.containers) ? ledger.containers : [];
    var all = Array.isArray(ledger.pods) ? ledger.pods : [];
    var pods = [];
    all.forEach(function (pod) {
      var cpus = podCpus(pod, containers);
      if (cpus) pods.push({ pod: pod, cpus: cpus });
    });
    if (!pods.length) {
      var row = el("tr");
      var td = el("td", { "colspan": "10", "class": "empty" }, "No pod holds CPUs on this node.");
      row.appendChild(td);
      body.appendChild(row);
    }
    pods.forEach(function (held) {
      var pod = held.pod;
      var row = el("tr", { "data-pod": pod.namespace + "/" + pod.name, "data-cpus": held.cpus });
      var th = el("th", { "scope": "row" }, pod.namespace + "/" + pod.name);
      row.appendChild(th);
      cell(row, held.cpus, "cpuset");
      cell(row, pod.budget_cpus, "num");
      cell(row, pod.pod_exclusive_cpus, "num");
      cell(row, pod.pod_shared_cpus, "num");
      cell(row, pod.pod_idle_cpus, "num");
      cell(row, pod.node_exclusive_cpus, "num");
      cell(row, pod.reclaimed_cpus, "num");
      cell(row, pod.reclaimable_cpus, "num");
      cell(row, pod.estimate_basis);
      body.appendChild(row);
    });
    var others = all.length - pods.length;
    if (others > 0) {
      var note = el("tr", { "class": "others" });
      note.appendChild(el("td", { "colspan": "10", "class": "empty" },
        others + (others === 1 ? " other pod runs" : " other pods run") +
        " on the node shared pool only."));
      body.appendChild(note);
    }

    var cbody = $("containers").querySelector("tbody");
    clear(cbody);
    (Array.isArray(ledger.containers) ? ledger.containers : []).forEach(function (c) {
      var row = el("tr");
      row.appendChild(el("th", { "scope": "row" }, c.namespace + "/" + c.pod + "/" + c.name));
      cell(row, c.sidecar ? "yes" : "no");
      var a = cell(row, poolLabel(c.assignment));
      a.setAttribute("data-pool", c.assignment);
      cell(row, poolLabel(c.memory_assignment));
      cell(row, c.cpus || "—", "cpuset");
      cell(row, c.cpu_count, "num");
      cbody.appendChild(row);
    });
  }

  function renderAnomalies(ledger) {
    var list = $("anomalies");
    clear(list);
    var anomalies = Array.isArray(ledger.anomalies) ? ledger.anomalies : [];
    if (!anomalies.length) {
      list.appendChild(el("li", { "class": "none" }, "No anomalies: every CPU is counted once."));
      return;
    }
    anomalies.forEach(function (a) {
      var item = el("li", { "class": "anomaly", "data-kind": a.kind });
      item.appendChild(el("strong", { "class": "kind" }, a.kind));
      var who = [a.namespace, a.pod, a.container].filter(function (x) { return x; }).join("/");
      if (who) item.appendChild(el("span", { "class": "who" }, " " + who));
      if (a.detail) item.appendChild(el("span", { "class": "detail" }, " — " + a.detail));
      list.appendChild(item);
    });
  }

  function renderTotals(ledger) {
    var node = ledger.node || {};
    var parts = [];
    if (isNum(node.online_cpus)) parts.push(node.online_cpus + " online CPUs");
    if (isNum(node.numa_nodes)) parts.push(node.numa_nodes + " NUMA node" + (node.numa_nodes === 1 ? "" : "s"));
    if (isNum(ledger.reclaimed_cpus)) parts.push(ledger.reclaimed_cpus + " reclaimed by pod-level managers");
    if (isNum(ledger.reclaimable_cpus)) parts.push(ledger.reclaimable_cpus + " reclaimable");
    var anomalies = Array.isArray(ledger.anomalies) ? ledger.anomalies.length : 0;
    parts.push(anomalies + " anomal" + (anomalies === 1 ? "y" : "ies"));
    $("totals").textContent = parts.join(" · ");
  }

  /* ------------------------------------------------------------------ refresh */

  function fetchText(url) {
    return fetch(url, { cache: "no-store", headers: { "Accept": "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status + " from " + url);
        return response.text();
      });
  }

  function settle(promise) {
    return promise.then(function (value) { return { ok: true, value: value }; },
      function (error) { return { ok: false, error: error }; });
  }

  function setNodeName(name) {
    if (name) {
      $("node-name").textContent = name;
      document.title = "podres-exporter — CPU map of " + name;
    }
  }

  /* Each CPU's busy share of the last poll (api/v1/cpuload, from /proc/stat): a bar from
     the bottom of the cell in tenths, and the percentage in its title. Absent (404 when the
     source is off, or before two polls): no bar. */
  function applyLoad(text) {
    var shares = {};
    try { shares = (JSON.parse(text) || {}).cpus || {}; } catch (e) { shares = {}; }
    Array.prototype.forEach.call(document.querySelectorAll("#cpumap .cpu"), function (cell) {
      var share = shares[cell.getAttribute("data-cpu")];
      if (!cell.hasAttribute("data-title")) cell.setAttribute("data-title", cell.title);
      if (!isNum(share)) {
        cell.removeAttribute("data-busy");
        cell.title = cell.getAttribute("data-title");
        return;
      }
      var percent = Math.round(Math.min(1, Math.max(0, share)) * 100);
      cell.setAttribute("data-busy", String(Math.round(percent / 10)));
      cell.title = cell.getAttribute("data-title") + " · busy " + percent + "%";
    });
  }

  function refreshLoad() {
    return settle(fetchText("api/v1/cpuload")).then(function (result) {
      applyLoad(result.ok ? result.value : "{}");
    });
  }

  function refresh() {
    return Promise.all([settle(fetchText("api/v1/cpumap")), settle(fetchText("api/v1/ledger"))])
      .then(function (results) {
        var errors = [];
        results.forEach(function (result, index) {
          if (!result.ok) { errors.push(result.error.message || String(result.error)); return; }
          try {
            var data = JSON.parse(result.value);
            if (index === 0 && result.value !== state.cpumapText) {
              state.cpumapText = result.value;
              setNodeName(data.node);
              renderMap(data);
            } else if (index === 1 && result.value !== state.ledgerText) {
              state.ledgerText = result.value;
              if (data.node && data.node.name) setNodeName(data.node.name);
              renderTotals(data);
              renderPods(data);
              renderAnomalies(data);
            }
          } catch (e) {
            errors.push("bad JSON from " + (index === 0 ? "api/v1/cpumap" : "api/v1/ledger"));
          }
        });
        var status = $("status");
        if (errors.length) {
          status.textContent = "Update failed: " + errors.join("; ") +
            (state.updated ? " — showing data from " + state.updated : "");
          status.className = "error";
        } else {
          state.updated = new Date().toLocaleTimeString();
          status.textContent = "Live: refreshed every 15 s.";
          status.className = "ok";
          $("updated").textContent = "updated " + state.updated;
        }
        return refreshLoad();
      });
  }

  function start() {
    var map = $("cpumap");
    map.addEventListener("mouseover", onMapEvent);
    map.addEventListener("focusin", onMapEvent);
    map.addEventListener("keydown", onMapKey);
    map.addEventListener("mouseleave", function () {
      if (!(document.activeElement && map.contains(document.activeElement))) showDetail(null);
    });
    refresh();
    window.setInterval(refresh, REFRESH_MS);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
