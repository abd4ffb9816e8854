/* podres-exporter CPU map: draws every online CPU of the node, grouped by NUMA node and
 * physical core, coloured by pool (docs/design.md#cpu-pools), with the pods table and the anomalies of the
 * ledger (docs/design.md#ownership). Plain DOM, no framework; all text goes through textContent (pod and
 * container names come from the kubelet and are never interpreted as HTML).
 *
 * Data: GET api/v1/cpumap  {"node": str, "cpus": [{"id", "core", "socket", "numa_node",
 *                                                  "pool", "owner"}]}
 *       GET api/v1/ledger  the ledger JSON
 *       GET api/v1/cpuload {"cpus": {"<id>": busy share}} (optional: 404 without /proc/stat)
 *       GET metrics  the exposition: podres_container_cpu_usage_seconds_total and
 *           podres_last_success_timestamp_seconds, for the containers' own usage (optional)
 *       GET api/v1/assignments?node=&from=&to= / ?node=&at=  the history API (optional: 404
 *           with the history off): the change events, and the node at a past moment
 *           (docs/cpumap.md)
 * All relative to the page, so the map also works behind a path prefix (kubectl proxy).
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

  var HISTORY_WINDOW_S = 24 * 3600;  // the change events of the last day
  var HISTORY_PAGES = 10;  // at most 10 pages of 1000 intervals
  var EXCLUSIVE = { node_exclusive: true, pod_exclusive: true };

  var state = {
    cpumapText: null, ledgerText: null, updated: null, linked: false,
    live: null,  // the live cpumap JSON
    ledger: null,  // the live ledger JSON
    at: null,  // null: live; else the history API's time shown
    past: [],  // the intervals current at state.at
    pastLedger: null,  // the ledger rebuilt from the history at state.at (pastLedger())
    events: [],  // [{t, label}] change events, oldest first
    selected: null,  // {kind: "pod"|"container", key: "ns/pod[/container]"}
    colourBy: "pool",
    counts: {},  // CPUs per pool of the map drawn (the live node, or the past moment)
    focusCpu: null,  // the map's one Tab stop (roving tabindex): a CPU id
    usage: { seen: false, prev: null, cores: null },  // containers' own usage (/metrics)
    historySeq: 0
  };
  var USAGE_METRIC = "podres_container_cpu_usage_seconds_total";
  var POLL_METRIC = "podres_last_success_timestamp_seconds";
  var USAGE_RETRY_MS = 5000;  // a second reading sooner than the next refresh
  var DEVICE_CHIPS = 512;  // a bound on the chips drawn, whatever the ledger lists

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

  /* RFC 3339 in UTC, as the CLI and the API write times (format_time in
     exporter/history/timeutil.py): seconds, and a fraction only when there is one. */
  function rfc3339(ms) {
    if (!isNum(ms)) return "unknown time";
    return new Date(ms).toISOString().replace(".000Z", "Z");
  }

  /* The Pods table's reclaimed cell, by the CLI's rule (reclaimed_cell in
     exporter/render.py): a negative count is a budget that costs CPUs, "none (+N)". */
  function reclaimedCell(n) {
    if (!isNum(n)) return null;
    return n < 0 ? "none (+" + (-n) + ")" : String(n);
  }
  var COSTS_MORE = "none (+N): the pod budget pins N CPU(s) more than the per-container model would";

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

  var NO_CPU = "No CPU selected.";

  var HEAT_LEGEND = {
    busy: "Busy share of each CPU in the last poll",
    usage: "Its containers' own usage, in cores per CPU"
  };

  /* The legend says what the colours mean now: the pools, with the busy bar when the
     cells carry one; or, coloured by busy time or usage, the ramp's tenths. */
  function renderLegend(mode) {
    var legend = $("legend");
    var counts = state.counts;
    clear(legend);
    if (mode === "busy" || mode === "usage") {
      legend.setAttribute("aria-label", "Legend: " + HEAT_LEGEND[mode]);
      legend.appendChild(el("li", { "class": "legend-scale-title" }, HEAT_LEGEND[mode] + ":"));
      for (var tenth = 0; tenth <= 10; tenth += 2) {
        var step = el("li", { "class": "legend-heat", "data-heat": tenth });
        step.appendChild(el("span", { "class": "swatch", "data-heat": tenth, "aria-hidden": "true" }));
        step.appendChild(el("span", { "class": "legend-label" },
          mode === "busy" ? tenth * 10 + "%" : (tenth / 10) + (tenth === 10 ? "+ cores" : "")));
        legend.appendChild(step);
      }
      return;
    }
    legend.setAttribute("aria-label", "Legend: CPU pools on this node");
    orderedPools(counts).forEach(function (pool) {
      var item = el("li", { "class": "legend-item", "data-pool": pool });
      item.appendChild(el("span", { "class": "swatch", "data-pool": pool, "aria-hidden": "true" }));
      item.appendChild(el("span", { "class": "legend-label" }, poolLabel(pool)));
      item.appendChild(el("span", { "class": "legend-count" }, counts[pool]));
      if (POOL_HELP[pool]) item.setAttribute("title", POOL_HELP[pool]);
      legend.appendChild(item);
    });
    if (document.querySelector("#cpumap .cpu[data-busy]")) {
      var bar = el("li", { "class": "legend-busy" });
      bar.appendChild(el("span", { "class": "swatch swatch-busy", "aria-hidden": "true" }));
      bar.appendChild(el("span", { "class": "legend-label" },
        "Busy bar: the CPU's busy share in the last poll (full height 100%)"));
      legend.appendChild(bar);
    }
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
    $("cpu-detail").textContent = cell ? cell.getAttribute("data-detail") : NO_CPU;
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
    state.counts = countPools(cpus);
    renderLegend(state.colourBy);
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
            "data-owner": cpu.owner || "",
            "data-detail": detail,
            "tabindex": "-1",
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
      if (again) { state.focusCpu = focusedId; rove(again); again.focus(); showDetail(again); }
    }
    rove(null);
    renderDevices(state.ledger);
    applyColour();
    applySelection();
  }

  function onMapEvent(event) {
    var cell = event.target && event.target.closest ? event.target.closest(".cpu") : null;
    if (cell) showDetail(cell);
  }

  /* The map is one Tab stop (a roving tabindex): the CPU last focused, else the first,
     has tabindex 0 and every other -1; the arrows, Home and End move within the map, and
     Enter or Space lights the focused CPU's owner as a click does. */
  function rove(cell) {
    var cells = document.querySelectorAll("#cpumap .cpu");
    if (!cell) {
      cell = state.focusCpu === null ? null :
        document.querySelector('#cpumap .cpu[data-cpu="' + String(state.focusCpu).replace(/[^0-9]/g, "") + '"]');
      cell = cell || cells[0] || null;
    }
    for (var i = 0; i < cells.length; i++) cells[i].setAttribute("tabindex", cells[i] === cell ? "0" : "-1");
    if (cell) state.focusCpu = cell.getAttribute("data-cpu");
  }

  function onMapKey(event) {
    var cell = event.target && event.target.closest ? event.target.closest(".cpu") : null;
    if (!cell) return;
    if (event.key === "Enter" || event.key === " ") {
      selectOwner(cell);
      event.preventDefault();
      return;
    }
    var step = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 }[event.key];
    if (event.key === "Home" || event.key === "End" || step) {
      var cells = Array.prototype.slice.call(document.querySelectorAll("#cpumap .cpu"));
      var index = cells.indexOf(cell);
      var next = event.key === "Home" ? 0 : event.key === "End" ? cells.length - 1 :
        Math.max(0, Math.min(cells.length - 1, index + step));
      rove(cells[next]);
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
    var costsMore = false;
    pods.forEach(function (held) {
      var pod = held.pod;
      var row = el("tr", { "data-pod": pod.namespace + "/" + pod.name, "data-cpus": held.cpus });
      var th = el("th", { "scope": "row" });
      th.appendChild(el("button", { "type": "button", "class": "select", "data-select": "pod",
        "data-key": pod.namespace + "/" + pod.name }, pod.namespace + "/" + pod.name));
      row.appendChild(th);
      cell(row, held.cpus, "cpuset");
      cell(row, pod.budget_cpus, "num");
      cell(row, pod.pod_exclusive_cpus, "num");
      cell(row, pod.pod_shared_cpus, "num");
      cell(row, pod.pod_idle_cpus, "num");
      cell(row, pod.node_exclusive_cpus, "num");
      var reclaimed = cell(row, reclaimedCell(pod.reclaimed_cpus), "num");
      if (isNum(pod.reclaimed_cpus) && pod.reclaimed_cpus < 0) {
        reclaimed.setAttribute("title", COSTS_MORE);
        costsMore = true;
      }
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
    if (costsMore) {
      var why = el("tr", { "class": "costs-more" });
      why.appendChild(el("td", { "colspan": "10", "class": "empty" }, COSTS_MORE + "."));
      body.appendChild(why);
    }

    var cbody = $("containers").querySelector("tbody");
    clear(cbody);
    (Array.isArray(ledger.containers) ? ledger.containers : []).forEach(function (c) {
      var row = el("tr");
      var key = c.namespace + "/" + c.pod + "/" + c.name;
      var cth = el("th", { "scope": "row" });
      cth.appendChild(el("button", { "type": "button", "class": "select",
        "data-select": "container", "data-key": key }, key));
      row.setAttribute("data-container", key);
      row.appendChild(cth);
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


  /* ------------------------------------------------------------------ selection */

  /* A click on a pod or container (its row, or one of its CPUs) lights its CPUs, dims the
     others, marks the NUMA nodes it is on and says what memory it holds. */
  function select(kind, key) {
    state.selected = key ? { kind: kind, key: key } : null;
    // Clearing undoes all the map shows of a choice: the lit CPUs, the same-owner frames
    // and the detail line of the CPU clicked.
    if (!key) showDetail(null);
    applySelection();
  }

  function selectOwner(cell) {
    var pod = cell.getAttribute("data-pod");
    showDetail(cell);
    if (pod) select("pod", pod);
  }

  function memoryWords(key, kind) {
    var words = [];
    if (state.at !== null) {
      var bytes = 0, found = false, how = {};
      state.past.forEach(function (a) {
        var who = a.namespace + "/" + a.pod + (kind === "container" ? "/" + a.container : "");
        if (who !== key) return;
        found = true;
        if (isNum(a.memory_bytes)) bytes += a.memory_bytes;
        how[poolLabel(a.memory_assignment).toLowerCase()] = true;
      });
      if (found) words.push(formatBytes(bytes) + " (" + Object.keys(how).join(", ") + ")");
    } else if (state.ledger && Array.isArray(state.ledger.containers)) {
      var how2 = {};
      state.ledger.containers.forEach(function (c) {
        var who = c.namespace + "/" + c.pod + (kind === "container" ? "/" + c.name : "");
        if (who === key) how2[poolLabel(c.memory_assignment).toLowerCase()] = true;
      });
      words = Object.keys(how2);
    }
    return words.length ? "memory " + words.join(", ") : "memory unknown";
  }

  function formatBytes(n) {
    var units = [["GiB", 1073741824], ["MiB", 1048576], ["KiB", 1024]];
    for (var i = 0; i < units.length; i++) {
      if (n >= units[i][1]) return (Math.round(n / units[i][1] * 10) / 10) + " " + units[i][0];
    }
    return n + " B";
  }

  function applySelection() {
    var map = $("cpumap");
    var sel = state.selected;
    var lit = [], numas = {};
    Array.prototype.forEach.call(map.querySelectorAll(".cpu"), function (cell) {
      var on = !!sel && (sel.kind === "pod" ? cell.getAttribute("data-pod") === sel.key :
        cell.getAttribute("data-owner") === sel.key);
      cell.classList.toggle("lit", on);
      if (on) {
        lit.push(Number(cell.getAttribute("data-cpu")));
        var section = cell.closest("section.numa");
        if (section) numas[section.getAttribute("data-numa")] = true;
      }
    });
    Array.prototype.forEach.call(map.querySelectorAll("section.numa"), function (section) {
      section.classList.toggle("numa-lit", !!numas[section.getAttribute("data-numa")]);
    });
    Array.prototype.forEach.call(map.querySelectorAll(".device[data-owner]"), function (chip) {
      chip.classList.toggle("lit", !!sel && (sel.kind === "pod" ? chip.getAttribute("data-pod") === sel.key :
        chip.getAttribute("data-owner") === sel.key));
    });
    map.classList.toggle("has-selection", !!sel);
    Array.prototype.forEach.call(document.querySelectorAll("button.select"), function (b) {
      var pressed = !!sel && b.getAttribute("data-select") === sel.kind &&
        b.getAttribute("data-key") === sel.key;
      b.setAttribute("aria-pressed", pressed ? "true" : "false");
    });
    var text = "Click a pod or container (or one of its CPUs) to light its CPUs.";
    if (sel) {
      var nodes = Object.keys(numas).sort();
      text = sel.key + ": " + (lit.length ? lit.length + " CPU" + (lit.length === 1 ? "" : "s") +
        " " + formatCpuset(lit) + (nodes.length ? " on NUMA node " + nodes.join(", ") : "") :
        "no CPUs" + (state.at !== null ? " at this moment" : "")) + " · " +
        memoryWords(sel.key, sel.kind);
    }
    $("selection").textContent = text;
    $("clear-selection").hidden = !sel;
  }

  function onSelectClick(event) {
    var button = event.target && event.target.closest ? event.target.closest("button.select") : null;
    if (button) select(button.getAttribute("data-select"), button.getAttribute("data-key"));
  }

  function onMapClick(event) {
    var cell = event.target && event.target.closest ? event.target.closest(".cpu") : null;
    if (!cell) return;
    rove(cell);
    selectOwner(cell);
  }

  /* ------------------------------------------------------------------ colour */

  /* Colour by pool (default), by each CPU's busy share (api/v1/cpuload), or by the usage of
     the containers running on it: each container's own CPU usage in cores, the rate of
     podres_container_cpu_usage_seconds_total between two polls of the exporter (told apart
     by podres_last_success_timestamp_seconds, read from the same exposition), spread over
     its CPUs and summed on a CPU that several containers share. Without that series (the
     cgroup source off) the choice is not offered; until two polls were read it is
     disabled. */
  function unescapeLabel(v) {
    return v.replace(/\\(["\\n])/g, function (m, c) { return c === "n" ? "\n" : c; });
  }

  function parseExposition(text) {
    var out = { t: null, usage: {}, any: false };
    var label = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
    String(text || "").split("\n").forEach(function (line) {
      if (line.lastIndexOf(POLL_METRIC + " ", 0) === 0) {
        out.t = Number(line.slice(POLL_METRIC.length + 1).trim().split(" ")[0]);
      } else if (line.lastIndexOf(USAGE_METRIC + "{", 0) === 0) {
        var close = line.lastIndexOf("}");
        var value = Number(line.slice(close + 1).trim().split(" ")[0]);
        var labels = {}, m;
        var body = line.slice(USAGE_METRIC.length + 1, close);
        label.lastIndex = 0;
        while ((m = label.exec(body)) !== null) labels[m[1]] = unescapeLabel(m[2]);
        if (!isNum(value)) return;
        out.usage[labels.namespace + "/" + labels.pod + "/" + labels.container] = value;
        out.any = true;
      }
    });
    return out;
  }

  function applyUsageSample(text) {
    var sample = parseExposition(text);
    if (!sample.any || !isNum(sample.t)) {
      state.usage = { seen: false, prev: null, cores: null };
      return;
    }
    state.usage.seen = true;
    var prev = state.usage.prev;
    if (prev && sample.t > prev.t) {
      var cores = {}, span = sample.t - prev.t;
      Object.keys(sample.usage).forEach(function (who) {
        var before = prev.usage[who];
        // A counter that went back is a restarted container: no rate this time.
        if (isNum(before) && sample.usage[who] >= before) cores[who] = (sample.usage[who] - before) / span;
      });
      state.usage.cores = cores;
      state.usage.prev = sample;
    } else if (!prev || sample.t < prev.t) {
      state.usage.prev = sample;  // the first reading, or the exporter restarted
    }
  }

  function refreshUsage() {
    if (state.at !== null) return Promise.resolve();
    return settle(fetchText("metrics", "text/plain")).then(function (result) {
      applyUsageSample(result.ok ? result.value : "");
      applyColour();
      if (state.usage.seen && state.usage.cores === null && !state.usageRetry) {
        state.usageRetry = window.setTimeout(function () {
          state.usageRetry = null;
          refreshUsage();
        }, USAGE_RETRY_MS);
      }
    });
  }

  function usageTenths() {
    var cores = state.usage.cores;
    if (!cores) return null;
    var perCpu = {};
    var containers = state.ledger && Array.isArray(state.ledger.containers) ? state.ledger.containers : [];
    containers.forEach(function (c) {
      var used = cores[c.namespace + "/" + c.pod + "/" + c.name];
      if (!isNum(used) || !c.cpus) return;
      var ids = parseCpuset(c.cpus);
      ids.forEach(function (id) { perCpu[id] = (perCpu[id] || 0) + used / ids.length; });
    });
    var out = {};
    Object.keys(perCpu).forEach(function (id) { out[id] = Math.round(Math.min(1, perCpu[id]) * 10); });
    return out;
  }

  function applyColour() {
    var usage = usageTenths();
    var choice = $("colour-by");
    var usageOption = choice.querySelector('option[value="usage"]');
    usageOption.hidden = !state.usage.seen;
    usageOption.disabled = usage === null || state.at !== null;
    usageOption.textContent = "container's own usage" +
      (state.usage.seen && usage === null ? " (measuring: needs two polls)" : "");
    var busyOption = choice.querySelector('option[value="busy"]');
    var anyBusy = !!document.querySelector("#cpumap .cpu[data-busy]");
    busyOption.disabled = !anyBusy || state.at !== null;
    var mode = state.colourBy;
    if ((mode === "usage" && usageOption.disabled) || (mode === "busy" && busyOption.disabled)) mode = "pool";
    choice.value = mode;
    var map = $("cpumap");
    map.classList.toggle("by-heat", mode !== "pool");
    Array.prototype.forEach.call(map.querySelectorAll(".cpu"), function (cell) {
      var heat = null;
      if (mode === "busy") heat = cell.getAttribute("data-busy");
      if (mode === "usage" && usage) {
        var u = usage[cell.getAttribute("data-cpu")];
        heat = isNum(u) ? String(u) : null;
      }
      if (heat === null) cell.removeAttribute("data-heat");
      else cell.setAttribute("data-heat", heat);
    });
    renderLegend(mode);
  }

  /* ------------------------------------------------------------------ devices */

  /* Devices on their NUMA nodes, from the ledger's "devices" object (docs/design.md#devices):
     under each NUMA node, a chip per resource with its counts there (by_resource: held of
     allocatable, free), and a chip per device a container holds, with its holder (lit with
     the holder's selection). Devices without topology ("none", or a holder's report without
     NUMA nodes) and NUMA nodes the map has no CPU on go under the map. The history store
     keeps no devices, so a past moment draws none and says so. */
  function deviceList(map, numaKey) {
    var section = numaKey === "none" ? null :
      map.querySelector('section.numa[data-numa="' + String(numaKey).replace(/[^0-9]/g, "") + '"]');
    if (!section || !/^[0-9]+$/.test(String(numaKey))) {
      section = $("devices-elsewhere");
      if (!section) {
        section = el("section", { "id": "devices-elsewhere", "class": "numa devices-elsewhere", "data-numa": "" });
        section.appendChild(el("h3", null, "Devices without a NUMA node on this map"));
        map.appendChild(section);
      }
    }
    var list = section.querySelector("ul.devices");
    if (!list) {
      var label = numaKey === "none" || !section.classList.contains("numa") || section.id ?
        "Devices without a NUMA node on this map" : "Devices on NUMA node " + numaKey;
      list = el("ul", { "class": "devices", "aria-label": label });
      section.appendChild(list);
    }
    return list;
  }

  function renderDevices(ledger) {
    var map = $("cpumap");
    Array.prototype.forEach.call(map.querySelectorAll("ul.devices"), function (u) { u.parentNode.removeChild(u); });
    var elsewhere = $("devices-elsewhere");
    if (elsewhere) elsewhere.parentNode.removeChild(elsewhere);
    if (state.at !== null) return;
    var devices = ledger && ledger.devices && typeof ledger.devices === "object" ? ledger.devices : {};
    var byResource = devices.by_resource && typeof devices.by_resource === "object" ? devices.by_resource : {};
    var holders = Array.isArray(devices.containers) ? devices.containers : [];
    var drawn = 0;
    Object.keys(byResource).sort().forEach(function (resource) {
      var perNuma = byResource[resource] || {};
      Object.keys(perNuma).forEach(function (numa) {
        var c = perNuma[numa] || {};
        if (drawn++ >= DEVICE_CHIPS) return;
        var text = resource + ": " + (isNum(c.assigned) ? c.assigned : "?") + " of " +
          (isNum(c.allocatable) ? c.allocatable : "?") + " held, " + (isNum(c.free) ? c.free : "?") + " free";
        deviceList(map, numa).appendChild(el("li", { "class": "device device-count",
          "data-resource": resource, "title": text }, text));
      });
    });
    holders.forEach(function (h) {
      var pod = h.namespace + "/" + h.pod, who = pod + "/" + h.container;
      (Array.isArray(h.devices) ? h.devices : []).forEach(function (d) {
        var nodes = Array.isArray(d.numa_nodes) && d.numa_nodes.length ? d.numa_nodes : ["none"];
        nodes.forEach(function (n) {
          (Array.isArray(d.device_ids) ? d.device_ids : []).forEach(function (id) {
            if (drawn++ >= DEVICE_CHIPS) return;
            var text = String(d.resource) + " " + String(id) + " · " + who;
            deviceList(map, n).appendChild(el("li", { "class": "device device-held",
              "data-resource": d.resource, "data-device": id, "data-pod": pod, "data-owner": who,
              "title": text }, text));
          });
        });
      });
    });
    if (drawn > DEVICE_CHIPS) {
      deviceList(map, "none").appendChild(el("li", { "class": "device" },
        (drawn - DEVICE_CHIPS) + " more device entries not drawn (see api/v1/devices)"));
    }
  }

  /* ------------------------------------------------------------------ time */

  /* The history API's change events of the last day beside a slider: each position is the
     node just after one event (the last is live). Moving it asks the history API for the
     intervals current at that moment and draws the map from them, on the live map's CPUs
     (a CPU no container held is shared; the reserved CPUs are today's). */
  function fetchPages(url) {
    var items = [];
    function page(cursor, left) {
      return fetchText(url + (cursor ? "&cursor=" + encodeURIComponent(cursor) : ""))
        .then(function (text) {
          var body = JSON.parse(text);
          items = items.concat(Array.isArray(body.items) ? body.items : []);
          if (body.next_cursor && left > 1) return page(body.next_cursor, left - 1);
          return items;
        });
    }
    return page(null, HISTORY_PAGES);
  }

  function nodeQuery() {
    return "api/v1/assignments?node=" + encodeURIComponent(state.live && state.live.node || "") +
      "&limit=1000";
  }

  function whoOf(a) { return a.namespace + "/" + a.pod + "/" + a.container; }

  function buildEvents(items) {
    var events = [];
    items.forEach(function (a) {
      var what = poolLabel(a.assignment).toLowerCase() + (a.cpus ? " " + a.cpus : "");
      events.push({ t: a.valid_from, ms: Date.parse(a.valid_from), label: whoOf(a) + " starts: " + what });
      if (a.valid_to) {
        events.push({ t: a.valid_to, ms: Date.parse(a.valid_to), label: whoOf(a) + " ends: " + what });
      }
    });
    events.sort(function (a, b) { return a.ms - b.ms; });
    var now = Date.now() / 1000;
    return events.filter(function (e) { return isNum(e.ms) && e.ms / 1000 >= now - HISTORY_WINDOW_S; });
  }

  function eventTimes() {
    var times = [];
    state.events.forEach(function (e) { if (!times.length || times[times.length - 1].ms !== e.ms) times.push(e); });
    return times;
  }

  function loadHistory() {
    if (!state.live || !state.live.node || state.at !== null) return Promise.resolve();
    var to = Math.ceil(Date.now() / 1000);
    return settle(fetchPages(nodeQuery() + "&from=" + (to - HISTORY_WINDOW_S) + "&to=" + to))
      .then(function (result) {
        var panel = $("timeline");
        if (!result.ok) { panel.hidden = true; return; }
        state.events = buildEvents(result.value);
        panel.hidden = false;
        renderTimeline();
      });
  }

  function renderTimeline() {
    var times = eventTimes();
    var slider = $("time-slider");
    slider.max = String(times.length);
    if (state.at === null) slider.value = String(times.length);
    var list = $("events");
    clear(list);
    if (!state.events.length) {
      list.appendChild(el("li", { "class": "empty" }, "No change in the last 24 hours."));
    }
    state.events.forEach(function (e) {
      var item = el("li", { "class": "event", "data-t": e.t }, null);
      item.appendChild(el("time", { "datetime": e.t }, rfc3339(e.ms)));
      item.appendChild(el("span", null, " " + e.label));
      if (state.at !== null && e.t === state.at) item.classList.add("current");
      list.appendChild(item);
    });
    $("time-label").textContent = state.at === null ? "now (live)" : rfc3339(Date.parse(state.at));
    $("time-live").hidden = state.at === null;
    scrollToCurrent(list);
  }

  /* The highlighted events in view within the list (the list scrolls, not the page). */
  function scrollToCurrent(list) {
    var current = list.querySelectorAll(".event.current");
    if (!current.length) return;
    var first = current[0], last = current[current.length - 1];
    var top = first.offsetTop, bottom = last.offsetTop + last.offsetHeight;
    if (top < list.scrollTop || bottom > list.scrollTop + list.clientHeight) {
      list.scrollTop = Math.max(0, top - Math.max(0, (list.clientHeight - (bottom - top)) / 2));
    }
  }

  /* At a past moment the map, legend, selection and event list show that moment, and so do
     the totals, the Pods and Containers tables and the anomalies, rebuilt from the history
     API's records current at that instant (pastLedger); each says which of its columns the
     history store does not keep. A part the history could not rebuild (the anomalies route
     failing) stays live and says so, as the devices do (the store keeps none per moment). */
  var PAST_GAPS = {
    "the totals": "reclaimed and reclaimable cores are not kept per moment",
    "the Pods and Containers tables": "a pod's budget, idle CPUs, reclaimed and reclaimable " +
      "cores and basis are not kept per moment (—)",
    "the anomalies": ""
  };

  function markLive() {
    var past = state.at !== null;
    var rebuilt = past && state.pastLedger ? state.pastLedger.rebuilt : {};
    Array.prototype.forEach.call(document.querySelectorAll("[data-live-part]"), function (part) {
      var name = part.getAttribute("data-live-part");
      var fromHistory = past && !!rebuilt[name];
      part.classList.toggle("live-while-past", past && !fromHistory);
      part.classList.toggle("past-part", fromHistory);
      var note = part.querySelector(".live-note");
      if (!note) return;
      note.hidden = !past;
      if (!past) note.textContent = "";
      else if (fromHistory) {
        note.textContent = "At " + rfc3339(Date.parse(state.at)) + ": " + name +
          " from the history store" + (PAST_GAPS[name] ? "; " + PAST_GAPS[name] : "") + ".";
      } else {
        note.textContent = "Live: " + name + " as of now" +
          (state.updated ? " (" + state.updated + ")" : "") +
          ", not at the moment shown (" + rfc3339(Date.parse(state.at)) + ").";
      }
    });
  }

  /* The ledger's shape, rebuilt from the assignment intervals (and anomalies, when the
     history API answered) current at a past moment: the containers as recorded, each pod's
     exclusive, shared and node-exclusive CPUs from its containers' sets, the node's size from
     the live node (its CPUs do not change). What the history does not keep is null. */
  function pastLedger(items, anomalies) {
    var pods = [], byKey = {};
    var containers = items.map(function (a) {
      var key = a.namespace + "/" + a.pod;
      if (!byKey[key]) {
        byKey[key] = { namespace: a.namespace, name: a.pod, sets: {} };
        pods.push(byKey[key]);
      }
      var sets = byKey[key].sets;
      sets[a.assignment] = (sets[a.assignment] || []).concat(parseCpuset(a.cpus));
      return { namespace: a.namespace, pod: a.pod, name: a.container, sidecar: a.sidecar,
        assignment: a.assignment, memory_assignment: a.memory_assignment, cpus: a.cpus,
        cpu_count: a.cpu_count };
    });
    function count(ids) { return ids ? parseCpuset(formatCpuset(ids)).length : 0; }
    pods = pods.map(function (p) {
      var all = [];
      Object.keys(p.sets).forEach(function (k) { all = all.concat(p.sets[k]); });
      return { namespace: p.namespace, name: p.name, cpus: formatCpuset(all),
        budget_cpus: null, pod_exclusive_cpus: count(p.sets.pod_exclusive),
        pod_shared_cpus: count(p.sets.pod_shared), pod_idle_cpus: null,
        node_exclusive_cpus: count(p.sets.node_exclusive), reclaimed_cpus: null,
        reclaimable_cpus: null, estimate_basis: null };
    });
    var live = state.ledger || {};
    return { node: live.node, pods: pods, containers: containers,
      anomalies: anomalies || (live.anomalies || []),
      rebuilt: { "the totals": !!anomalies, "the Pods and Containers tables": true,
        "the anomalies": !!anomalies } };
  }

  /* The totals, tables and anomalies of ``ledger``; of a past one, the parts it could not
     rebuild from the live ledger (marked live by markLive). */
  function renderLedgerParts(ledger) {
    var live = state.ledger || {};
    var own = function (name) { return !ledger.rebuilt || ledger.rebuilt[name]; };
    renderTotals(own("the totals") ? ledger : live);
    renderPods(ledger);
    renderAnomalies(own("the anomalies") ? ledger : live);
  }

  function pastMap(items) {
    var owner = {};
    items.forEach(function (a) {
      parseCpuset(a.cpus).forEach(function (id) {
        var held = owner[id];
        // An exclusive holder wins over the pod shared pool it sits beside.
        if (!held || (EXCLUSIVE[a.assignment] && !EXCLUSIVE[held.pool])) {
          owner[id] = { pool: a.assignment, owner: EXCLUSIVE[a.assignment] ? whoOf(a) : a.namespace + "/" + a.pod };
        }
      });
    });
    var cpus = (state.live.cpus || []).map(function (c) {
      var held = owner[c.id];
      var pool = c.pool === "reserved" ? "reserved" : held ? held.pool : "node_shared";
      return { id: c.id, core: c.core, socket: c.socket, numa_node: c.numa_node, pool: pool,
        owner: held && c.pool !== "reserved" ? held.owner : "" };
    });
    return { node: state.live.node, cpus: cpus };
  }

  function showAt(index) {
    var times = eventTimes();
    var seq = ++state.historySeq;
    if (index >= times.length) {
      state.at = null;
      state.past = [];
      state.pastLedger = null;
      renderTimeline();
      if (state.live) renderMap(state.live);
      if (state.ledger) renderLedgerParts(state.ledger);
      setStatus();
      return Promise.all([refreshLoad(), refreshUsage()]);
    }
    var at = times[index].t;
    var node = encodeURIComponent(state.live && state.live.node || "");
    return Promise.all([
      settle(fetchPages(nodeQuery() + "&at=" + encodeURIComponent(at))),
      settle(fetchPages("api/v1/anomalies?node=" + node + "&limit=1000&at=" + encodeURIComponent(at)))
    ]).then(function (results) {
      var result = results[0];
      if (seq !== state.historySeq) return;  // a later move won
      if (!result.ok) {
        $("status").textContent = "History unavailable: " + (result.error.message || String(result.error));
        $("status").className = "error";
        return;
      }
      state.at = at;
      state.past = result.value;
      state.pastLedger = pastLedger(result.value, results[1].ok ? results[1].value : null);
      renderTimeline();
      renderLedgerParts(state.pastLedger);
      renderMap(pastMap(result.value));
      $("cpumap").classList.add("past");
      $("status").textContent = "History: the node at " + rfc3339(Date.parse(at)) +
        " (" + result.value.length + " container" + (result.value.length === 1 ? "" : "s") + " held CPUs or memory; devices are not drawn: no history API route reads them yet).";
      $("status").className = "past";
      markLive();
    });
  }

  function setStatus() {
    var status = $("status");
    markLive();
    $("cpumap").classList.remove("past");
    if (state.at !== null) return;
    status.textContent = "Live: refreshed every 15 s.";
    status.className = "ok";
  }

  /* ------------------------------------------------------------------ refresh */

  function fetchText(url, accept) {
    return fetch(url, { cache: "no-store", headers: { "Accept": accept || "application/json" } })
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
    if (state.at !== null) return Promise.resolve();  // the busy share is now's, not then's
    return settle(fetchText("api/v1/cpuload")).then(function (result) {
      applyLoad(result.ok ? result.value : "{}");
      applyColour();
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
              state.live = data;
              setNodeName(data.node);
              if (state.at === null) renderMap(data);
            } else if (index === 1 && result.value !== state.ledgerText) {
              state.ledgerText = result.value;
              state.ledger = data;
              if (data.node && data.node.name) setNodeName(data.node.name);
              if (state.at === null) {
                renderLedgerParts(data);
                renderDevices(data);
              }
              applyColour();
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
          state.updated = rfc3339(Math.floor(Date.now() / 1000) * 1000);
          setStatus();
          $("updated").textContent = "updated " + state.updated;
        }
        applySelection();
        return Promise.all([refreshLoad(), refreshUsage(), loadHistory()]);
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
    map.addEventListener("click", onMapClick);
    $("pods").addEventListener("click", onSelectClick);
    $("containers").addEventListener("click", onSelectClick);
    $("clear-selection").addEventListener("click", function () { select(null, null); });
    $("colour-by").addEventListener("change", function (event) {
      state.colourBy = event.target.value;
      applyColour();
    });
    $("time-slider").addEventListener("input", function (event) {
      showAt(Number(event.target.value));
    });
    $("time-live").addEventListener("click", function () { showAt(Infinity); });
    refresh();
    window.setInterval(refresh, REFRESH_MS);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
