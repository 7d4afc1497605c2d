// Jazzer.js 4.0.0 ships its libFuzzer addon (fuzzer-linux-x64.node) built against glibc 2.38 and
// GCC 13's libstdc++. It imports three symbols an older system (Debian 12: glibc 2.36, GCC 12) lacks:
// - __isoc23_strtol / __isoc23_strtoul (GLIBC_2.38): the C23 names of strtol/strtoul, which also
//   parse "0b" prefixes; libFuzzer's decimal flags parse the same with strtol/strtoul@GLIBC_2.2.5;
// - std::ios_base_library_init() (GLIBCXX_3.4.32): a marker GCC 13 emits so that the static linker
//   keeps libstdc++'s stream initialization; no relocation refers to it (never called), so it is
//   rebound to an existing GLIBCXX_3.4 function.
// This module (loaded with `node --require`) writes a patched copy once, in fuzz/.cache/, with those
// imports renamed and rebound and the two new version requirements marked weak, then redirects the
// addon's dlopen to it. node_modules is never modified. On glibc >= 2.38 it does nothing.
"use strict";
const fs = require("node:fs");
const path = require("node:path");

const SHT_DYNSYM = 11;
const SHT_GNU_VERSYM = 0x6fffffff;
const SHT_GNU_VERNEED = 0x6ffffffe;
const VER_FLG_WEAK = 0x2;
/** Per missing version: the library, the older version to rebind to, and the renamed imports. */
const RULES = [
  {
    file: "libc.so.6",
    version: "GLIBC_2.38",
    fallback: "GLIBC_2.2.5",
    renames: { __isoc23_strtol: "strtol", __isoc23_strtoul: "strtoul" },
  },
  {
    file: "libstdc++.so.6",
    version: "GLIBCXX_3.4.32",
    fallback: "GLIBCXX_3.4",
    renames: { _ZSt21ios_base_library_initv: "_ZNSt8ios_base4InitC1Ev" },
  },
];

function cString(buf, at) {
  return buf.toString("latin1", at, buf.indexOf(0, at));
}

/** Returns a patched copy of an ELF64 little-endian shared object (throws when the layout is unexpected). */
function patchGlibc238(input) {
  const buf = Buffer.from(input);
  if (buf.readUInt32BE(0) !== 0x7f454c46 || buf[4] !== 2 || buf[5] !== 1) throw new Error("not an ELF64 little-endian file");
  const shoff = Number(buf.readBigUInt64LE(0x28));
  const shentsize = buf.readUInt16LE(0x3a);
  const shnum = buf.readUInt16LE(0x3c);
  const sections = [];
  for (let i = 0; i < shnum; i++) {
    const at = shoff + i * shentsize;
    sections.push({
      type: buf.readUInt32LE(at + 4),
      offset: Number(buf.readBigUInt64LE(at + 0x18)),
      size: Number(buf.readBigUInt64LE(at + 0x20)),
      link: buf.readUInt32LE(at + 0x28),
      info: buf.readUInt32LE(at + 0x2c),
    });
  }
  const dynsym = sections.find((s) => s.type === SHT_DYNSYM);
  const versym = sections.find((s) => s.type === SHT_GNU_VERSYM);
  const verneed = sections.find((s) => s.type === SHT_GNU_VERNEED);
  if (!dynsym || !versym || !verneed) throw new Error("no .dynsym / .gnu.version / .gnu.version_r");
  const dynstr = sections[dynsym.link];
  const verstr = sections[verneed.link];
  // version indexes of each rule's missing and fallback versions; the missing one is marked weak
  const indexes = new Map(); // "file version" -> index
  let entry = verneed.offset;
  for (let n = 0; n < verneed.info; n++) {
    const file = cString(buf, verstr.offset + buf.readUInt32LE(entry + 4));
    let aux = entry + buf.readUInt32LE(entry + 8);
    for (let k = 0; k < buf.readUInt16LE(entry + 2); k++) {
      const name = cString(buf, verstr.offset + buf.readUInt32LE(aux + 8));
      indexes.set(`${file} ${name}`, buf.readUInt16LE(aux + 6));
      if (RULES.some((r) => r.file === file && r.version === name)) buf.writeUInt16LE(buf.readUInt16LE(aux + 4) | VER_FLG_WEAK, aux + 4);
      aux += buf.readUInt32LE(aux + 12);
    }
    entry += buf.readUInt32LE(entry + 12);
  }
  const count = dynsym.size / 24;
  for (const rule of RULES) {
    const missing = indexes.get(`${rule.file} ${rule.version}`);
    if (missing === undefined) continue;
    const fallback = indexes.get(`${rule.file} ${rule.fallback}`);
    if (fallback === undefined) throw new Error(`no ${rule.fallback} requirement to rebind ${rule.version} imports to`);
    for (let i = 0; i < count; i++) {
      if ((buf.readUInt16LE(versym.offset + 2 * i) & 0x7fff) !== missing) continue;
      const nameAt = dynstr.offset + buf.readUInt32LE(dynsym.offset + i * 24);
      const name = cString(buf, nameAt);
      const renamed = rule.renames[name];
      if (!renamed || renamed.length > name.length) throw new Error(`${name} needs ${rule.version} and has no known older equivalent`);
      buf.write(`${renamed}\0`, nameAt, "latin1"); // not longer than the old name: fits in place
      buf.writeUInt16LE(fallback, versym.offset + 2 * i);
    }
  }
  return buf;
}

function glibcBelow238() {
  const version = process.report?.getReport?.().header?.glibcVersionRuntime;
  if (!version) return false;
  const [major, minor] = version.split(".").map(Number);
  return major < 2 || (major === 2 && minor < 38);
}

function install() {
  if (process.platform !== "linux" || process.arch !== "x64" || !glibcBelow238()) return;
  const core = require.resolve("@jazzer.js/core/package.json", { paths: [path.join(__dirname, "..")] });
  const fuzzerPackage = require.resolve("@jazzer.js/fuzzer/package.json", { paths: [path.dirname(core)] });
  const original = path.join(path.dirname(fuzzerPackage), "prebuilds", "fuzzer-linux-x64.node");
  const cacheDir = path.join(__dirname, ".cache");
  const patched = path.join(cacheDir, "fuzzer-linux-x64.compat.node");
  if (!fs.existsSync(patched)) {
    fs.mkdirSync(cacheDir, { recursive: true });
    const temporary = `${patched}.tmp-${process.pid}`;
    fs.writeFileSync(temporary, patchGlibc238(fs.readFileSync(original)));
    fs.renameSync(temporary, patched);
  }
  const dlopen = process.dlopen;
  process.dlopen = (module, filename, ...rest) => dlopen(module, path.resolve(filename) === original ? patched : filename, ...rest);
}

module.exports = { patchGlibc238 };
install();
