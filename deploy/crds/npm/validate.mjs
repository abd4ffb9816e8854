// Validates ServiceMonitor / PrometheusRule objects with the validators that
// @kubernetes-models/prometheus-operator generated from prometheus-operator's CRDs.
// Input: a JSON array of objects on stdin. Output: one line per object; exit 1 on any error.
import { readFileSync } from "node:fs";
import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";
import { PrometheusRule } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule";

const kinds = { ServiceMonitor, PrometheusRule };
const objects = JSON.parse(readFileSync(0, "utf8"));
let failed = 0;
for (const obj of objects) {
  const Model = kinds[obj.kind];
  const id = `${obj.kind}/${obj.metadata?.name}`;
  if (!Model) {
    console.log(`SKIP ${id}: not a prometheus-operator kind`);
    continue;
  }
  try {
    new Model(obj).validate();
    console.log(`OK ${id}`);
  } catch (err) {
    failed += 1;
    console.log(`FAIL ${id}: ${err.message ?? err}`);
  }
}
process.exit(failed ? 1 : 0);
