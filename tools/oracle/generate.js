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
  // Added-token options no packaged file uses: lstrip / rstrip / single_word,
  // a non-special token, a normalized one (filled in from llama3's list by
  // applyAddedOptions), and a Sequence post-processor adding BOS.
  { name: 'llama3_added_options', base: 'llama3', addedOptions: {
      128002: { lstrip: true }, 128003: { rstrip: true }, 128004: { single_word: true },
      128005: { lstrip: true, rstrip: true }, 128006: { special: false },
      128007: { normalized: true, special: false, single_word: true },
  }, override: {
      // Meta's own Llama-3 files add BOS this way.
      post_processor: { type: 'Sequence', processors: [
          { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
          { type: 'TemplateProcessing',
            single: [{ SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
            pair: [{ SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
                   { SpecialToken: { id: '<|begin_of_text|>', type_id: 1 } }, { Sequence: { id: 'B', type_id: 1 } }],
            special_tokens: { '<|begin_of_text|>': { id: '<|begin_of_text|>', ids: [128000],
                                                      tokens: ['<|begin_of_text|>'] } } }] },
  } },
  // The remaining implemented components, on GPT-2's vocab (chars outside
  // the byte alphabet are dropped by BPE without unk_token, as in HF).
  { name: 'gpt2_misc_a', base: 'gpt2', override: {
      normalizer: { type: 'Sequence', normalizers: [{ type: 'NFKD' }, { type: 'StripAccents' },
          { type: 'Strip', strip_left: true, strip_right: true },
          { type: 'Replace', pattern: { Regex: '\\s{2,}' }, content: ' ' }] },
      pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'Whitespace' },
          { type: 'Punctuation', behavior: 'Contiguous' }, { type: 'ByteLevel', add_prefix_space: false,
            trim_offsets: true, use_regex: false }] },
      post_processor: { type: 'RobertaProcessing', sep: ['<|endoftext|>', 50256], cls: ['<|endoftext|>', 50256],
                        trim_offsets: true, add_prefix_space: true },
      decoder: { type: 'Sequence', decoders: [{ type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
          { type: 'Strip', content: ' ', start: 2, stop: 0 }] },  // stop > 0 panics in HF on empty text
  } },
  { name: 'gpt2_misc_b', base: 'gpt2', override: {
      normalizer: null,
      pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'BertPreTokenizer' },
          { type: 'Split', pattern: { Regex: '[aeiou]' }, behavior: 'MergedWithNext', invert: false },
          { type: 'Split', pattern: { String: 'x' }, behavior: 'Removed', invert: false },
          { type: 'Split', pattern: { Regex: '\\d+' }, behavior: 'Contiguous', invert: true },
          { type: 'WhitespaceSplit' }] },
      post_processor: { type: 'BertProcessing', sep: ['<|endoftext|>', 50256], cls: ['!', 0] },
      decoder: { type: 'Sequence', decoders: [{ type: 'WordPiece', prefix: 'Ġ', cleanup: true },
          { type: 'BPEDecoder', suffix: 'ing' }] },
  } },
  // SentencePiece BPE without byte fallback: unknown chars become <unk>, fused.
  { name: 'llama2_unk', base: 'llama2', override: { 'model.byte_fallback': false, 'model.fuse_unk': true } },
  // A small synthetic BPE (written out in full) for continuing_subword_prefix,
  // end_of_word_suffix, unk without fusing, and the matching BPEDecoder.
  { name: 'tiny_affixes', json: tinyAffixes() },
  // A small synthetic WordPiece (BERT layout) and a cased variant.
  { name: 'tiny_wordpiece', json: tinyWordPiece(true) },
  { name: 'tiny_wordpiece_cased', json: tinyWordPiece(false) },
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

