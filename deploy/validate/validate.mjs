// Validates Kubernetes objects against the API schemas shipped in the npm
// packages `kubernetes-models` (core and apps groups) and
// `@kubernetes-models/prometheus-operator` (ServiceMonitor, PrometheusRule),
// offline. Reads one or more multi-document YAML files; prints one line per
// object and exits 1 when any object is invalid or of an unknown kind.
//   node validate.mjs rendered.yaml [more.yaml ...]
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

// "apps/v1" + "Deployment" -> the module that defines that model.
function modulePath(apiVersion, kind) {
  if (apiVersion.startsWith("monitoring.coreos.com/")) {
    return `@kubernetes-models/prometheus-operator/${apiVersion}/${kind}`;
  }
  return `kubernetes-models/${apiVersion}/${kind}`;
}

async function validateObject(obj) {
  const { apiVersion, kind } = obj;
  const name = `${kind}/${obj.metadata?.name ?? obj.metadata?.generateName ?? "?"} (${apiVersion})`;
  let Model;
  try {
    ({ [kind]: Model } = await import(modulePath(apiVersion, kind)));
  } catch (e) {
    return `${name}: no schema for this apiVersion/kind (${e.code ?? e.message})`;
  }
  if (typeof Model !== "function") return `${name}: no model class ${kind}`;
  try {
    new Model(obj).validate();
  } catch (e) {
    return `${name}: ${e.message}`;
  }
  console.log(`ok ${name}`);
  return null;
}

let errors = 0;
let objects = 0;
for (const file of process.argv.slice(2)) {
  for (const doc of parseAllDocuments(readFileSync(file, "utf8"))) {
    if (doc.errors.length) {
      console.error(`${file}: YAML error: ${doc.errors[0].message}`);
      errors++;
      continue;
    }
    const obj = doc.toJS();
    if (obj === null) continue;
    objects++;
    const error = await validateObject(obj);
    if (error) {
      console.error(`${file}: INVALID ${error}`);
      errors++;
    }
  }
}
if (objects === 0) {
  console.error("validate: no objects found");
  process.exit(1);
}
console.log(`${objects} objects, ${errors} invalid`);
process.exit(errors ? 1 : 0);
