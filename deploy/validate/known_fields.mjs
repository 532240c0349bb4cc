// Unknown-field check for Kubernetes objects. The schemas compiled into
// `kubernetes-models` accept any extra property (the API server would drop it
// or, with strict field validation, refuse it), so a misspelled field such as
// `readinesProbe` would pass them. The same packages ship TypeScript
// declarations that list every field of every type (`export interface IProbe
// { "exec"?: ...; "grpc"?: ...; }`); this module reads those declarations and
// reports every property that the object's type does not declare.
//
// Types it cannot resolve (type aliases such as IntOrString, free-form maps,
// `any`) are not descended into, so the check is exact where the declarations
// are and silent where they are open.
import { readFileSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = join(dirname(fileURLToPath(import.meta.url)), "known_fields.mjs");
const parsedFiles = new Map();  // .d.ts path -> {imports, interfaces}

// Removes /* */ and // comments (declarations hold no such text in strings
// that matter here: property names are plain identifiers).
function stripComments(text) {
  return text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, "");
}

// Splits `text` at `sep` characters that are not nested in {}, <>, () or [].
function splitTopLevel(text, sep) {
  const parts = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if ("{<([".includes(c)) depth++;
    else if ("}>)]".includes(c)) depth--;
    else if (c === sep && depth === 0) {
      parts.push(text.slice(start, i));
      start = i + 1;
    }
  }
  parts.push(text.slice(start));
  return parts.map((p) => p.trim()).filter((p) => p.length > 0);
}

// The body of the `{ ... }` block opening at text[open].
function blockBody(text, open) {
  let depth = 0;
  for (let i = open; i < text.length; i++) {
    if (text[i] === "{") depth++;
    else if (text[i] === "}" && --depth === 0) return text.slice(open + 1, i);
  }
  throw new Error("unbalanced braces in a declaration file");
}

// Members of an object type body: {fields: Map(name -> type), open: bool}.
function parseMembers(body) {
  const fields = new Map();
  let open = false;
  for (const member of splitTopLevel(body, ";")) {
    const named = member.match(/^"([^"]+)"\??\s*:\s*([\s\S]+)$/) ??
      member.match(/^([A-Za-z_$][\w$]*)\??\s*:\s*([\s\S]+)$/);
    if (named) fields.set(named[1], named[2].trim());
    else if (member.startsWith("[")) open = true;  // index signature: any key
  }
  return { fields, open };
}

// The .d.ts an import names: relative to the importing file, or the nearest
// node_modules above it (as Node resolves packages; the packages' "exports"
// maps do not list the declaration files, so require.resolve cannot be used).
function resolveImport(fromFile, spec) {
  const bare = spec.replace(/\.js$/, "");
  if (spec.startsWith(".")) return join(dirname(fromFile), `${bare}.d.ts`);
  for (let dir = dirname(fromFile); ; dir = dirname(dir)) {
    const candidate = join(dir, "node_modules", `${bare}.d.ts`);
    if (existsSync(candidate)) return candidate;
    if (dirname(dir) === dir) return candidate;  // not found: parseFile yields nothing
  }
}

function parseFile(path) {
  if (parsedFiles.has(path)) return parsedFiles.get(path);
  const parsed = { path, imports: new Map(), interfaces: new Map() };
  parsedFiles.set(path, parsed);
  if (!existsSync(path)) return parsed;
  const text = stripComments(readFileSync(path, "utf8"));
  for (const m of text.matchAll(/import\s*(?:type\s*)?\{([^}]*)\}\s*from\s*"([^"]+)"/g)) {
    for (const name of m[1].split(",").map((s) => s.trim()).filter(Boolean)) {
      const [imported, local] = name.split(/\s+as\s+/);
      parsed.imports.set((local ?? imported).trim(), { spec: m[2], name: imported.trim() });
    }
  }
  for (const m of text.matchAll(/export interface (\w+)[^{]*\{/g)) {
    const open = m.index + m[0].length - 1;
    parsed.interfaces.set(m[1], parseMembers(blockBody(text, open)));
  }
  // `export type { IProbe as IIoK8sApiCoreV1Probe }`: the alias names the same interface.
  for (const m of text.matchAll(/export type \{([^}]*)\}/g)) {
    for (const pair of m[1].split(",")) {
      const [name, alias] = pair.split(/\s+as\s+/).map((s) => s?.trim());
      if (alias && parsed.interfaces.has(name)) {
        parsed.interfaces.set(alias, parsed.interfaces.get(name));
      }
    }
  }
  return parsed;
}

// A type expression in `file` -> {members, file} | {array: type} | {map: type} | null.
function resolveType(file, type) {
  type = type.trim();
  const array = type.match(/^Array<([\s\S]+)>$/);
  if (array) return { array: array[1], file };
  if (type.startsWith("{")) {
    const body = blockBody(type, 0);
    const index = body.trim().match(/^\[[^\]]+\]\s*:\s*([\s\S]+?);?$/);
    if (index) return { map: index[1], file };
    return { members: parseMembers(body), file };
  }
  if (!/^[A-Za-z_$][\w$]*$/.test(type)) return null;  // union, literal, primitive
  const local = parseFile(file.path).interfaces.get(type);
  if (local) return { members: local, file };
  const imported = file.imports.get(type);
  if (!imported) return null;
  const target = parseFile(resolveImport(file.path, imported.spec));
  const members = target.interfaces.get(imported.name);
  return members ? { members, file: target } : null;
}

// Appends "path: unknown field" for every undeclared property under `value`.
function walk(value, resolved, path, errors) {
  if (resolved === null || value === null || typeof value !== "object") return;
  if (resolved.array !== undefined) {
    if (!Array.isArray(value)) return;
    const element = resolveType(resolved.file, resolved.array);
    value.forEach((item, i) => walk(item, element, `${path}[${i}]`, errors));
    return;
  }
  if (resolved.map !== undefined) {
    const element = resolveType(resolved.file, resolved.map);
    for (const [key, item] of Object.entries(value)) walk(item, element, `${path}.${key}`, errors);
    return;
  }
  const { fields, open } = resolved.members;
  for (const [key, item] of Object.entries(value)) {
    const fieldType = fields.get(key);
    if (fieldType === undefined) {
      if (!open) errors.push(`${path}.${key}: unknown field`);
      continue;
    }
    walk(item, resolveType(resolved.file, fieldType), `${path}.${key}`, errors);
  }
}

// Unknown fields of `obj`, whose model module is `modulePath` (as imported)
// and whose interface is I<kind>. Throws when the declarations are missing:
// a check that silently checks nothing is worse than none.
export function unknownFields(obj, modulePath, kind) {
  const file = parseFile(resolveImport(here, modulePath));
  const members = file.interfaces.get(`I${kind}`);
  if (!members) throw new Error(`no declaration of I${kind} in ${file.path}`);
  const errors = [];
  walk(obj, { members, file }, kind, errors);
  return errors;
}

// The same walk over an embedded value of a named core type, e.g. a
// LeaderWorkerSet's pod template: `coreType` is a kubernetes-models v1 name.
export function unknownFieldsOfCoreType(value, coreType, path) {
  const file = parseFile(resolveImport(here, `kubernetes-models/v1/${coreType}`));
  const members = file.interfaces.get(`I${coreType}`);
  if (!members) throw new Error(`no declaration of I${coreType} in ${file.path}`);
  const errors = [];
  walk(value, { members, file }, path, errors);
  return errors;
}
