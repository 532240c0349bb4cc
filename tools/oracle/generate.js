#!/usr/bin/env node
// Regenerates models/tokenizer/testdata from Hugging Face `tokenizers` (the
// official Node binding, the oracle) and the real tokenizer.json files shipped
// in the @lenml/tokenizer-* packages.
//
//   cd tools/oracle && npm ci && node generate.js
//
// Writes (relative to the repository root):
//   models/tokenizer/testdata/corpus.jsonl          one input per line:
//       {"name": ..., "text": "..."}  or  {"name": ..., "hex": "..."} (raw bytes,
//       possibly invalid UTF-8; the oracle sees them through TextDecoder, i.e.
//       each maximal invalid subsequence becomes U+FFFD)
//   models/tokenizer/testdata/<tok>/tokenizer.json  copied from the package
//   models/tokenizer/testdata/<tok>/overrides.json  (variants) {"base": ..., "override": {...}}
//   models/tokenizer/testdata/<tok>/expected.jsonl  one line per case:
//       {"case": i, "add_special_tokens": b, "ids": [...], "decoded": s, "decoded_skip": s}
//       {"decode_ids": [...], "decoded": s, "decoded_skip": s}   (random id sequences)
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('tokenizers');
const corpusLib = require('./corpus');

const ROOT = path.resolve(__dirname, '../..');
const OUT = path.join(ROOT, 'models/tokenizer/testdata');
const PKG = path.join(__dirname, 'node_modules/@lenml');

const TOKENIZERS = [
  { name: 'gpt2', pkg: 'tokenizer-gpt2' },
  { name: 'llama2', pkg: 'tokenizer-llama2' },
  { name: 'llama3', pkg: 'tokenizer-llama3' },
  { name: 'qwen2_5', pkg: 'tokenizer-qwen2_5' },
  { name: 'qwen3', pkg: 'tokenizer-qwen3' },
  { name: 'deepseek_v3', pkg: 'tokenizer-deepseek_v3' },
  // Variants: a real file with some components replaced, to cover components
  // (Metaspace, other decoders) that the packaged files do not use.
  { name: 'llama2_metaspace', base: 'llama2', override: {
      // Mistral v0.3 style: Metaspace pre-tokenizer instead of Prepend+Replace.
      normalizer: null,
      pre_tokenizer: { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'first', split: false },
  } },
  { name: 'llama2_metaspace_always', base: 'llama2', override: {
      normalizer: { type: 'Sequence', normalizers: [{ type: 'NFKC' }] },
      pre_tokenizer: { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: true },
      decoder: { type: 'Sequence', decoders: [{ type: 'ByteFallback' },
          { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: true }] },
      post_processor: { type: 'TemplateProcessing',
          single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
                   { SpecialToken: { id: '</s>', type_id: 0 } }],
          pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
          special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] },
                            '</s>': { id: '</s>', ids: [2], tokens: ['</s>'] } } },
  } },
  { name: 'gpt2_digits_nfd', base: 'gpt2', override: {
      normalizer: { type: 'Sequence', normalizers: [{ type: 'NFD' }, { type: 'Lowercase' }] },
      pre_tokenizer: { type: 'Sequence', pretokenizers: [
          { type: 'Digits', individual_digits: true },
          { type: 'Split', pattern: { String: 'e' }, behavior: 'MergedWithPrevious', invert: false },
          { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true }] },
  } },
];

// Deterministic PRNG (mulberry32) so regeneration is reproducible.
function rng(seed) {
  return function () {
    seed |= 0; seed = (seed + 0x6D2B79F5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function loadJson(t) {
  if (t.pkg) return JSON.parse(fs.readFileSync(path.join(PKG, t.pkg, 'models/tokenizer.json'), 'utf8'));
  const base = JSON.parse(fs.readFileSync(path.join(PKG, TOKENIZERS.find((b) => b.name === t.base).pkg,
                                                     'models/tokenizer.json'), 'utf8'));
  return Object.assign(base, t.override);
}

function inputString(entry) {
  if (entry.text !== undefined) return entry.text;
  return new TextDecoder('utf-8').decode(Buffer.from(entry.hex, 'hex'));
}

async function main() {
  fs.mkdirSync(OUT, { recursive: true });
  const specialsAll = new Set();
  for (const t of TOKENIZERS) {
    for (const a of loadJson(t).added_tokens) if (specialsAll.size < 400 && a.id < 200000) specialsAll.add(a.content);
  }
  const corpus = corpusLib.build(rng(1234));
  fs.writeFileSync(path.join(OUT, 'corpus.jsonl'), corpus.map((e) => JSON.stringify(e)).join('\n') + '\n');

  for (const t of TOKENIZERS) {
    const json = loadJson(t);
    const dir = path.join(OUT, t.name);
    fs.mkdirSync(dir, { recursive: true });
    if (t.pkg) {
      fs.copyFileSync(path.join(PKG, t.pkg, 'models/tokenizer.json'), path.join(dir, 'tokenizer.json'));
    } else {
      fs.writeFileSync(path.join(dir, 'overrides.json'),
                       JSON.stringify({ base: t.base, override: t.override }, null, 1) + '\n');
    }
    const tok = Tokenizer.fromString(JSON.stringify(json));
    const lines = [];
    // Per-tokenizer extra inputs: its own added tokens embedded in text.
    const added = json.added_tokens;
    const r = rng(99);
    const extra = [];
    for (let k = 0; k < 12; k++) {
      const a = added[Math.floor(r() * added.length)].content;
      const b = added[Math.floor(r() * added.length)].content;
      extra.push({ name: 'own_added_' + k, text: ['Hello ' + a + ' world', a + b + '\n' + a, ' ' + a + '  x' + b + 'y',
                                                  '中文' + a + '😀' + b][k % 4] });
    }
    const cases = corpus.concat(extra);
    for (let i = 0; i < cases.length; i++) {
      const text = inputString(cases[i]);
      for (const add of [false, true]) {
        const enc = await tok.encode(text, null, { addSpecialTokens: add });
        const ids = enc.getIds();
        const line = { case: i };
        if (i >= corpus.length) line.text = text;  // per-tokenizer inputs are not in corpus.jsonl
        lines.push(JSON.stringify(Object.assign(line, {
          add_special_tokens: add, ids,
          decoded: await tok.decode(ids, false), decoded_skip: await tok.decode(ids, true),
        })));
      }
    }
    // Random id sequences: every id in range, biased to byte tokens and added tokens.
    const vocabSize = tok.getVocabSize(true);
    const maxId = Math.max(...added.map((a) => a.id), vocabSize - 1);
    const rr = rng(7);
    const known = new Set(Object.values(tok.getVocab(true)));
    for (let k = 0; k < 150; k++) {
      const n = 1 + Math.floor(rr() * 24);
      const ids = [];
      for (let j = 0; j < n; j++) {
        const p = rr();
        if (p < 0.15) ids.push(added[Math.floor(rr() * added.length)].id);
        else if (p < 0.5) ids.push(Math.floor(rr() * 300));
        else ids.push(Math.floor(rr() * (maxId + 1)));
      }
      const good = ids.filter((x) => known.has(x));
      if (!good.length) continue;
      lines.push(JSON.stringify({ decode_ids: good, decoded: await tok.decode(good, false),
                                  decoded_skip: await tok.decode(good, true) }));
    }
    fs.writeFileSync(path.join(dir, 'expected.jsonl'), lines.join('\n') + '\n');
    console.log(`${t.name}: ${lines.length} cases`);
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
