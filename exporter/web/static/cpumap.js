/* podres-exporter CPU map: draws every online CPU of the node, grouped by NUMA node and
 * physical core, coloured by pool (docs/design.md#cpu-pools), with the pods table and the anomalies of the
 * ledger (docs/design.md#ownership). Plain DOM, no framework; all text goes through textContent (pod and
 * container names come from the kubelet and are never interpreted as HTML).
 *
 * Data: GET api/v1/cpumap  {"node": str, "cpus": [{"id", "core", "socket", "numa_node",
 *                                                  "pool", "owner"}]}
 *       GET api/v1/ledger  the ledger JSON
 *       GET api/v1/cpuload {"cpus": {"<id>": busy share}} (optional: 404 without /proc/stat)
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
    events: [],  // [{t, label}] change events, oldest first
    selected: null,  // {kind: "pod"|"container", key: "ns/pod[/container]"}
    colourBy: "pool",
    historySeq: 0
  };

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
            "data-owner": cpu.owner || "",
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
    renderDevices(state.ledger);
    applyColour();
    applySelection();
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
    applySelection();
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
    var pod = cell.getAttribute("data-pod");
    if (pod) select("pod", pod);
  }

  /* ------------------------------------------------------------------ colour */

  /* Colour by pool (default), by each CPU's busy share (api/v1/cpuload), or by the usage of
     the container holding it: a container's CPU usage in cores (cpu_usage_cores in the
     ledger's containers, from the kernel sources when they are on) spread over its CPUs.
     Without the numbers the choice is disabled, and the map stays coloured by pool. */
  function usageTenths() {
    var out = {}, any = false;
    var containers = state.ledger && Array.isArray(state.ledger.containers) ? state.ledger.containers : [];
    containers.forEach(function (c) {
      if (!isNum(c.cpu_usage_cores) || !c.cpus) return;
      var ids = parseCpuset(c.cpus);
      if (!ids.length) return;
      any = true;
      var share = Math.min(1, Math.max(0, c.cpu_usage_cores / ids.length));
      ids.forEach(function (id) { out[id] = Math.round(share * 10); });
    });
    return any ? out : null;
  }

  function applyColour() {
    var usage = usageTenths();
    var choice = $("colour-by");
    var usageOption = choice.querySelector('option[value="usage"]');
    usageOption.disabled = usage === null || state.at !== null;
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
  }

  /* ------------------------------------------------------------------ devices */

  /* Devices on their NUMA nodes: drawn when the ledger carries them (a "devices" list of
     {resource, id, numa_nodes}); the API offers none yet (issue 26, item 1). */
  function renderDevices(ledger) {
    var map = $("cpumap");
    Array.prototype.forEach.call(map.querySelectorAll("ul.devices"), function (u) { u.parentNode.removeChild(u); });
    var devices = ledger && Array.isArray(ledger.devices) ? ledger.devices : [];
    devices.forEach(function (d) {
      (Array.isArray(d.numa_nodes) ? d.numa_nodes : []).forEach(function (n) {
        var section = map.querySelector('section.numa[data-numa="' + String(n).replace(/[^0-9]/g, "") + '"]');
        if (!section) return;
        var list = section.querySelector("ul.devices");
        if (!list) {
          list = el("ul", { "class": "devices", "aria-label": "Devices on NUMA node " + n });
          section.appendChild(list);
        }
        list.appendChild(el("li", { "class": "device", "data-resource": d.resource,
          "title": String(d.resource) + " " + String(d.id) }, String(d.resource) + " " + String(d.id)));
      });
    });
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
      item.appendChild(el("time", { "datetime": e.t }, new Date(e.ms).toLocaleTimeString()));
      item.appendChild(el("span", null, " " + e.label));
      if (state.at !== null && e.t === state.at) item.classList.add("current");
      list.appendChild(item);
    });
    $("time-label").textContent = state.at === null ? "now (live)" :
      new Date(Date.parse(state.at)).toLocaleString();
    $("time-live").hidden = state.at === null;
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
      renderTimeline();
      if (state.live) renderMap(state.live);
      setStatus();
      return refreshLoad();
    }
    var at = times[index].t;
    return settle(fetchPages(nodeQuery() + "&at=" + encodeURIComponent(at))).then(function (result) {
      if (seq !== state.historySeq) return;  // a later move won
      if (!result.ok) {
        $("status").textContent = "History unavailable: " + (result.error.message || String(result.error));
        $("status").className = "error";
        return;
      }
      state.at = at;
      state.past = result.value;
      renderTimeline();
      renderMap(pastMap(result.value));
      $("cpumap").classList.add("past");
      $("status").textContent = "History: the node at " + new Date(Date.parse(at)).toLocaleString() +
        " (" + result.value.length + " container" + (result.value.length === 1 ? "" : "s") + " held CPUs or memory).";
      $("status").className = "past";
    });
  }

  function setStatus() {
    var status = $("status");
    $("cpumap").classList.remove("past");
    if (state.at !== null) return;
    status.textContent = "Live: refreshed every 15 s.";
    status.className = "ok";
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
              renderTotals(data);
              renderPods(data);
              renderAnomalies(data);
              if (state.at === null) renderDevices(data);
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
          state.updated = new Date().toLocaleTimeString();
          setStatus();
          $("updated").textContent = "updated " + state.updated;
        }
        applySelection();
        return Promise.all([refreshLoad(), loadHistory()]);
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