function tinyAffixes() {
  const vocab = { '[UNK]': 0 };
  for (const c of 'abcdefghijklmnopqrstuvwxyz0123456789.,!?\'') {
    for (const form of [c, '##' + c, c + '</w>', '##' + c + '</w>']) vocab[form] = Object.keys(vocab).length;
  }
  const merges = [['t', '##h'], ['th', '##e</w>'], ['##e', '##r</w>'], ['i', '##n'], ['in', '##g</w>'],
                  ['a', '##n'], ['an', '##d</w>'], ['##i', '##n'], ['##in', '##g</w>'], ['th', '##e']];
  for (const [a, b] of merges) {
    const merged = a + b.slice(2);
    if (!(merged in vocab)) vocab[merged] = Object.keys(vocab).length;
  }
  return {
    version: '1.0', truncation: null, padding: null,
    added_tokens: [{ id: 0, content: '[UNK]', single_word: false, lstrip: false, rstrip: false,
                     normalized: false, special: true }],
    normalizer: { type: 'Lowercase' },
    pre_tokenizer: { type: 'Whitespace' },
    post_processor: null,
    decoder: { type: 'BPEDecoder', suffix: '</w>' },
    model: { type: 'BPE', dropout: null, unk_token: '[UNK]', continuing_subword_prefix: '##',
             end_of_word_suffix: '</w>', fuse_unk: false, byte_fallback: false, ignore_merges: false,
             vocab, merges: merges.map(([a, b]) => a + ' ' + b) },
  };
}

function tinyWordPiece(uncased) {
  const vocab = {};
  const add = (t) => { if (!(t in vocab)) vocab[t] = Object.keys(vocab).length; };
  for (const t of ['[PAD]', '[UNK]', '[CLS]', '[SEP]']) add(t);
  const chars = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?\'"-()<>|_中文日本語éÅ\u0301';
  for (const c of chars) { add(c); add('##' + c); }
  for (const w of ['the', 'quick', 'brown', 'fox', 'play', '##ing', '##ed', '##s', 'un', '##believ', '##able',
                   'The', 'I', "'", 'm', 'you', '##re', 'code', 'def', 'return', 'int', 'main', 'cafe', 'naive',
                   '##ly', 'word', '12', '##34', 'hello', 'world', 'Hello', 'World']) add(w);
  const added = ['[PAD]', '[UNK]', '[CLS]', '[SEP]'].map((c) => ({ id: vocab[c], content: c, single_word: false,
      lstrip: false, rstrip: false, normalized: false, special: true }));
  return {
    version: '1.0', truncation: null, padding: null, added_tokens: added,
    normalizer: uncased
      ? { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true }
      : { type: 'BertNormalizer', clean_text: false, handle_chinese_chars: false, strip_accents: true, lowercase: false },
    pre_tokenizer: { type: 'BertPreTokenizer' },
    post_processor: { type: 'BertProcessing', sep: ['[SEP]', vocab['[SEP]']], cls: ['[CLS]', vocab['[CLS]']] },
    decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
    model: { type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##',
             max_input_chars_per_word: uncased ? 100 : 8, vocab },
  };
}

function applyAddedOptions(t) {
  if (!t.addedOptions || t.override.added_tokens) return;
  const base = JSON.parse(fs.readFileSync(path.join(PKG, TOKENIZERS.find((b) => b.name === t.base).pkg,
                                                    'models/tokenizer.json'), 'utf8'));
  t.override.added_tokens = base.added_tokens.map((a) => Object.assign({}, a, t.addedOptions[a.id] || {}));
}

function loadJson(t) {
  if (t.json) return JSON.parse(JSON.stringify(t.json));
  applyAddedOptions(t);
  if (t.pkg) return JSON.parse(fs.readFileSync(path.join(PKG, t.pkg, 'models/tokenizer.json'), 'utf8'));
  const base = JSON.parse(fs.readFileSync(path.join(PKG, TOKENIZERS.find((b) => b.name === t.base).pkg,
                                                     'models/tokenizer.json'), 'utf8'));
  // Keys with a dot set a nested field ("model.byte_fallback").
  for (const [key, value] of Object.entries(t.override)) {
    const parts = key.split('.');
    let obj = base;
    for (const p of parts.slice(0, -1)) obj = obj[p];
    obj[parts[parts.length - 1]] = value;
  }
  return base;
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
    if (t.json) {
      fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(t.json, null, 1) + '\n');
    } else if (t.pkg) {
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
    // The first added tokens in context: whitespace on either side, glued to
    // words, at the ends of the text.
    for (const a of added.slice(0, 8)) {
      const c = a.content;
      extra.push({ name: 'added_ctx', text: ' x ' + c + '  y' });
      extra.push({ name: 'added_ctx', text: 'word' + c + 'word_' + c + '_ ' + c });
      extra.push({ name: 'added_ctx', text: c + '\n\t' + c + c + ' ' });
      extra.push({ name: 'added_ctx', text: '中' + c + '。' + c.slice(0, -1) + ' ' + c + '9' });
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
