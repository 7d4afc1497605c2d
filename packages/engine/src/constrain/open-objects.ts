/**
 * Objects that take keys beside their listed properties. JSON Schema lets an object with `properties` hold any other
 * key unless `additionalProperties` is `false` (with `additionalProperties: {schema}` the other keys' values follow
 * that schema). The grammar engine's converter (xgrammar 0.1.27) either closes such an object (strict mode) or
 * lets an additional key repeat a listed one with any value (an output the schema refuses). So each such object is
 * written by a grammar of our own: the listed properties in their order, each optional one skippable, each
 * required one enforced, and between any two of them keys that are none of the listed names (an exact complement
 * of the listed names, in JSON's canonical spelling), with values of the additional schema.
 *
 * The values' grammars stay the converter's: the object is replaced, before the converter sees it, by a placeholder
 * array `[marker, value 1, ..., value n, additional value]` whose items are `$ref`s to `$defs` holding the value
 * schemas. The grammar worker then finds the array's rule by its marker, reads the items' rule names from it and
 * puts in our object rule (with `%ITEMi%` naming item i), as it puts in the integer ranges' rules.
 *
 * Listed properties keep the order of `properties` (as the converter writes them); an object whose listed keys come
 * in another order is not accepted (tracking which keys were written in any order takes a rule per subset).
 */
import { RANGE_NAME, type RangePlaces } from "./integer-ranges.js";
import { ANNOTATIONS, mapSubschemas } from "./normalize.js";
import { ANY_CHARACTER, complement, jsonEscapeOf, literal, setEbnf } from "./regex.js";

type Schema = Record<string, unknown>;

