// Validates Kubernetes objects against the API schemas shipped in the npm
// packages `kubernetes-models` (core and apps groups) and
// `@kubernetes-models/prometheus-operator` (ServiceMonitor, PrometheusRule),
// offline, and refuses fields the API does not declare (known_fields.mjs: the
// compiled schemas alone accept any extra property). A LeaderWorkerSet
// (sigs.k8s.io/lws, whose schema no package here ships) is checked against
// its v1 field list below, and its pod templates as core PodTemplateSpecs.
// Reads one or more multi-document YAML files; prints one line per object
// and exits 1 when any object is invalid or of an unknown kind.
//   node validate.mjs rendered.yaml [more.yaml ...]
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import { PodTemplateSpec } from "kubernetes-models/v1/PodTemplateSpec";
import { unknownFields, unknownFieldsOfCoreType } from "./known_fields.mjs";

// "apps/v1" + "Deployment" -> the module that defines that model.
function modulePath(apiVersion, kind) {
  if (apiVersion.startsWith("monitoring.coreos.com/")) {
    return `@kubernetes-models/prometheus-operator/${apiVersion}/${kind}`;
  }
  return `kubernetes-models/${apiVersion}/${kind}`;
}

// leaderworkerset.x-k8s.io/v1 LeaderWorkerSet, the fields of its Go types
// (sigs.k8s.io/lws api/leaderworkerset/v1): name -> nested fields, or null
// for a leaf; "podTemplate" marks a core PodTemplateSpec.
const kLeaderWorkerSetFields = {
  apiVersion: null, kind: null, metadata: null, status: null,
  spec: {
    replicas: null, startupPolicy: null, networkConfig: {subdomainPolicy: null},
    rolloutStrategy: {type: null, rollingUpdateConfiguration: {maxUnavailable: null, maxSurge: null}},
    leaderWorkerTemplate: {
      size: null, restartPolicy: null, leaderTemplate: "podTemplate", workerTemplate: "podTemplate",
      subGroupPolicy: {subGroupSize: null, subGroupPolicyType: null},
      volumeClaimTemplates: null,
    },
  },
};

function checkLeaderWorkerSet(obj) {
  const errors = [];
  const walk = (value, fields, path) => {
    for (const [key, item] of Object.entries(value ?? {})) {
      if (!(key in fields)) {
        errors.push(`${path}.${key}: unknown field`);
      } else if (fields[key] === "podTemplate") {
        try {
          new PodTemplateSpec(item).validate();
        } catch (e) {
          errors.push(`${path}.${key}: ${e.message}`);
        }
        errors.push(...unknownFieldsOfCoreType(item, "PodTemplateSpec", `${path}.${key}`));
      } else if (fields[key] !== null && typeof item === "object") {
        walk(item, fields[key], `${path}.${key}`);
      }
    }
  };
  walk(obj, kLeaderWorkerSetFields, "LeaderWorkerSet");
  const template = obj.spec?.leaderWorkerTemplate;
  if (!Number.isInteger(template?.size) || template.size < 1) {
    errors.push("LeaderWorkerSet.spec.leaderWorkerTemplate.size: must be an integer >= 1");
  }
  if (!template?.workerTemplate) {
    errors.push("LeaderWorkerSet.spec.leaderWorkerTemplate.workerTemplate: required");
  }
  const policy = template?.restartPolicy;
  if (policy !== undefined && !["RecreateGroupOnPodRestart", "None"].includes(policy)) {
    errors.push(`LeaderWorkerSet.spec.leaderWorkerTemplate.restartPolicy: '${policy}' is not ` +
                "RecreateGroupOnPodRestart or None");
  }
  return errors;
}

async function validateObject(obj) {
  const { apiVersion, kind } = obj;
  const name = `${kind}/${obj.metadata?.name ?? obj.metadata?.generateName ?? "?"} (${apiVersion})`;
  if (apiVersion === "leaderworkerset.x-k8s.io/v1" && kind === "LeaderWorkerSet") {
    const errors = checkLeaderWorkerSet(obj);
    if (errors.length) return `${name}: ${errors.join("; ")}`;
    console.log(`ok ${name}`);
    return null;
  }
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
  const unknown = unknownFields(obj, modulePath(apiVersion, kind), kind);
  if (unknown.length) return `${name}: ${unknown.join("; ")}`;
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