function isObject(value: unknown): value is Schema {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Where item `i` of the placeholder's rule goes in an object's rules (the grammar worker names it). */
const itemName = (i: number): string => `%ITEM${i}%`;

/** Most listed names a closing walk is given (open objects' keys, guide.ts). */
const MAX_CLOSING_KEYS = 256;

/** Keywords an object may have beside `properties` and still be written by our rule. */
const BESIDE_PROPERTIES = new Set(["type", "properties", "required", "additionalProperties", "$defs", "definitions", ...ANNOTATIONS]);

/** The JSON text of one code point inside a string, as Python's json.dumps(ensure_ascii=False) writes it. */
function jsonText(code: number): string {
  return code === 0x22 || code === 0x5c || code < 0x20 ? jsonEscapeOf(code) : String.fromCodePoint(code);
}

interface TrieNode {
  terminal: boolean;
  children: Map<number, TrieNode>;
}

/**
 * Rules (the first named `name`) of the JSON strings, quotes included, whose value is none of `names`: a trie of the
 * names, where each node allows the closing quote unless a name ends there, each child's character, and any other
 * character followed by any rest.
 */
export function keyComplementRules(name: string, names: readonly string[]): string {
  const root: TrieNode = { terminal: false, children: new Map() };
  for (const key of names) {
    let node = root;
    for (const char of key) {
      const code = char.codePointAt(0)!;
      let child = node.children.get(code);
      if (child === undefined) {
        child = { terminal: false, children: new Map() };
        node.children.set(code, child);
      }
      node = child;
    }
    node.terminal = true;
  }
  const rules: string[] = [];
  const rest = `${name}_rest`;
  rules.push(`${rest} ::= (${ANY_CHARACTER})* "\\""`);
  let count = 0;
  const write = (node: TrieNode): string => {
    const ruleName = `${name}_n${count++}`;
    const alternatives: string[] = [];
    if (!node.terminal) alternatives.push('"\\""');
    for (const [code, child] of node.children) alternatives.push(`${literal(jsonText(code))} ${write(child)}`);
    const others = setEbnf(complement([...node.children.keys()].map((code): [number, number] => [code, code])));
    if (others !== undefined) alternatives.push(`${others} ${rest}`);
    rules.push(`${ruleName} ::= ${alternatives.map((alt) => `(${alt})`).join(" | ")}`);
    return ruleName;
  };
  const first = write(root);
  rules.unshift(`${name} ::= "\\"" ${first}`);
  return rules.join("\n");
}

/**
 * Rules (the first named `name`) of an object with the listed `keys` in their order (`required[i]`: key i must be
 * there) and, between them, any number of other keys: item i + 1 is key i's value, item keys.length + 1 the other
 * keys' value.
 */
export function openObjectRules(name: string, keys: readonly string[], required: readonly boolean[]): string {
  const n = keys.length;
  const rules: string[] = [];
  const other = `${name}_x`;
  rules.push(`${other} ::= ${name}_key ": " ${itemName(n + 1)}`);
  // no required key at or after i
  const noneRequiredFrom = (i: number): boolean => required.slice(i).every((r) => !r);
  const rule = (ruleName: string, alternatives: string[]): void => {
    rules.push(`${ruleName} ::= ${alternatives.map((alt) => `(${alt})`).join(" | ")}`);
  };
  // start: nothing written yet
  rule(`${name}_s`, [...(noneRequiredFrom(0) ? ['"}"'] : []), `${other} ${name}_r0`, `${name}_p0`]);
  for (let i = 0; i <= n; i++) {
    // after something, listed keys from i on still to come: other keys, then the end or the next listed key
    rule(`${name}_r${i}`, [`(", " ${other})* ${name}_t${i}`]);
    rule(`${name}_t${i}`, [...(noneRequiredFrom(i) ? ['"}"'] : []), ...(i < n ? [`", " ${name}_p${i}`] : [])]);
    if (i === n) continue;
    // one of the listed keys from i on: key i, or (when it is optional) a later one
    rule(`${name}_p${i}`, [
      `${literal(JSON.stringify(keys[i]))} ": " ${itemName(i + 1)} ${name}_r${i + 1}`,
      ...(!required[i] && i + 1 < n ? [`${name}_p${i + 1}`] : []),
    ]);
  }
  return [`${name} ::= "{" ${name}_s`, ...rules, keyComplementRules(`${name}_key`, keys)].join("\n");
}

/** Rules (the first named `name`) of an object whose keys are item 1's strings, each with a value of item 2. */
export function patternObjectRules(name: string): string {
  const entry = `${itemName(1)} ": " ${itemName(2)}`;
  return `${name} ::= "{" ("}" | ${entry} (", " ${entry})* "}")`;
}

/**
 * `schema` with each object that has `properties` beside which other keys are allowed written as a placeholder
 * for our rule (its rules join `places.rules`), or, under `closed` (a strict schema, a tool's parameters) or where
 * other keywords sit beside it, closed to its listed properties (a subset of what it allows: every output stays
 * valid). The listed names of the objects placed join `keys` (at most MAX_CLOSING_KEYS). `schema` is not changed.
 */
export function placeOpenObjects(schema: unknown, places: RangePlaces, closed: boolean, keys = new Set<string>()): unknown {
  const defs: Schema = {};
  let objects = 0;
  /**
   * The placeholder of an object written by our rule `rules` (its items are `values`' schemas, as `$defs`); a root's
   * definitions stay where references find them.
   */
  const placeholder = (node: Schema, out: Schema, values: readonly unknown[], rules: string): Schema => {
    const marker = `${places.prefix}${Object.keys(places.rules).length}o`;
    const object = objects++;
    const items: unknown[] = [{ const: marker }];
    values.forEach((value, i) => {
      const name = `${places.prefix}o${object}v${i}`;
      defs[name] = value;
      items.push({ $ref: `#/$defs/${name}` });
    });
    places.rules[JSON.stringify(JSON.stringify(marker))] = rules;
    const placed: Schema = { type: "array", prefixItems: items, items: false };
    for (const key of ["$defs", "definitions"]) if (node === schema && out[key] !== undefined) placed[key] = out[key];
    return placed;
  };
  const place = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(place);
    if (!isObject(node)) return node;
    const out = mapSubschemas(node, place);
    const patterns = out["patternProperties"];
    const properties = out["properties"];
    const listed = isObject(properties) && Object.keys(properties).length > 0;
    if (isObject(patterns) && listed) {
      // beside listed properties none of whose names it matches (checkJsonSchema): the object holds those only
      delete out["patternProperties"];
      out["additionalProperties"] = false;
      return out;
    }
    if (isObject(patterns)) {
      // a map keyed by a pattern (checkJsonSchema lets through one pattern, no listed properties and nothing else
      // that constrains): the keys matching it with its values, and no other key (where the schema allows other
      // keys, a subset of what it allows)
      const [pattern, value] = Object.entries(patterns)[0]!;
      return placeholder(node, out, [{ type: "string", pattern }, value], patternObjectRules(RANGE_NAME));
    }
    const additional = out["additionalProperties"];
    if (!listed || additional === false) return out;
    const open =
      !closed &&
      out["type"] === "object" &&
      Object.keys(out).every((k) => BESIDE_PROPERTIES.has(k)) &&
      (additional === undefined || additional === true || isObject(additional));
    if (!open) {
      out["additionalProperties"] = false;
      return out;
    }
    const names = Object.keys(properties);
    for (const name of names) if (keys.size < MAX_CLOSING_KEYS) keys.add(name);
    const requiredNames = new Set(Array.isArray(out["required"]) ? (out["required"] as string[]) : []);
    const values = [...names.map((key) => properties[key]), additional === undefined || additional === true ? {} : additional];
    const rules = openObjectRules(
      RANGE_NAME,
      names,
      names.map((key) => requiredNames.has(key)),
    );
    return placeholder(node, out, values, rules);
  };
  const placed = place(schema);
  if (objects === 0 || !isObject(placed)) return placed;
  return { ...placed, $defs: { ...(isObject(placed["$defs"]) ? placed["$defs"] : {}), ...defs } };
}
